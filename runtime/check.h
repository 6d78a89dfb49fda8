// check.h — private to the engine: `run --check`, the pipelined gradients of one iteration set
// against the same model run in one process with autograd, so that a schedule that runs is
// also known to compute the right thing.
#pragma once

#include <vector>

#include "gpt.h"
#include "optpipe/problem.h"
#include "records.h"

namespace optpipe::runtime {

// Compares the gradients of the chunks `device` holds (`chunks` holds the whole model, as the
// reference needs) with reference_gradients() for `iteration`; `loss` is what the pipeline got.
CheckRecord check_gradients(const Problem& p, int device, const GptConfig& cfg, const std::vector<ChunkParams>& chunks,
                            int iteration, double loss);

}  // namespace optpipe::runtime
