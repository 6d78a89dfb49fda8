// V-Half and V-Min share one construction (Qi et al. 2024, "Pipeline Parallelism with
// Controllable Memory"; the zero-bubble repository's zbv_greedy.py): a repeating building block
// of slots per device, squeezed earlier wherever that does not raise the device's peak memory.
#pragma once

#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "optpipe/status.h"

namespace optpipe {

enum class VMemory { kHalf, kMin };

// The order depends only on D, M and the memory setup; the problem's costs play no part.
Result<Schedule> make_v_building_block(const Problem& p, VMemory setup, const char* family);

}  // namespace optpipe
