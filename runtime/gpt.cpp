#include "gpt.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <random>
#include <unordered_set>

namespace optpipe::runtime {
namespace {

constexpr double kLnEps = 1e-5;

// Per block, in this order (indices relative to the block's first parameter).
enum BlockParam { kLn1G, kLn1B, kWqkv, kBqkv, kWo, kBo, kLn2G, kLn2B, kW1, kB1, kW2, kB2, kNumBlockParams };
const char* kBlockParamNames[kNumBlockParams] = {"ln1.g", "ln1.b", "w_qkv", "b_qkv", "w_o", "b_o",
                                                 "ln2.g", "ln2.b", "w_1",   "b_1",   "w_2", "b_2"};
constexpr int kNumEmbeddingParams = 2;  // tok_emb, pos_emb
enum HeadParam { kLnFG, kLnFB, kWOut, kNumHeadParams };

int block_base(const ChunkLayout& l, int j) { return (l.embedding ? kNumEmbeddingParams : 0) + j * kNumBlockParams; }
int head_base(const ChunkLayout& l) { return block_base(l, l.num_layers); }

at::Generator layer_generator(uint64_t seed, int layer) {
  return at::detail::createCPUGenerator(seed * 1000003ull + static_cast<uint64_t>(layer + 2));
}

at::Tensor normal(std::vector<int64_t> shape, double stddev, at::Generator& gen) {
  return at::empty(shape, at::kFloat).normal_(0, stddev, gen);
}

// y = x W^T + b on [N, in] rows.
at::Tensor linear(const at::Tensor& x2d, const at::Tensor& w, const at::Tensor& b) {
  return b.defined() ? at::addmm(b, x2d, w.t()) : at::mm(x2d, w.t());
}

void add_grad(ChunkParams* p, int index, const at::Tensor& g) { p->grads[index].add_(g); }

}  // namespace

Result<GptConfig> gpt_config(const ModelSpec& m, int microbatch_size, int num_microbatches, uint64_t seed) {
  using R = Result<GptConfig>;
  if (m.mlp != Mlp::kGelu)
    return R::Error(Status::Invalid("model \"" + m.name + "\": the runtime builds GPT blocks (GELU MLP) only"));
  if (m.kv_heads != m.heads)
    return R::Error(
        Status::Invalid("model \"" + m.name + "\": the runtime builds multi-head attention only (kv_heads = heads)"));
  if (m.num_layers < 1 || m.hidden < 1 || m.ffn < 1 || m.heads < 1 || m.seq_len < 2 || m.vocab < 2 ||
      m.hidden % m.heads != 0)
    return R::Error(Status::Invalid("model \"" + m.name +
                                    "\": sizes must be positive, hidden divisible by heads, seq_len and vocab ≥ 2"));
  if (microbatch_size < 1) return R::Error(Status::Invalid("microbatch size must be ≥ 1"));
  if (num_microbatches < 1) return R::Error(Status::Invalid("number of microbatches must be ≥ 1"));
  return R::Of(GptConfig{m, microbatch_size, num_microbatches, seed});
}

std::vector<ChunkLayout> chunk_layouts(const GptConfig& cfg, int num_chunks) {
  const std::vector<int> layers =
      cfg.layers_per_chunk.empty()
          ? partition_layers(cfg.model, num_chunks, PartitionRule::kBalanced, cfg.microbatch_size)
          : cfg.layers_per_chunk;
  OPTPIPE_CHECK(static_cast<int>(layers.size()) == num_chunks, "set_layers_per_chunk checked the chunk count");
  std::vector<ChunkLayout> out(num_chunks);
  int first = 0;
  for (int c = 0; c < num_chunks; c++) {
    out[c] = {c == 0, first, layers[c], c == num_chunks - 1};
    first += layers[c];
  }
  return out;
}

Status set_layers_per_chunk(GptConfig* cfg, const std::vector<int>& layers_per_chunk, int num_chunks) {
  const int S = static_cast<int>(layers_per_chunk.size());
  if (S != num_chunks)
    return Status::Invalid("the partition gives " + std::to_string(S) + " layer counts for " +
                           std::to_string(num_chunks) + " chunks");
  int sum = 0;
  for (int c = 0; c < S; c++) {
    const bool holds_more = c == 0 || c == S - 1;  // the embedding or the head
    if (layers_per_chunk[c] < (holds_more ? 0 : 1))
      return Status::Invalid(
          "the partition gives chunk " + std::to_string(c) + " " + std::to_string(layers_per_chunk[c]) +
          " layers: " + (holds_more ? "a count is ≥ 0" : "a chunk between the first and the last holds ≥ 1"));
    sum += layers_per_chunk[c];
  }
  if (sum != cfg->model.num_layers)
    return Status::Invalid("the partition holds " + std::to_string(sum) + " transformer layers, the model " +
                           std::to_string(cfg->model.num_layers));
  cfg->layers_per_chunk = layers_per_chunk;
  return Status::Ok();
}

ChunkParams init_chunk(const GptConfig& cfg, const ChunkLayout& layout) {
  const ModelSpec& m = cfg.model;
  const int64_t h = m.hidden, f = m.ffn;
  const double std_resid = 0.02 / std::sqrt(2.0 * m.num_layers);  // GPT-2's scaled residual init
  ChunkParams p;
  p.layout = layout;
  auto add = [&](std::string name, at::Tensor v) {
    p.names.push_back(std::move(name));
    p.grads.push_back(at::zeros_like(v));
    p.values.push_back(std::move(v));
  };
  if (layout.embedding) {
    at::Generator gen = layer_generator(cfg.seed, -1);
    add("tok_emb", normal({m.vocab, h}, 0.02, gen));
    add("pos_emb", normal({m.seq_len, h}, 0.01, gen));
  }
  for (int j = 0; j < layout.num_layers; j++) {
    const int layer = layout.first_layer + j;
    at::Generator gen = layer_generator(cfg.seed, layer);
    const std::string pre = "layer" + std::to_string(layer) + ".";
    for (int k = 0; k < kNumBlockParams; k++) {
      at::Tensor v;
      switch (k) {
        case kLn1G:
        case kLn2G: v = at::ones({h}); break;
        case kLn1B:
        case kLn2B: v = at::zeros({h}); break;
        case kWqkv: v = normal({3 * h, h}, 0.02, gen); break;
        case kBqkv: v = at::zeros({3 * h}); break;
        case kWo: v = normal({h, h}, std_resid, gen); break;
        case kBo:
        case kB2: v = at::zeros({h}); break;
        case kW1: v = normal({f, h}, 0.02, gen); break;
        case kB1: v = at::zeros({f}); break;
        case kW2: v = normal({h, f}, std_resid, gen); break;
      }
      add(pre + kBlockParamNames[k], v);
    }
  }
  if (layout.head) {
    at::Generator gen = layer_generator(cfg.seed, m.num_layers);
    add("head.ln.g", at::ones({h}));
    add("head.ln.b", at::zeros({h}));
    add("head.w_out", normal({m.vocab, h}, 0.02, gen));
  }
  return p;
}

void to_device(ChunkParams* params, const at::Device& device) {
  for (at::Tensor& v : params->values) v = v.to(device);
  for (at::Tensor& g : params->grads) g = g.to(device);
}

void zero_grads(ChunkParams* params) {
  for (at::Tensor& g : params->grads) g.zero_();
}

int64_t num_params(const ChunkParams& params) {
  int64_t n = 0;
  for (const at::Tensor& v : params.values) n += v.numel();
  return n;
}

Batch make_batch(const GptConfig& cfg, int iteration, int microbatch) {
  const int b = cfg.microbatch_size, T = cfg.model.seq_len, V = cfg.model.vocab;
  std::seed_seq seq{cfg.seed, static_cast<uint64_t>(iteration), static_cast<uint64_t>(microbatch)};
  std::mt19937_64 rng(seq);
  std::uniform_int_distribution<int64_t> token(0, V - 1);
  Batch batch{at::empty({b, T}, at::kLong), at::empty({b, T}, at::kLong)};
  int64_t* tokens = batch.tokens.data_ptr<int64_t>();
  int64_t* targets = batch.targets.data_ptr<int64_t>();
  for (int i = 0; i < b * T; i++) tokens[i] = token(rng);
  for (int i = 0; i < b * T; i++) targets[i] = (tokens[i] + 1) % V;
  return batch;
}

Batch to_device(const Batch& batch, const at::Device& device) {
  return {batch.tokens.to(device), batch.targets.to(device)};
}

int64_t stash_bytes(const std::vector<at::Tensor>& tensors) {
  std::unordered_set<const void*> seen;
  int64_t bytes = 0;
  for (const at::Tensor& t : tensors)
    if (t.defined() && seen.insert(t.storage().data()).second) bytes += static_cast<int64_t>(t.storage().nbytes());
  return bytes;
}

int64_t stash_bytes(const WeightStash& w) {
  std::vector<at::Tensor> all;
  for (const WeightStash::Item& it : w.items) {
    all.push_back(it.input);
    all.push_back(it.grad_output);
  }
  return stash_bytes(all);
}

// Saved per block, pushed in this order after the block input (which is not pushed again when
// it is the chunk input): mean1, rstd1, ln1, qkv, probs, attn_out, x2, mean2, rstd2, ln2, u, g.
Stash forward(const GptConfig& cfg, const ChunkParams& params, const at::Tensor& input, const Batch& batch,
              at::Tensor* output) {
  const ModelSpec& m = cfg.model;
  const ChunkLayout& l = params.layout;
  const std::vector<at::Tensor>& P = params.values;
  const int64_t b = cfg.microbatch_size, T = m.seq_len, h = m.hidden, a = m.heads, dh = h / a, N = b * T;
  Stash st;
  st.tensors.push_back(input);
  at::Tensor x;
  if (l.embedding) {
    x = at::embedding(P[0], input) + P[1].unsqueeze(0);
  } else {
    x = input;
  }
  const at::Tensor causal = at::ones({T, T}, x.options().dtype(at::kBool)).triu(1);
  for (int j = 0; j < l.num_layers; j++) {
    const int base = block_base(l, j);
    if (j > 0 || l.embedding) st.tensors.push_back(x);
    auto [ln1, mean1, rstd1] = at::native_layer_norm(x, {h}, P[base + kLn1G], P[base + kLn1B], kLnEps);
    at::Tensor qkv = linear(ln1.view({N, h}), P[base + kWqkv], P[base + kBqkv]).view({b, T, 3 * h});
    at::Tensor q = qkv.slice(2, 0, h).view({b, T, a, dh}).transpose(1, 2);
    at::Tensor k = qkv.slice(2, h, 2 * h).view({b, T, a, dh}).transpose(1, 2);
    at::Tensor v = qkv.slice(2, 2 * h, 3 * h).view({b, T, a, dh}).transpose(1, 2);
    at::Tensor scores = at::matmul(q, k.transpose(-2, -1)).mul_(1.0 / std::sqrt(static_cast<double>(dh)));
    scores.masked_fill_(causal, -std::numeric_limits<float>::infinity());
    at::Tensor probs = at::_softmax(scores, -1, false);
    at::Tensor attn_out = at::matmul(probs, v).transpose(1, 2).reshape({N, h});
    at::Tensor x2 = x + linear(attn_out, P[base + kWo], P[base + kBo]).view({b, T, h});
    auto [ln2, mean2, rstd2] = at::native_layer_norm(x2, {h}, P[base + kLn2G], P[base + kLn2B], kLnEps);
    at::Tensor u = linear(ln2.view({N, h}), P[base + kW1], P[base + kB1]);
    at::Tensor g = at::gelu(u);
    x = x2 + linear(g, P[base + kW2], P[base + kB2]).view({b, T, h});
    for (at::Tensor* t : {&mean1, &rstd1, &ln1, &qkv, &probs, &attn_out, &x2, &mean2, &rstd2, &ln2, &u, &g})
      st.tensors.push_back(*t);
  }
  if (l.head) {
    const int base = head_base(l);
    if (l.num_layers > 0 || l.embedding) st.tensors.push_back(x);
    auto [lnf, meanf, rstdf] = at::native_layer_norm(x, {h}, P[base + kLnFG], P[base + kLnFB], kLnEps);
    at::Tensor logits = linear(lnf.view({N, h}), P[base + kWOut], at::Tensor());
    at::Tensor logp = at::log_softmax(logits, -1);
    *output = -logp.gather(1, batch.targets.view({N, 1})).mean() / cfg.num_microbatches;
    at::Tensor probs = logp.exp_();
    for (at::Tensor* t : {&meanf, &rstdf, &lnf, &probs}) st.tensors.push_back(*t);
  } else {
    *output = x;
  }
  return st;
}

at::Tensor backward_input(const GptConfig& cfg, ChunkParams* params, Stash stash, const at::Tensor& grad_output,
                          const Batch& batch, WeightStash* weight_stash) {
  const ModelSpec& m = cfg.model;
  const ChunkLayout& l = params->layout;
  const std::vector<at::Tensor>& P = params->values;
  const int64_t b = cfg.microbatch_size, T = m.seq_len, h = m.hidden, a = m.heads, dh = h / a, N = b * T;
  std::vector<at::Tensor>& s = stash.tensors;
  auto pop = [&s]() {
    OPTPIPE_CHECK(s.size() > 1, "stash underflow: forward and backward disagree on what is saved");
    at::Tensor t = std::move(s.back());
    s.pop_back();
    return t;
  };
  weight_stash->items.clear();
  at::Tensor dy;
  if (l.head) {
    const int base = head_base(l);
    at::Tensor probs = pop(), lnf = pop(), rstdf = pop(), meanf = pop();
    at::Tensor x = (l.num_layers > 0 || l.embedding) ? pop() : s[0];
    // d(mean CE / M)/d logits = (softmax − onehot) / (N · M)
    at::Tensor dlogits = probs;
    dlogits.scatter_add_(1, batch.targets.view({N, 1}), at::full({N, 1}, -1.0f, probs.options()));
    dlogits.mul_(1.0 / (static_cast<double>(N) * cfg.num_microbatches));
    at::Tensor dlnf = at::mm(dlogits, P[base + kWOut]).view({b, T, h});
    auto [dx, dg, db] = at::native_layer_norm_backward(dlnf, x, {h}, meanf, rstdf, P[base + kLnFG], P[base + kLnFB],
                                                       {true, true, true});
    add_grad(params, base + kLnFG, dg);
    add_grad(params, base + kLnFB, db);
    weight_stash->items.push_back({lnf.view({N, h}), dlogits, base + kWOut, -1});
    dy = dx;
  } else {
    dy = grad_output;
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
  for (int j = l.num_layers - 1; j >= 0; j--) {
    const int base = block_base(l, j);
    at::Tensor g = pop(), u = pop(), ln2 = pop(), rstd2 = pop(), mean2 = pop(), x2 = pop();
    at::Tensor attn_out = pop(), probs = pop(), qkv = pop(), ln1 = pop(), rstd1 = pop(), mean1 = pop();
    at::Tensor x = (j > 0 || l.embedding) ? pop() : s[0];
    // MLP: y = x2 + W2·gelu(W1·ln2(x2))
    at::Tensor dm = dy.reshape({N, h});
    at::Tensor du = at::gelu_backward(at::mm(dm, P[base + kW2]), u);
    at::Tensor dln2 = at::mm(du, P[base + kW1]).view({b, T, h});
    auto [dx2_ln, dg2, db2] = at::native_layer_norm_backward(dln2, x2, {h}, mean2, rstd2, P[base + kLn2G],
                                                             P[base + kLn2B], {true, true, true});
    add_grad(params, base + kLn2G, dg2);
    add_grad(params, base + kLn2B, db2);
    at::Tensor dx2 = dy + dx2_ln;
    // Attention: x2 = x + Wo·softmax(q kᵀ / √d) v
    at::Tensor dattn = dx2.reshape({N, h});
    at::Tensor d_out = at::mm(dattn, P[base + kWo]).view({b, T, a, dh}).transpose(1, 2);
    at::Tensor q = qkv.slice(2, 0, h).view({b, T, a, dh}).transpose(1, 2);
    at::Tensor k = qkv.slice(2, h, 2 * h).view({b, T, a, dh}).transpose(1, 2);
    at::Tensor v = qkv.slice(2, 2 * h, 3 * h).view({b, T, a, dh}).transpose(1, 2);
    at::Tensor dv = at::matmul(probs.transpose(-2, -1), d_out);
    at::Tensor dprobs = at::matmul(d_out, v.transpose(-2, -1));
    at::Tensor dscores = probs * (dprobs - (dprobs * probs).sum(-1, true));
    dscores.mul_(scale);
    at::Tensor dq = at::matmul(dscores, k), dk = at::matmul(dscores.transpose(-2, -1), q);
    at::Tensor dqkv = at::cat({dq.transpose(1, 2).reshape({N, h}), dk.transpose(1, 2).reshape({N, h}),
                               dv.transpose(1, 2).reshape({N, h})},
                              1);
    at::Tensor dln1 = at::mm(dqkv, P[base + kWqkv]).view({b, T, h});
    auto [dx_ln, dg1, db1] = at::native_layer_norm_backward(dln1, x, {h}, mean1, rstd1, P[base + kLn1G],
                                                            P[base + kLn1B], {true, true, true});
    add_grad(params, base + kLn1G, dg1);
    add_grad(params, base + kLn1B, db1);
    weight_stash->items.push_back({g, dm, base + kW2, base + kB2});
    weight_stash->items.push_back({ln2.view({N, h}), du, base + kW1, base + kB1});
    weight_stash->items.push_back({attn_out, dattn, base + kWo, base + kBo});
    weight_stash->items.push_back({ln1.view({N, h}), dqkv, base + kWqkv, base + kBqkv});
    dy = dx2 + dx_ln;
  }
  if (l.embedding) {
    at::Tensor dx = dy.reshape({N, h});
    params->grads[0].index_add_(0, s[0].reshape({N}), dx);
    params->grads[1].add_(dy.sum(0));
    return at::Tensor();
  }
  OPTPIPE_CHECK(s.size() == 1, "stash not consumed: forward and backward disagree on what is saved");
  return dy;
}

void backward_weight(ChunkParams* params, WeightStash weight_stash) {
  for (WeightStash::Item& it : weight_stash.items) {
    params->grads[it.weight].addmm_(it.grad_output.t(), it.input);
    if (it.bias >= 0) params->grads[it.bias].add_(it.grad_output.sum(0));
  }
}

at::Tensor backward_step(const GptConfig& cfg, ChunkParams* params, Stash stash, const at::Tensor& grad_output,
                         const Batch& batch, bool fused, WeightStash* weight_stash, int64_t* live_delta_bytes) {
  *live_delta_bytes = -stash_bytes(stash.tensors);
  at::Tensor dx = backward_input(cfg, params, std::move(stash), grad_output, batch, weight_stash);
  if (fused) {
    backward_weight(params, std::move(*weight_stash));
    *weight_stash = WeightStash();
  } else {
    *live_delta_bytes += stash_bytes(*weight_stash);
  }
  return dx;
}

ReferenceResult reference_gradients(const GptConfig& cfg, const std::vector<ChunkParams>& chunks, int iteration) {
  const ModelSpec& m = cfg.model;
  const int64_t b = cfg.microbatch_size, T = m.seq_len, h = m.hidden, a = m.heads, dh = h / a;
  std::vector<std::vector<at::Tensor>> leaves;
  for (const ChunkParams& c : chunks) {
    leaves.emplace_back();
    for (const at::Tensor& v : c.values) leaves.back().push_back(v.detach().clone().requires_grad_(true));
  }
  const at::Device device = chunks.front().values.front().device();
  const at::Tensor causal = at::ones({T, T}, at::TensorOptions().dtype(at::kBool).device(device)).triu(1);
  double total = 0;
  for (int i = 0; i < cfg.num_microbatches; i++) {
    const Batch batch = to_device(make_batch(cfg, iteration, i), device);
    at::Tensor x;
    for (size_t c = 0; c < chunks.size(); c++) {
      const ChunkLayout& l = chunks[c].layout;
      const std::vector<at::Tensor>& P = leaves[c];
      if (l.embedding) x = at::embedding(P[0], batch.tokens) + P[1].unsqueeze(0);
      for (int j = 0; j < l.num_layers; j++) {
        const int base = block_base(l, j);
        at::Tensor ln1 = at::layer_norm(x, {h}, P[base + kLn1G], P[base + kLn1B], kLnEps);
        at::Tensor qkv = at::linear(ln1, P[base + kWqkv], P[base + kBqkv]);
        std::vector<at::Tensor> parts = qkv.split(h, -1);
        auto heads = [&](const at::Tensor& t) { return t.reshape({b, T, a, dh}).transpose(1, 2); };
        at::Tensor scores = at::matmul(heads(parts[0]), heads(parts[1]).transpose(-2, -1)) / std::sqrt(double(dh));
        at::Tensor probs = at::softmax(scores.masked_fill(causal, -std::numeric_limits<float>::infinity()), -1);
        at::Tensor attn = at::matmul(probs, heads(parts[2])).transpose(1, 2).reshape({b, T, h});
        at::Tensor x2 = x + at::linear(attn, P[base + kWo], P[base + kBo]);
        at::Tensor ln2 = at::layer_norm(x2, {h}, P[base + kLn2G], P[base + kLn2B], kLnEps);
        x = x2 + at::linear(at::gelu(at::linear(ln2, P[base + kW1], P[base + kB1])), P[base + kW2], P[base + kB2]);
      }
      if (l.head) {
        const int base = head_base(l);
        at::Tensor logits =
            at::linear(at::layer_norm(x, {h}, P[base + kLnFG], P[base + kLnFB], kLnEps), P[base + kWOut]);
        // One microbatch's graph at a time: the reference holds no more activations than one.
        at::Tensor loss = at::cross_entropy_loss(logits.reshape({b * T, m.vocab}), batch.targets.reshape({b * T})) /
                          cfg.num_microbatches;
        loss.backward();
        total += loss.item<double>();
      }
    }
  }
  ReferenceResult r;
  r.loss = total;
  for (const std::vector<at::Tensor>& ls : leaves) {
    r.grads.emplace_back();
    for (const at::Tensor& t : ls) r.grads.back().push_back(t.grad());
  }
  return r;
}

void adam_step(ChunkParams* params, AdamState* state, double lr) {
  constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8;
  if (state->m.empty())
    for (const at::Tensor& v : params->values) {
      state->m.push_back(at::zeros_like(v));
      state->v.push_back(at::zeros_like(v));
    }
  state->step++;
  const double c1 = 1 - std::pow(kBeta1, state->step), c2 = 1 - std::pow(kBeta2, state->step);
  for (size_t k = 0; k < params->values.size(); k++) {
    const at::Tensor& g = params->grads[k];
    state->m[k].mul_(kBeta1).add_(g, 1 - kBeta1);
    state->v[k].mul_(kBeta2).addcmul_(g, g, 1 - kBeta2);
    at::Tensor denom = (state->v[k] / c2).sqrt_().add_(kEps);
    params->values[k].addcdiv_(state->m[k], denom, -lr / c1);
  }
}

}  // namespace optpipe::runtime
