// The optimizer's use of the exact models (private to it): a better schedule in the winner's
// placement and tighter bounds in every placement searched, in the time left.
#pragma once

#include <chrono>
#include <vector>

#include "optpipe/optimize.h"
#include "optpipe/problem.h"

namespace optpipe {

// Whether run_exact uses CP-SAT on p (its library is there and the model is not too large), or
// else Gecode and CBC.
bool exact_uses_cp_sat(const Problem& p, const OptimizeOptions& options);

// `problems` and `bounds` are parallel: each placement searched and its bound so far, raised here
// where a model proves more. `out` holds the winner; it is replaced by a faster model solution.
void run_exact(const OptimizeOptions& options, std::chrono::steady_clock::time_point t0,
               const std::vector<const Problem*>* problems, std::vector<double>* bounds, OptimizeResult* out);

}  // namespace optpipe
