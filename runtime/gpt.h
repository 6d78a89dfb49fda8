// gpt.h — the runtime's model: a GPT-style decoder cut into pipeline chunks, in fp32 on ATen,
// with an explicit forward and a split backward, on whichever device its tensors are.
//
// Chunk c of S holds the transformer layers GptConfig::layers_per_chunk gives it, by default
// those partition_layers() gives it (the cost model's split, so a problem built or profiled for
// the model describes these chunks); chunk 0 also holds the token and position embeddings,
// chunk S−1 the final LayerNorm, the LM head and the cross-entropy loss.
//
// forward() returns what the backward needs as a Stash (its first tensor is the chunk input,
// all a recompute keeps); backward_input() (the schedule's B) turns it into the input gradient
// and a WeightStash — each linear layer's input and output gradient; backward_weight() (W)
// turns that into weight gradients. LayerNorm and embedding gradients are cheap reductions and
// are taken in B, so W keeps only the linear layers' operands.
//
//   GptConfig cfg = gpt_config(find_model("gpt-tiny").value, /*microbatch_size=*/2,
//                              /*num_microbatches=*/8, seed).value;
//   ChunkParams params = init_chunk(cfg, chunk_layouts(cfg, S)[s]);
//   Stash st = forward(cfg, params, input, batch, &output);
//   at::Tensor dx = backward_input(cfg, &params, std::move(st), dy, batch, &w);
//   backward_weight(&params, std::move(w));
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "optpipe/cost_model.h"
#include "optpipe/status.h"

namespace optpipe::runtime {

struct GptConfig {
  ModelSpec model;  // GELU MLP, multi-head attention; hidden divisible by heads
  int microbatch_size = 1;
  int num_microbatches = 1;  // the loss is the mean over all of them
  uint64_t seed = 0;         // parameters and data
  // Transformer layers per chunk in model order (a plan's partition); empty: the balanced cut.
  std::vector<int> layers_per_chunk;
};

// Checks that the runtime can build this model (it builds GPT blocks only).
Result<GptConfig> gpt_config(const ModelSpec& m, int microbatch_size, int num_microbatches, uint64_t seed);

struct ChunkLayout {
  bool embedding = false;
  int first_layer = 0;
  int num_layers = 0;
  bool head = false;
};
std::vector<ChunkLayout> chunk_layouts(const GptConfig& cfg, int num_chunks);
// Checks a partition for S chunks (a count per chunk, Σ = the model's layers, every chunk but the
// first and last, which hold the embedding and the head, at least one layer) and sets it.
Status set_layers_per_chunk(GptConfig* cfg, const std::vector<int>& layers_per_chunk, int num_chunks);

struct ChunkParams {
  ChunkLayout layout;
  std::vector<std::string> names;  // "tok_emb", "layer3.w_qkv", "head.w_out", ...
  std::vector<at::Tensor> values;
  std::vector<at::Tensor> grads;  // same shapes; summed over microbatches until zero_grads()
};

// Parameters are drawn per layer from the seed (on the CPU), so every cut of the model starts
// identical on every device.
ChunkParams init_chunk(const GptConfig& cfg, const ChunkLayout& layout);
void to_device(ChunkParams* params, const at::Device& device);
void zero_grads(ChunkParams* params);
int64_t num_params(const ChunkParams& params);

// One microbatch of a synthetic task: random tokens, each position's target is its own token + 1
// (mod vocab) — a substitution the model learns within tens of iterations, driving the loss from
// ln(vocab) towards zero. (Tasks that need attention, such as copying the previous token, did
// not move the loss of gpt-tiny within 80 iterations.)
struct Batch {
  at::Tensor tokens;   // [b, T] int64
  at::Tensor targets;  // [b, T] int64
};
Batch make_batch(const GptConfig& cfg, int iteration, int microbatch);  // on the CPU
Batch to_device(const Batch& batch, const at::Device& device);

struct Stash {
  std::vector<at::Tensor> tensors;  // tensors[0]: the chunk input (tokens for chunk 0)
};
struct WeightStash {
  struct Item {
    at::Tensor input, grad_output;  // [N, in], [N, out]
    int weight = -1, bias = -1;     // indices into ChunkParams::values
  };
  std::vector<Item> items;
};
int64_t stash_bytes(const std::vector<at::Tensor>& tensors);
int64_t stash_bytes(const WeightStash& w);

// `input`: tokens [b, T] for the embedding chunk, else the hidden state [b, T, h]. `output`
// receives the hidden state, or for the head chunk this microbatch's loss (a scalar, already
// divided by the number of microbatches).
Stash forward(const GptConfig& cfg, const ChunkParams& params, const at::Tensor& input, const Batch& batch,
              at::Tensor* output);

// `grad_output` is ignored for the head chunk. Returns the input gradient (undefined for the
// embedding chunk); LayerNorm and embedding gradients are added to params->grads.
at::Tensor backward_input(const GptConfig& cfg, ChunkParams* params, Stash stash, const at::Tensor& grad_output,
                          const Batch& batch, WeightStash* weight_stash);
void backward_weight(ChunkParams* params, WeightStash weight_stash);

// The schedule's B (or BW when `fused`: the weight gradients at once, nothing left for W) on F's
// stash: the input gradient, and in `live_delta_bytes` the change in live activation bytes (the
// stash freed, what W still needs kept).
at::Tensor backward_step(const GptConfig& cfg, ChunkParams* params, Stash stash, const at::Tensor& grad_output,
                         const Batch& batch, bool fused, WeightStash* weight_stash, int64_t* live_delta_bytes);

// The same model in one process with autograd, for checking the pipeline: the loss over all
// microbatches of `iteration` and, per chunk, the gradient of every parameter, on the device
// the chunks' parameters are on.
struct ReferenceResult {
  double loss = 0;
  std::vector<std::vector<at::Tensor>> grads;  // [chunk][param]
};
ReferenceResult reference_gradients(const GptConfig& cfg, const std::vector<ChunkParams>& chunks, int iteration);

// Adam on one chunk's parameters (the runtime's optimizer step after each iteration).
struct AdamState {
  std::vector<at::Tensor> m, v;
  int step = 0;
};
void adam_step(ChunkParams* params, AdamState* state, double lr);

}  // namespace optpipe::runtime
