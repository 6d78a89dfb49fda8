// tables.h — how the command-line tools print simulated figures as text: tables and summaries.
#pragma once

#include <string>
#include <vector>

#include "optpipe/noise.h"
#include "optpipe/problem.h"
#include "optpipe/simulate.h"

namespace optpipe {

// One-line description: "4 devices, 8 microbatches, linear placement (4 stages), budget 52.00 GiB".
std::string problem_summary(const Problem& p);
std::string timeline_text(const Problem& p, const Timeline& t);
// A table's fits cell: "yes" (under any timing), "nominal only", "no".
const char* fits_cell(bool any_timing, bool nominal);
// "fits the budget under any timing", "... at the profile's timings only ...", "OVER BUDGET".
std::string fits_text(const Problem& p, const Timeline& t);
std::string noise_text(const Problem& p, const NoiseSpec& spec, const NoiseReport& r);

// Rows of cells printed with aligned columns (first row is the header).
std::string aligned_table(const std::vector<std::vector<std::string>>& rows);

}  // namespace optpipe
