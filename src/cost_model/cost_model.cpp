// The cost model: transformer + cluster → Problem. Sources:
//  [N21] Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
//        Megatron-LM", SC'21, §5.1: forward FLOPs of a GPT layer 24bsh² + 4bs²h.
//  [K22] Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
//        2022, §4.1: activation bytes per GPT layer sbh(34 + 5as/h) in 16-bit; 34sbh with the
//        attention scores recomputed (as flash attention does).
//  [Q23] Qi et al., "Zero Bubble Pipeline Parallelism", 2023: backward split into B (inputs) and
//        W (weights); W keeps the matmul inputs and output gradients, 32 of the 34 sbh.
//  [R20] Rajbhandari et al., "ZeRO", SC'20, §3: mixed-precision Adam keeps 16 bytes per
//        parameter (2 weights, 2 gradients, 4+4+4 fp32 master, momentum, variance); §5.1, ZeRO-1
//        (Megatron's distributed optimizer) shards the 12 over the data-parallel ranks.
//  [S19] Shoeybi et al., "Megatron-LM", 2019, §3: tensor parallelism splits every layer's
//        matmuls over T GPUs with two all-reduces of the b·s·h activation in the forward and two
//        in the backward; [K22] §4.2.2: with sequence parallelism an all-gather and a
//        reduce-scatter replace each all-reduce (the same bytes on the ring), and every
//        activation is sharded: 34sbh/T; tensor parallelism alone leaves 10sbh replicated
//        (norm and first-matmul inputs, dropout masks): sbh(10 + 24/T).
//  [N21] §4.1: the pipeline hop carries 1/T of the activation per GPU (scatter/gather).
#include "optpipe/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "optpipe/files.h"

namespace optpipe {

const std::vector<ModelSpec>& model_presets() {
  // name, layers, hidden, ffn, heads, kv heads, seq, vocab, mlp
  static const std::vector<ModelSpec> kModels = {
      // GPT-3-like models of the OptPipe paper's setting (its exact shapes are not public).
      {"gpt-7b", 32, 4096, 16384, 32, 32, 2048, 51200, Mlp::kGelu},
      {"gpt-14b", 44, 5120, 20480, 40, 40, 2048, 51200, Mlp::kGelu},
      // Llama 2 (Touvron et al. 2023, Table 1 and the released configs).
      {"llama2-7b", 32, 4096, 11008, 32, 32, 4096, 32000, Mlp::kSwiGlu},
      {"llama2-13b", 40, 5120, 13824, 40, 40, 4096, 32000, Mlp::kSwiGlu},
      {"llama2-70b", 80, 8192, 28672, 64, 8, 4096, 32000, Mlp::kSwiGlu},
      // Llama 3 and 3.1 (their released config.json files; the sequence at 8192, as trained before
      // 3.1's long-context stage): GQA with 8 key/value heads, a 128k vocabulary.
      {"llama3-8b", 32, 4096, 14336, 32, 8, 8192, 128256, Mlp::kSwiGlu},
      {"llama3-70b", 80, 8192, 28672, 64, 8, 8192, 128256, Mlp::kSwiGlu},
      {"llama3.1-405b", 126, 16384, 53248, 128, 8, 8192, 128256, Mlp::kSwiGlu},
      // The runtime's default: small enough to train on a CPU, fp32, attention scores kept.
      {"gpt-tiny", 8, 128, 512, 4, 4, 64, 256, Mlp::kGelu, false, 4},
  };
  return kModels;
}

Result<ModelSpec> find_model(const std::string& name) {
  if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0) {
    Result<std::string> text = read_text_file(name);
    if (!text.ok()) return Result<ModelSpec>::Error(text.status);
    return model_from_hf_config(text.value, name);
  }
  std::string known;
  for (const ModelSpec& m : model_presets()) {
    if (m.name == name) return Result<ModelSpec>::Of(m);
    known += (known.empty() ? "" : ", ") + m.name;
  }
  return Result<ModelSpec>::Error(
      Status::Invalid("unknown model \"" + name + "\" (known: " + known + "; or a Hugging Face config.json path)"));
}

const std::vector<ClusterSpec>& gpu_presets() {
  constexpr int64_t GiB = int64_t{1} << 30;
  // Dense bf16 peaks from the vendor data sheets; host links are PCIe 4.0 / 5.0 x16 as
  // achieved in practice; neighbouring stages talk over 200 / 400 Gb/s InfiniBand.
  // Nodes of 8 on NVSwitch: a ring collective's bus bandwidth taken as 230 GB/s (A100, NVLink 3)
  // and 360 GB/s (H100/H200, NVLink 4), below the links' 300 / 450 GB/s each way.
  // name, gpus, peak TFLOP/s, utilization, HBM, d2h, h2d, host latency, per link, p2p, p2p latency,
  // per node, NVLink, HBM GB/s, fp8 TFLOP/s (SXM data sheets)
  static const std::vector<ClusterSpec> kGpus = {
      {"a100-40gb", 1, 312, 0.45, 40 * GiB, 25, 25, 10, 1, 25, 10, 8, 230, 1555, 0},
      {"a100-80gb", 1, 312, 0.45, 80 * GiB, 25, 25, 10, 1, 25, 10, 8, 230, 2039, 0},
      {"h100", 1, 989, 0.45, 80 * GiB, 50, 50, 10, 1, 50, 10, 8, 360, 3350, 1979},
      {"h200", 1, 989, 0.45, 141'000'000'000, 50, 50, 10, 1, 50, 10, 8, 360, 4800, 1979},
      // B200 (DGX B200 data sheet, per GPU: 2.25 PFLOP/s dense bf16, 4.5 fp8, 180 GB, 8 TB/s; NVLink
      // 5 at 900 GB/s each way, its ring bus bandwidth taken at 80% as above).
      {"b200", 1, 2250, 0.45, 180'000'000'000, 50, 50, 10, 1, 50, 10, 8, 720, 8000, 4500},
      // GB200 and GB300 in NVL72 racks (NVIDIA's rack data sheets divided by 72: 2.5 PFLOP/s dense
      // bf16, 5 fp8; 186 / 288 GB at 8 TB/s): one NVLink domain of 72 GPUs is the "node"; between
      // racks ConnectX-7 at 400 Gb/s (GB200) or ConnectX-8 at 800 Gb/s (GB300); the host link is
      // a Grace CPU's NVLink-C2C (900 GB/s) shared by its two GPUs, taken at half each way.
      {"gb200", 1, 2500, 0.45, 186'000'000'000, 225, 225, 5, 2, 50, 10, 72, 720, 8000, 5000},
      {"gb300", 1, 2500, 0.45, 288'000'000'000, 225, 225, 5, 2, 100, 10, 72, 720, 8000, 5000},
  };
  return kGpus;
}

Result<ClusterSpec> find_cluster(const std::string& name) {
  const size_t x = name.find('x');
  const std::string count = name.substr(0, x == std::string::npos ? 0 : x);
  const std::string gpu = x == std::string::npos ? name : name.substr(x + 1);
  char* end = nullptr;
  const long n = std::strtol(count.c_str(), &end, 10);
  if (x == std::string::npos || count.empty() || *end != '\0' || n < 1 || n > 4096)
    return Result<ClusterSpec>::Error(
        Status::Invalid("cluster \"" + name + "\": expected <count>x<gpu>, e.g. 16xh100"));
  for (const ClusterSpec& g : gpu_presets()) {
    if (g.name != gpu) continue;
    ClusterSpec c = g;
    c.name = name;
    c.num_gpus = static_cast<int>(n);
    return Result<ClusterSpec>::Of(c);
  }
  std::string known;
  for (const ClusterSpec& g : gpu_presets()) known += (known.empty() ? "" : ", ") + g.name;
  return Result<ClusterSpec>::Error(
      Status::Invalid("cluster \"" + name + "\": unknown GPU \"" + gpu + "\" (known: " + known + ")"));
}

const char* precision_name(Precision p) { return p == Precision::kFp8 ? "fp8" : "bf16"; }

Result<Precision> parse_precision(const std::string& name) {
  if (name == "bf16") return Result<Precision>::Of(Precision::kBf16);
  if (name == "fp8") return Result<Precision>::Of(Precision::kFp8);
  return Result<Precision>::Error(Status::Invalid("precision \"" + name + "\": expected bf16 or fp8"));
}

LayerCost transformer_layer_cost(const ModelSpec& m, int microbatch_size) {
  const double b = microbatch_size, s = m.seq_len, h = m.hidden, f = m.ffn, a = m.heads;
  const double q = m.attention_width();                         // width of Q and of the attention's output
  const double kv = static_cast<double>(m.kv_heads) * (q / a);  // width of K and of V
  const double mlp_mats = m.mlp == Mlp::kGelu ? 2 : 3;
  const double bytes = m.bytes_per_value;
  LayerCost c;
  // [N21] weight matmuls: QKV, attention output, MLP; 2 FLOPs per multiply-add.
  const double matmul = 2 * b * s * (h * (q + 2 * kv) + q * h + mlp_mats * h * f);
  // QKᵀ and AV: 4bs²q over the whole score matrix; a flash kernel skips the blocks the causal mask
  // hides, half of them (Megatron's num_floating_point_operations counts the same half).
  const double attention = (m.flash_attention ? 2 : 4) * b * s * s * q;
  c.fwd_attention_flops = attention;
  c.fwd_flops = matmul + attention;
  // B: input gradients of every matmul, twice the attention's forward work for the gradients of
  // both its operands, and with flash attention the scores recomputed once more.
  c.bwd_attention_flops = 2 * attention + (m.flash_attention ? attention : 0);
  c.bwd_input_flops = matmul + c.bwd_attention_flops;
  c.bwd_weight_flops = matmul;  // [Q23] W: one weight-gradient matmul per forward matmul
  // [K22] per token, in values: attention 11h (GPT: QKV input, Q, K, V, output-projection
  // input, dropout mask), MLP 19h (input, 4h GeLU input and output, dropout mask), norms 4h;
  // Llama-style: no dropout, K/V at their GQA width, SwiGLU keeps gate, up and their product.
  double per_token;  // bytes
  if (m.mlp == Mlp::kGelu)
    per_token = 34 * h;  // already in bytes for 16-bit values with 1-byte masks [K22]
  else
    per_token = bytes * (h + q + 2 * kv + q) + bytes * (h + 3 * f) + bytes * 2 * h;
  double scores = m.flash_attention ? 0 : 5 * a * s;  // [K22] softmax, its dropout mask and output
  c.act_bytes = static_cast<int64_t>(b * s * (per_token + scores));
  // [Q23] W needs each weight matmul's input and output gradient.
  const double w_inputs = (m.mlp == Mlp::kGelu) ? (h + h + h + 4 * h) : (h + q + h + f);
  const double w_grads = (q + 2 * kv) + h + (m.mlp == Mlp::kGelu ? 4 * h : 2 * f) + h;
  c.act_after_b_bytes = std::min(c.act_bytes, static_cast<int64_t>(b * s * bytes * (w_inputs + w_grads)));
  c.params = static_cast<int64_t>(h * (q + 2 * kv) + q * h + mlp_mats * h * f + 4 * h);
  return c;
}

namespace {

// The LM head and loss on the last chunk: logits matmul forward, its input and weight gradients;
// it keeps its input and the fp32 logits for the softmax, W its input and the logits' gradient.
LayerCost head_cost(const ModelSpec& m, int microbatch_size) {
  const double b = microbatch_size, s = m.seq_len, h = m.hidden, V = m.vocab;
  LayerCost c;
  c.fwd_flops = 2 * b * s * h * V;
  c.bwd_input_flops = c.fwd_flops;
  c.bwd_weight_flops = c.fwd_flops;
  c.act_bytes = static_cast<int64_t>(b * s * (m.bytes_per_value * h + 4 * V));
  c.act_after_b_bytes = static_cast<int64_t>(b * s * m.bytes_per_value * (h + V));
  c.params = static_cast<int64_t>(h * V);
  return c;
}

}  // namespace

std::vector<int> partition_layers(const ModelSpec& m, int num_chunks, PartitionRule rule, int microbatch_size) {
  const int L = m.num_layers, S = num_chunks;
  if (rule == PartitionRule::kEven) {
    std::vector<int> n(S, L / S);
    for (int c = 0; c < L % S; c++) n[1 + c % std::max(1, S - 1)]++;  // spare layers skip the embedding chunk
    if (S == 1) n[0] = L;
    return n;
  }
  // Balanced: minimise the largest chunk's forward time over contiguous splits (the first chunk
  // also pays for the embedding — negligible — the last for the LM head). With fewer layers than
  // chunks, a chunk may hold none (the runtime's model then passes its input on).
  const double layer = transformer_layer_cost(m, microbatch_size).fwd_flops;
  const double head = head_cost(m, microbatch_size).fwd_flops;
  const int least = L >= S ? 1 : 0;  // layers per chunk: the LM head is no chunk of its own when it can share
  return min_max_split(L, S, least,
                       [&](int first, int end, int c) { return (end - first) * layer + (c == S - 1 ? head : 0); });
}

namespace {

// Every FLOP count of c divided over n GPUs.
void divide_flops(LayerCost* c, int n) {
  c->fwd_flops /= n;
  c->bwd_input_flops /= n;
  c->bwd_weight_flops /= n;
  c->fwd_attention_flops /= n;
  c->bwd_attention_flops /= n;
}

// A layer's (or the head's) share on one of T tensor-parallel GPUs: FLOPs and parameters divided;
// activations as [K22] has them (replicated_bytes: what stays whole without sequence
// parallelism), what W keeps in the same proportion.
LayerCost shard(const LayerCost& c, int T, bool sequence_parallel, double replicated_bytes) {
  if (T == 1) return c;
  LayerCost out = c;
  divide_flops(&out, T);
  out.params = c.params / T;
  const double kept = sequence_parallel ? static_cast<double>(c.act_bytes) / T
                                        : replicated_bytes + (static_cast<double>(c.act_bytes) - replicated_bytes) / T;
  out.act_bytes = static_cast<int64_t>(kept);
  out.act_after_b_bytes =
      c.act_bytes > 0 ? static_cast<int64_t>(static_cast<double>(c.act_after_b_bytes) * kept / c.act_bytes) : 0;
  return out;
}

// One of cp context-parallel GPUs' share: s/cp tokens of every sequence, so 1/cp of the matmuls and
// of what is kept, and, with Megatron's load-balanced split (2·cp chunks, GPU i holding chunks i and
// 2cp−1−i), 1/cp of the causal attention too. Parameters are whole on every GPU.
LayerCost context_share(const LayerCost& c, int cp) {
  if (cp == 1) return c;
  LayerCost out = c;
  divide_flops(&out, cp);
  out.act_bytes = c.act_bytes / cp;
  out.act_after_b_bytes = c.act_after_b_bytes / cp;
  return out;
}

// Seconds → µs of a ring collective moving `bytes` per GPU among n GPUs at `gb_per_s` bus bandwidth:
// all-gather or reduce-scatter (n−1)/n of them; an all-reduce is two.
double ring_us(double bytes, int n, double gb_per_s) {
  return n > 1 && gb_per_s > 0 ? (n - 1.0) / n * bytes / (gb_per_s * 1e3) : 0;
}

struct Degrees {
  int pp = 0, tp = 1, cp = 1, dp = 1;
  bool sequence_parallel = false, distributed_optimizer = false;
  int gradient_ranks() const { return dp * cp; }  // Megatron reduces gradients over data- and context-parallel ranks
};

Result<Degrees> degrees(const ModelSpec& m, const ClusterSpec& cluster, const PlanSpec& plan) {
  using R = Result<Degrees>;
  if (plan.tp < 1 || plan.dp < 1 || plan.cp < 1) return R::Error(Status::Invalid("tp, cp and dp must be ≥ 1"));
  if (plan.tp > cluster.gpus_per_node)
    return R::Error(Status::Invalid("tensor parallelism stays within a node: tp " + std::to_string(plan.tp) + " > " +
                                    std::to_string(cluster.gpus_per_node) + " GPUs per node"));
  if (m.heads % plan.tp != 0 || m.kv_heads % plan.tp != 0)
    return R::Error(Status::Invalid("tp " + std::to_string(plan.tp) + " must divide the model's " +
                                    std::to_string(m.heads) + " heads and " + std::to_string(m.kv_heads) +
                                    " key/value heads"));
  // Megatron cuts each sequence into 2·cp chunks of equal length (get_batch_on_this_cp_rank).
  if (plan.cp > 1 && m.seq_len % (2 * plan.cp) != 0)
    return R::Error(Status::Invalid("cp " + std::to_string(plan.cp) + ": the sequence " + std::to_string(m.seq_len) +
                                    " must divide into 2 × cp = " + std::to_string(2 * plan.cp) + " equal chunks"));
  const int64_t tcd = int64_t{plan.tp} * plan.cp * plan.dp;
  if (cluster.num_gpus % tcd != 0)
    return R::Error(Status::Invalid(std::to_string(cluster.num_gpus) +
                                    " GPUs are not a multiple of tp × cp × dp = " + std::to_string(tcd)));
  Degrees d;
  d.tp = plan.tp;
  d.cp = plan.cp;
  d.dp = plan.dp;
  d.pp = static_cast<int>(cluster.num_gpus / tcd);
  d.sequence_parallel = plan.tp > 1 && plan.sequence_parallel;
  d.distributed_optimizer = d.gradient_ranks() > 1 && plan.distributed_optimizer;
  return R::Of(d);
}

// Bus bandwidth among `ranks` GPUs `stride` ranks apart: NVLink while they share a node.
double group_gb_per_s(const ClusterSpec& cluster, int64_t stride, int64_t ranks) {
  return stride * ranks > cluster.gpus_per_node ? cluster.p2p_gb_per_s : cluster.nvlink_gb_per_s;
}

// What ring attention leaves exposed (Megatron's context parallelism, p2p): cp − 1 steps, each
// passing a K/V block of `step_bytes` to the next GPU while attending the block in hand
// (`attention_us` / cp of compute a step).
double context_exposed_us(int cp, double step_bytes, double attention_us, double gb_per_s, double latency_us) {
  if (cp == 1 || !(gb_per_s > 0)) return 0;
  const double step_us = latency_us + step_bytes / (gb_per_s * 1e3);
  return (cp - 1) * std::max(0.0, step_us - attention_us / cp);
}

}  // namespace

Result<Problem> build_problem(const ModelSpec& m, const ClusterSpec& cluster, const PlanSpec& plan) {
  using R = Result<Problem>;
  if (m.num_layers < 1 || m.hidden < 1 || m.ffn < 1 || m.heads < 1 || m.kv_heads < 1 || m.seq_len < 1 || m.vocab < 1 ||
      m.head_dim < 0 || (m.head_dim == 0 && m.hidden % m.heads != 0) || m.heads % m.kv_heads != 0)
    return R::Error(
        Status::Invalid("model \"" + m.name +
                        "\": sizes must be positive, hidden divisible by heads (unless head_dim is given), heads "
                        "by kv heads"));
  if (m.sliding_window > 0 && m.sliding_window < m.seq_len)
    return R::Error(Status::Invalid("model \"" + m.name + "\": sliding_window " + std::to_string(m.sliding_window) +
                                    " is shorter than the sequence " + std::to_string(m.seq_len) +
                                    ": windowed attention is not modelled (plan with --seq-len at most the window)"));
  if (cluster.num_gpus < 1 || !(cluster.peak_tflops > 0) || !(cluster.utilization > 0) || cluster.utilization > 1)
    return R::Error(
        Status::Invalid("cluster \"" + cluster.name + "\": needs GPUs, a positive peak and a utilization in (0, 1]"));
  if (plan.microbatch_size < 1) return R::Error(Status::Invalid("microbatch size must be ≥ 1"));
  Result<Degrees> deg = degrees(m, cluster, plan);
  if (!deg.ok()) return R::Error(deg.status);
  const int D = deg.value.pp, T = deg.value.tp;
  const bool sp = deg.value.sequence_parallel;
  if (D > m.num_layers)
    return R::Error(Status::Invalid("more pipeline stages (" + std::to_string(D) + ") than layers (" +
                                    std::to_string(m.num_layers) + ")"));
  const bool fp8 = plan.precision == Precision::kFp8;
  if (fp8 && !(cluster.peak_fp8_tflops > 0))
    return R::Error(Status::Invalid("cluster \"" + cluster.name + "\" has no FP8 tensor cores: plan it in bf16"));
  const int CP = deg.value.cp;
  const double flops_per_us = cluster.peak_tflops * 1e6 * cluster.utilization;
  const double gemm_flops_per_us = fp8 ? cluster.peak_fp8_tflops * 1e6 * cluster.utilization : flops_per_us;
  // Per GPU: s/cp tokens of each of the microbatch's b sequences.
  const double s = static_cast<double>(m.seq_len) / CP, b = plan.microbatch_size, h = m.hidden,
               bytes = m.bytes_per_value;
  LayerCost whole_layer = context_share(transformer_layer_cost(m, plan.microbatch_size), CP);
  if (fp8) {
    // Transformer Engine keeps the GEMM inputs W needs in FP8, one byte each: the QKV and first
    // MLP inputs (the norms' outputs, h each) and the second MLP input (f); attention keeps its
    // own (Q, K, V and its output, for the flash backward) in BF16.
    const double saved = b * s * (2 * h + m.ffn) * (bytes - 1);
    whole_layer.act_bytes -= static_cast<int64_t>(saved);
    whole_layer.act_after_b_bytes -= static_cast<int64_t>(saved);
  }
  // [K22] kept whole without sequence parallelism: norm and first-matmul inputs, GPT's dropout masks.
  const double replicated = b * s * (4 * h * bytes + (m.mlp == Mlp::kGelu ? 2 * h : 0));
  const LayerCost layer = shard(whole_layer, T, sp, replicated);
  const LayerCost head =
      shard(context_share(head_cost(m, plan.microbatch_size), CP), T, sp, sp ? 0 : b * s * h * bytes);
  const double f_gemm_us = (layer.fwd_flops - layer.fwd_attention_flops) / gemm_flops_per_us;
  const double b_gemm_us = (layer.bwd_input_flops - layer.bwd_attention_flops) / gemm_flops_per_us;
  const double f_attention_us = layer.fwd_attention_flops / flops_per_us;
  const double b_attention_us = layer.bwd_attention_flops / flops_per_us;
  // [S19] two all-reduces of the b·s·h activation per layer in F (and again in B, and in a
  // recompute), on the node's NVLink. Overlapped (Megatron's --tp-comm-overlap, which splits
  // each GEMM to run beside its all-gather or reduce-scatter), only what outlasts the GEMMs shows.
  const double tp_us = 2 * 2 * ring_us(b * s * h * bytes, T, cluster.nvlink_gb_per_s);
  const double tp_f_us = plan.tp_comm_overlap ? std::max(0.0, tp_us - f_gemm_us) : tp_us;
  const double tp_b_us = plan.tp_comm_overlap ? std::max(0.0, tp_us - b_gemm_us) : tp_us;
  // Ring attention's K/V blocks (this GPU's kv heads, 1/T of them): one each step in F; in B
  // the blocks and their gradients, twice the bytes. CP peers are tp ranks apart.
  const double kv_width = static_cast<double>(m.kv_heads) * m.attention_width() / m.heads;
  const double step_bytes = b * s * 2 * kv_width / T * bytes;
  const double cp_gb_per_s = group_gb_per_s(cluster, T, CP);
  const double cp_f_us = context_exposed_us(CP, step_bytes, f_attention_us, cp_gb_per_s, cluster.p2p_latency_us);
  const double cp_b_us = context_exposed_us(CP, 2 * step_bytes, b_attention_us, cp_gb_per_s, cluster.p2p_latency_us);
  // The pipeline spans every node, its neighbours tp · cp · dp ranks apart: on more than one node
  // some hop crosses, and the one hop time the problem holds is the slowest.
  const bool hop_crosses_nodes = D > 1 && cluster.num_gpus > cluster.gpus_per_node;

  Problem p;
  p.num_devices = D;
  p.num_microbatches = plan.num_microbatches > 0 ? plan.num_microbatches : 4 * D;
  p.placement = Placement::kLinear;
  p.chunks_per_device = 1;
  const double hop_bytes = b * s * h * bytes / T;  // [N21] the hidden state between stages, 1/T per GPU
  const double hop_gb_per_s = hop_crosses_nodes ? cluster.p2p_gb_per_s : cluster.nvlink_gb_per_s;
  p.t_comm_us = cluster.p2p_latency_us + (hop_gb_per_s > 0 ? hop_bytes / (hop_gb_per_s * 1e3) : 0);
  p.host_link = {cluster.d2h_gb_per_s, cluster.h2d_gb_per_s, cluster.host_link_latency_us};
  const double optimizer_shards = deg.value.distributed_optimizer ? deg.value.gradient_ranks() : 1;
  const bool fp8_params = fp8 && deg.value.distributed_optimizer;
  // Item by item — the embedding, the layers, the LM head with its loss — so that any placement's
  // and partition's cut follows them (rechunk, with_partition); the linear stages are cut here.
  auto static_bytes = [&](double params) {
    return static_cast<int64_t>(params * (4 + 12 / optimizer_shards));
  };  // [R20]
  // The embedding: a lookup (no time to speak of, nothing kept but the token ids), its table.
  p.layers.push_back(
      {.kind = LayerKind::kEmbedding, .static_bytes = static_bytes(static_cast<double>(m.vocab) * h / T)});
  for (int k = 0; k < m.num_layers; k++) {
    LayerSpec l;
    l.t_f_us = f_gemm_us + f_attention_us + tp_f_us + cp_f_us;
    l.t_b_us = b_gemm_us + b_attention_us + tp_b_us + cp_b_us;
    l.t_w_us = layer.bwd_weight_flops / gemm_flops_per_us;
    l.t_r_us = l.t_f_us;
    l.act_f_bytes = layer.act_bytes;
    l.act_w_bytes = -layer.act_after_b_bytes;
    l.act_input_bytes = std::min<int64_t>(l.act_f_bytes, static_cast<int64_t>(hop_bytes));
    // FP8 GEMMs read an FP8 weight and its transpose. With the distributed optimizer Megatron
    // keeps the weights in FP8 alone (--fp8-param-gather; the master copy is the optimizer's fp32):
    // the two bytes replace BF16's two. Without it both stay beside the BF16 weight.
    l.static_bytes = static_bytes(static_cast<double>(layer.params)) + (fp8 && !fp8_params ? 2 * layer.params : 0);
    p.layers.push_back(l);
  }
  LayerSpec l{.kind = LayerKind::kHead};
  l.t_f_us = l.t_r_us = head.fwd_flops / flops_per_us;
  l.t_b_us = head.bwd_input_flops / flops_per_us;
  l.t_w_us = head.bwd_weight_flops / flops_per_us;
  l.act_f_bytes = head.act_bytes;
  l.act_w_bytes = -head.act_after_b_bytes;
  l.act_input_bytes = std::min<int64_t>(l.act_f_bytes, static_cast<int64_t>(hop_bytes));
  l.static_bytes = static_bytes(static_cast<double>(head.params));
  p.layers.push_back(l);
  p.devices.assign(D, DeviceSpec{});
  for (int c = 0; c < D; c++) {
    p.devices[c].mem_budget_bytes = plan.mem_budget_bytes > 0 ? plan.mem_budget_bytes : cluster.hbm_bytes / 10 * 9;
    p.devices[c].host_link = c / std::max(1, cluster.gpus_per_host_link);
  }
  Result<std::vector<int>> counts = partition_counts(p, plan.partition);
  if (!counts.ok()) return R::Error(counts.status);
  cut_layers(counts.value, &p);
  Status st = check_problem(p);
  if (!st.ok()) return R::Error(st);
  return R::Of(std::move(p));
}

double dp_exposed_us(const ModelSpec& m, const ClusterSpec& cluster, const PlanSpec& plan) {
  Result<Degrees> deg = degrees(m, cluster, plan);
  if (!deg.ok() || deg.value.gradient_ranks() == 1) return 0;
  const int T = deg.value.tp, ranks = deg.value.gradient_ranks();
  const double stage_params = static_cast<double>(transformer_layer_cost(m, 1).params) / T *
                              std::max(1, m.num_layers / std::max(1, deg.value.pp));
  const double bucket_bytes = 2 * std::min(40e6, stage_params);  // bf16 gradients and parameters
  // The gradients' peers (data- and context-parallel) are tp ranks apart.
  return 2 * ring_us(bucket_bytes, ranks, group_gb_per_s(cluster, T, ranks));  // one reduce-scatter, one all-gather
}

double optimizer_step_us(const ModelSpec& m, const ClusterSpec& cluster, const PlanSpec& plan) {
  Result<Degrees> deg = degrees(m, cluster, plan);
  if (!deg.ok() || !(cluster.hbm_gb_per_s > 0)) return 0;
  const int pp = std::max(1, deg.value.pp);
  const double layers = std::ceil(static_cast<double>(m.num_layers) / pp);
  const double params =
      (layers * static_cast<double>(transformer_layer_cost(m, 1).params) + static_cast<double>(m.vocab) * m.hidden) /
      deg.value.tp / (deg.value.distributed_optimizer ? deg.value.gradient_ranks() : 1);
  return 30 * params / (cluster.hbm_gb_per_s * 1e3);  // GB/s = 1e3 bytes/µs
}

IterationFigures iteration_figures(const ModelSpec& m, const ClusterSpec& cluster, const PlanSpec& plan,
                                   int64_t global_batch, double pipeline_us) {
  IterationFigures f;
  f.pipeline_us = pipeline_us;
  f.dp_exposed_us = dp_exposed_us(m, cluster, plan);
  f.optimizer_us = optimizer_step_us(m, cluster, plan);
  f.iteration_us = f.pipeline_us + f.dp_exposed_us + f.optimizer_us;
  const double seconds = f.iteration_us * 1e-6;
  if (seconds <= 0 || cluster.num_gpus < 1) return f;
  f.tokens_per_s_per_gpu = static_cast<double>(global_batch) * m.seq_len / seconds / cluster.num_gpus;
  f.model_tflops_per_gpu = model_flops(m, global_batch) / seconds / cluster.num_gpus / 1e12;
  f.mfu = f.model_tflops_per_gpu / cluster.peak_tflops;
  return f;
}

double model_flops(const ModelSpec& m, int64_t sequences) {
  const LayerCost layer = transformer_layer_cost(m, 1);
  const LayerCost head = head_cost(m, 1);
  return 3.0 * static_cast<double>(sequences) * (m.num_layers * layer.fwd_flops + head.fwd_flops);
}

}  // namespace optpipe
