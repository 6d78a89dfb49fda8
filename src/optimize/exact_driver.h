// The optimizer's use of the exact models (private to it): a better schedule in the winner's
// placement and tighter bounds in every placement searched, in the time left.
#pragma once

#include <chrono>
#include <vector>

#include "optimize/search.h"
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

// Whether large-neighbourhood moves with CP-SAT run after the search on p: CP-SAT is there, the
// model is not too large, the objective is the makespan and no robust scoring is asked.
bool lns_applies(const Problem& p, const OptimizeOptions& options);

// Large-neighbourhood search until `deadline`, or until the best meets `bound_us` (the bound so
// far) or the bound it proves: first the whole schedule (hinted with the best, then unhinted),
// then — only if those improved it — windows of the best schedule (two or three adjacent devices
// × four to eight microbatches), each keeping every other op's order on its device and every
// other activation's recompute/offload choice, and lets CP-SAT re-solve it for at most a second,
// hinted with the best; a solution that scores better replaces it. `stats` counts the solves
// (exact_solves) and the improvements. Returns the whole schedule's proven bound where it holds
// for every schedule of p's placement and partition that the rules allow, else 0.
double run_lns(const OptimizeOptions& options, const Problem& p, double bound_us,
               std::chrono::steady_clock::time_point deadline, SearchResult* searched, OptimizeStats* stats);

}  // namespace optpipe
