// engine_cuda.h — private to the engine: run_rank() for a rank whose device is a GPU, compiled
// only against a CUDA LibTorch (OPTPIPE_RUNTIME_CUDA).
#pragma once

#include "engine.h"

namespace optpipe::runtime {

Result<RankReport> run_rank_cuda(const Problem& problem, const Schedule& schedule, const GptConfig& cfg,
                                 const Group& group, const EngineOptions& options);

}  // namespace optpipe::runtime
