// V-Min (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"): a V-shape schedule at
// about a third of 1F1B's activation memory, at the price of a larger bubble. Built from its
// building block (see v_building_block.h).
#include "families/common.h"
#include "families/v_building_block.h"

namespace optpipe {

Result<Schedule> make_v_min(const Problem& p) { return make_v_building_block(p, VMemory::kMin, "v-min"); }

}  // namespace optpipe
