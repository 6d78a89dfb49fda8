// cost_model.h — from "Llama-2 13B on 16 H100s with 60 GiB free per GPU" to a Problem.
//
// A transformer (layers, widths, sequence, vocabulary, microbatch size) and a cluster (per-GPU
// speed, memory, links) give every stage's F/B/W/R times and activation bytes, the static memory
// of every device and the hop time between devices. Each formula names its source next to it.
// Measured profiles (written by the runtime's profiler, or by hand) override the formulas:
// see apply_profile() in json_io.h.
//
//   Result<Problem> p = build_problem(find_model("llama2-13b").value, find_cluster("16xh100").value, plan);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "optpipe/problem.h"
#include "optpipe/status.h"

namespace optpipe {

enum class Mlp { kGelu, kSwiGlu };  // 2 weight matrices (GPT) or 3 (Llama)

struct ModelSpec {
  std::string name;
  int num_layers = 0;
  int hidden = 0;    // h
  int ffn = 0;       // MLP inner width
  int heads = 0;     // a
  int kv_heads = 0;  // grouped-query attention; = heads for multi-head attention
  int seq_len = 0;   // s
  int vocab = 0;     // V
  Mlp mlp = Mlp::kGelu;
  bool flash_attention = true;  // no s² attention scores kept for backward
  int bytes_per_value = 2;      // bf16 / fp16 activations and weights
  int head_dim = 0;             // per attention head; 0: hidden / heads (Gemma's is wider)
  int sliding_window = 0;       // tokens a query attends to; 0: all (build_problem refuses one shorter than seq_len)

  int attention_width() const { return head_dim > 0 ? heads * head_dim : hidden; }  // Q's, and the output's input
};

struct ClusterSpec {
  std::string name;
  int num_gpus = 0;
  double peak_tflops = 0;    // dense bf16 per GPU
  double utilization = 0.5;  // achieved fraction of the peak (of each precision's)
  int64_t hbm_bytes = 0;
  double d2h_gb_per_s = 0, h2d_gb_per_s = 0;  // GPU↔host, each way
  double host_link_latency_us = 10;
  int gpus_per_host_link = 1;  // GPUs sharing one host link (their transfers queue)
  double p2p_gb_per_s = 0;     // between GPUs of different nodes, each way
  double p2p_latency_us = 0;
  int gpus_per_node = 8;
  double nvlink_gb_per_s = 0;  // between GPUs of one node: a ring collective's bus bandwidth
  double hbm_gb_per_s = 0;     // memory bandwidth: the optimizer step's rate
  double peak_fp8_tflops = 0;  // dense FP8 per GPU; 0: no FP8 tensor cores (A100)
};

// What the transformer layers' weight matmuls run in. FP8 as Megatron runs it with Transformer
// Engine (--fp8-format hybrid; tensor-wise or block scaling alike): the QKV, attention-output and
// MLP GEMMs in FP8, forward and backward; attention itself, the norms, the embedding and the LM
// head stay in BF16.
enum class Precision { kBf16, kFp8 };
const char* precision_name(Precision p);  // "bf16", "fp8"
Result<Precision> parse_precision(const std::string& name);

// The cluster's GPUs are tp · cp · dp · pipeline stages, in Megatron's rank order (tp-cp-dp-pp):
// tensor-parallel ranks innermost (within a node), then context-, data-parallel, pipeline. Context
// parallelism (Megatron's --context-parallel-size) splits every sequence over cp GPUs; microbatches
// count per data-parallel rank, so cp leaves the batch as it is.
struct PlanSpec {
  int num_microbatches = 0;                            // per data-parallel rank; 0: 4 × pipeline devices
  int microbatch_size = 1;                             // sequences per microbatch
  int64_t mem_budget_bytes = 0;                        // per device; 0: 90% of HBM
  PartitionRule partition = PartitionRule::kBalanced;  // the stages' cut (problem.h)
  int tp = 1;                                          // tensor-parallel degree, within a node
  int dp = 1;                                          // data-parallel degree
  bool sequence_parallel = true;                       // with tp > 1 (Korthikanti et al.)
  bool distributed_optimizer = true;                   // with dp > 1: optimizer state sharded over dp (ZeRO-1)
  int cp = 1;                                          // context-parallel degree: a sequence split over cp GPUs
  Precision precision = Precision::kBf16;              // the layers' weight matmuls
  bool tp_comm_overlap = false;  // Megatron's --tp-comm-overlap: tensor-parallel collectives under the GEMMs
};

const std::vector<ModelSpec>& model_presets();
// The preset of that name, or, for a name ending in ".json", the Hugging Face config.json at that
// path (model_from_hf_config); the error lists the known presets.
Result<ModelSpec> find_model(const std::string& name);

// A dense decoder from its Hugging Face config.json (model_type llama, mistral, qwen2 or gemma):
// num_hidden_layers, hidden_size, intermediate_size, num_attention_heads, num_key_value_heads
// (default: the heads), head_dim (default hidden / heads), vocab_size, max_position_embeddings
// (the sequence: at most 8192), torch_dtype (bytes per value). tie_word_embeddings is read and
// costs nothing more: with pipeline stages each end keeps its copy, as Megatron does. What would
// change the cost and is not modelled is refused with the key named: mixture-of-experts keys,
// multi-latent attention, per-layer attention types; a sliding window is kept (sliding_window), and
// build_problem refuses a sequence longer than it.
// `name` names the model in errors and results.
Result<ModelSpec> model_from_hf_config(const std::string& json_text, const std::string& name);

// "16xh100", "8xa100-40gb", ...: <count>x<gpu> with gpu one of gpu_presets().
const std::vector<ClusterSpec>& gpu_presets();  // num_gpus = 1
Result<ClusterSpec> find_cluster(const std::string& name);

// The per-layer figures behind the problem, for one microbatch (b sequences of length s).
struct LayerCost {
  double fwd_flops = 0;                                     // F
  double bwd_input_flops = 0;                               // B: gradients for the input (and attention)
  double fwd_attention_flops = 0, bwd_attention_flops = 0;  // the parts of F and B that are attention (BF16)
  double bwd_weight_flops = 0;                              // W: gradients for the weights
  int64_t act_bytes = 0;                                    // kept by F for backward
  int64_t act_after_b_bytes = 0;                            // still needed by W once B is done
  int64_t params = 0;
};
LayerCost transformer_layer_cost(const ModelSpec& m, int microbatch_size);

// The runtime's model: layers per chunk, in model order; the first chunk also holds the embedding,
// the last the LM head and loss. Even: Megatron's split; otherwise balanced: as even in forward
// time as whole layers allow, at least one layer a chunk when there are as many layers as chunks.
std::vector<int> partition_layers(const ModelSpec& m, int num_chunks, PartitionRule rule, int microbatch_size);

// The problem for the cluster's num_gpus / (tp · dp) pipeline devices, linear placement, with its
// layers (Problem::layers), from which families and the optimizer cut other placements at layer
// boundaries. One data-parallel rank's pipeline: every rank runs the same.
Result<Problem> build_problem(const ModelSpec& m, const ClusterSpec& cluster, const PlanSpec& plan);

// What the data-parallel gradient reduction adds after the last backward, in µs: Megatron's
// overlapped reduction (--overlap-grad-reduce, 40M-parameter buckets reduced as their gradients
// are ready) leaves the last bucket's reduce-scatter, and the distributed optimizer's parameter
// all-gather (--overlap-param-gather) the first bucket's, exposed. 0 with dp = 1.
double dp_exposed_us(const ModelSpec& m, const ClusterSpec& cluster, const PlanSpec& plan);

// The optimizer step after the last backward, in µs: mixed-precision Adam reads each parameter's
// fp32 gradient, master weight and two moments, and writes the three and the bf16 weight (30
// bytes a parameter), at HBM bandwidth, over the parameters the busiest GPU updates: an end
// stage's (its layers and the embedding or head) / tp, / dp with the distributed optimizer. 0
// where the cluster gives no bandwidth.
double optimizer_step_us(const ModelSpec& m, const ClusterSpec& cluster, const PlanSpec& plan);

// One iteration as users compare it: the pipeline's makespan, then the exposed data-parallel
// reduction (dp_exposed_us) and the optimizer step; tokens/s/GPU and model TFLOP/s/GPU over
// `global_batch` sequences on every GPU of the cluster (model_flops: no recompute counted).
struct IterationFigures {
  double pipeline_us = 0, dp_exposed_us = 0, optimizer_us = 0, iteration_us = 0;
  double tokens_per_s_per_gpu = 0, model_tflops_per_gpu = 0, mfu = 0;
};
IterationFigures iteration_figures(const ModelSpec& m, const ClusterSpec& cluster, const PlanSpec& plan,
                                   int64_t global_batch, double pipeline_us);

// The model FLOPs one iteration of `sequences` sequences does (forward, and backward at twice the
// forward; no recompute): the numerator of MFU.
double model_flops(const ModelSpec& m, int64_t sequences);

}  // namespace optpipe
