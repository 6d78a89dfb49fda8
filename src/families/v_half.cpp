// V-Half (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"): a V-shape schedule
// at about half of 1F1B's activation memory (D+2 half-size chunk activations for even D), with
// a bubble between ZB-V's and 1F1B's. Built from its building block (see v_building_block.h).
#include "families/common.h"
#include "families/v_building_block.h"

namespace optpipe {

Result<Schedule> make_v_half(const Problem& p) { return make_v_building_block(p, VMemory::kHalf, "v-half"); }

}  // namespace optpipe
