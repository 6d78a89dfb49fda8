// PROVISIONAL
#include "families/common.h"

namespace optpipe {

Result<Schedule> make_pipeoffload(const Problem& p) { return make_interleaved_1f1b(p); }

}  // namespace optpipe
