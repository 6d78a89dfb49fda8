// problem.h — the pipeline scheduling problem, as plain data.
//
// A model is cut into S = D·v chunks ("stages", in model order) placed on D devices; M
// microbatches flow through them. Every stage has a cost (durations of its F, B, W and R passes)
// and a memory footprint (activation deltas of those passes, transient workspaces); every device
// has a static footprint, a budget, and a host link for offloading. Nothing here changes while a
// problem is solved: every algorithm takes a `const Problem&`.
//
//   Problem p = default_problem();          // or read_problem_json(...)
//   Status s = check_problem(p);            // names the first bad field, if any
//   int d = p.device_of(3);                 // which device runs stage 3
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "optpipe/status.h"

namespace optpipe {

// Where stage s lives. Linear: v = 1, stage s on device s. Interleaved (looped): v ≥ 1, device
// s mod D. V-shape: v = 2, stage s < D on device s, stage s ≥ D on device 2D−1−s. Wave (Hanayo):
// v ≥ 1, round c = s div D runs down the devices when c is even and up when it is odd, so device
// s mod D or D−1−(s mod D); the V-shape is the wave with v = 2. Append new values at the end.
enum class Placement { kLinear, kInterleaved, kVShape, kWave };

const char* placement_name(Placement p);
bool parse_placement(const std::string& name, Placement* out);

// One chunk of the model. Memory deltas follow DESIGN.md: F adds act_f_bytes when it starts,
// B adds act_b_bytes and W adds act_w_bytes when they end, and the three sum to zero.
struct StageSpec {
  double t_f_us = 0;  // forward
  double t_b_us = 0;  // backward for the input (activation gradient)
  double t_w_us = 0;  // backward for the weights
  double t_r_us = 0;  // recompute of the forward from the kept input (usually = t_f_us)

  int64_t act_f_bytes = 0;      // kept by F until backward (≥ 0)
  int64_t act_b_bytes = 0;      // released by B (≤ 0; > 0 only when B reruns layers for W)
  int64_t act_w_bytes = 0;      // released by W (what the weight gradient still needed)
  int64_t act_input_bytes = 0;  // the chunk input, all F keeps when its activation is recomputed

  int64_t ws_f_bytes = 0;  // transient workspace while F (and R) runs
  int64_t ws_b_bytes = 0;  // ... while B runs
  int64_t ws_w_bytes = 0;  // ... while W runs (a fused BW takes the larger of B and W)

  // Selective recompute as Megatron configures it (--recompute-num-layers): the chunk's layers,
  // and how many of them keep only their input and rerun their forward inside B, for every
  // microbatch. with_recompute_layers() sets recompute_layers and folds its cost into the fields
  // above; a problem read from a file holds them already folded.
  int num_layers = 1;
  int recompute_layers = 0;
};

struct DeviceSpec {
  int64_t static_bytes = 0;      // parameters, gradients, optimizer state
  int64_t mem_budget_bytes = 0;  // the peak of static + activations + workspace may not exceed it
  int host_link = 0;             // devices with the same host link share its two channels
};

// Device↔host transfers: duration = latency + bytes / bandwidth, one transfer at a time per
// direction on each host link.
struct HostLinkSpec {
  double d2h_gb_per_s = 25;  // offload direction, 1 GB = 1e9 bytes
  double h2d_gb_per_s = 25;  // reload direction
  double latency_us = 10;

  double d2h_us(int64_t bytes) const { return latency_us + bytes / (d2h_gb_per_s * 1e3); }
  double h2d_us(int64_t bytes) const { return latency_us + bytes / (h2d_gb_per_s * 1e3); }
};

// What an item of the model is: a transformer layer, the embedding (first, when present) or the
// LM head with its loss (last, when present).
enum class LayerKind { kLayer, kEmbedding, kHead };
const char* layer_kind_name(LayerKind k);  // "layer", "embedding", "head"

// One item of the model (a layer, the embedding or the LM head with its loss), as the cost model
// prices it, from which a cut into stages for any placement and partition follows (rechunk,
// with_partition). A stage holds a contiguous run of at least one item.
struct LayerSpec {
  LayerKind kind = LayerKind::kLayer;
  double t_f_us = 0, t_b_us = 0, t_w_us = 0, t_r_us = 0;
  int64_t act_f_bytes = 0;      // kept by F until backward
  int64_t act_w_bytes = 0;      // released by W (≤ 0)
  int64_t act_input_bytes = 0;  // the layer's input: what a stage starting here keeps when recomputed
  int64_t static_bytes = 0;     // parameters, gradients, optimizer state
};

// How practitioners cut a model into stages (chunks), and optpipe's own balanced cut. Counts are
// of transformer layers; the embedding goes to the first stage and the head to the last.
enum class PartitionRule {
  kBalanced,       // the least largest F + B + W of a stage (the embedding and head counted)
  kEven,           // Megatron's even split: L/S layers a stage (spare layers skip the first)
  kEvenAccounted,  // embedding and head count as one layer each: Megatron's --account-for-*,
                   // torchtitan's default (first and last stage one layer less), ZB's k·p − 2
  kDevices,        // the balanced cut, then items moved between stages while that lowers
                   // the busiest device's F + B + W (then the sum of squares): a device's load
                   // balanced, not each chunk's (a V-shape's device 0 holds both ends)
};

struct Problem {
  int num_devices = 0;       // D
  int num_microbatches = 0;  // M
  Placement placement = Placement::kLinear;
  int chunks_per_device = 1;        // v; S = D·v
  double t_comm_us = 0;             // activation/gradient hop between stages on different devices
  std::vector<StageSpec> stages;    // S entries, model order
  std::vector<DeviceSpec> devices;  // D entries
  HostLinkSpec host_link;
  // Optional: the model layer by layer, stages[s] being the next stages[s].num_layers of them. When
  // present (and still what the stages sum to), rechunk cuts layers instead of splitting stages.
  std::vector<LayerSpec> layers;
  // How rechunk cuts the layers for another placement (a pinned partition rule follows the
  // problem to every placement searched).
  PartitionRule partition = PartitionRule::kBalanced;

  int num_stages() const { return num_devices * chunks_per_device; }

  int device_of(int stage) const {
    switch (placement) {
      case Placement::kLinear: return stage;
      case Placement::kInterleaved: return stage % num_devices;
      case Placement::kVShape:
      case Placement::kWave: {
        const int round = stage / num_devices, along = stage % num_devices;
        return round % 2 == 0 ? along : num_devices - 1 - along;
      }
    }
    return -1;
  }

  // Durations of moving stage s's kept activation to the host and back.
  double offload_us(int stage) const;
  double reload_us(int stage) const;

  // Every forward's activation of the device's stages, all kept at once (GPipe's peak).
  int64_t every_activation_bytes(int device) const;
  // Every F, B and W of the device's stages: the work any schedule runs there.
  double work_us(int device) const;
};

// Returns Ok, or an InvalidInput status whose message names the first bad field
// (e.g. "stages[2].t_f_us: must be finite and ≥ 0, got -1").
Status check_problem(const Problem& p);

// A problem whose stages all cost the same, with one memory budget for every device.
struct UniformSpec {
  int num_devices = 4;
  int num_microbatches = 8;
  Placement placement = Placement::kLinear;
  int chunks_per_device = 1;
  double t_f_us = 1000, t_b_us = 1000, t_w_us = 1000;
  double t_comm_us = 0;
  int64_t act_f_bytes = 1 << 30;
  int64_t act_w_bytes = -(1 << 28);  // act_b_bytes = −act_f_bytes − act_w_bytes
  int64_t act_input_bytes = 1 << 24;
  int num_layers = 1;  // per stage: more chunks than layers are not searched (max_chunks_per_device)
  int64_t static_bytes = 16ll << 30;
  int64_t mem_budget_bytes = 80ll << 30;
};
Problem make_uniform_problem(const UniformSpec& spec);

// The built-in problem every command uses when given none.
Problem default_problem();

// The model with Megatron's block recompute on every stage s: the first layers[s] of its num_layers
// keep only their inputs and rerun their forward inside B, for every microbatch. For that share of
// the layers, act_f_bytes is no longer kept (each such layer keeps its input, act_input_bytes,
// instead) and B spends that share of t_r_us more, with one layer's activation of workspace while
// it reruns. What W needs of the rerun layers is held from B until W (B may then allocate:
// act_b_bytes > 0) — unless weights_in_b: then B
// computes their weight gradients too, and that share of act_w_bytes and t_w_us moves from W into
// B (a split backward that holds rerun activations until a late W saves little). Refuses counts
// outside 0..num_layers and a problem already configured.
Result<Problem> with_recompute_layers(const Problem& p, const std::vector<int>& layers, bool weights_in_b = false);
// Ok, or an InvalidInput status naming the first stage that recomputes layers: the optimizer, the
// exact models and rechunk take a model as profiled (the optimizer decides recomputes itself).
Status check_no_recompute_layers(const Problem& p);

// The same model re-cut for another placement: S' = D·v' stages. With layers (from the cost
// model), they are cut into S' consecutive runs of at least one layer each, balancing the stages'
// F + B + W, and each device's static bytes follow its layers (so a V-shape's device 0 holds the
// embedding and the LM head); more stages than layers are refused. Without layers, when S' is a
// multiple of S each stage is split evenly into S'/S consecutive pieces (times and bytes divided;
// the kept input stays whole, layers are shared out, at least one a piece); when S is a multiple of
// S', consecutive groups are merged (summed); devices are unchanged. Budgets and links are kept. A
// problem whose stages recompute layers is refused: re-cut first, then configure.
Result<Problem> rechunk(const Problem& p, Placement placement, int chunks_per_device);

// The split of `items` things, in order, into `runs` consecutive runs of at least `least` each
// that minimises the largest run_cost(first, end, run) (the first such split, scanning cut points
// in order); the run lengths, in order. The cost model cuts layers into stages with it, rechunk
// a problem's layers.
std::vector<int> min_max_split(int items, int runs, int least,
                               const std::function<double(int first, int end, int run)>& run_cost);

// Sets p's stages and device static bytes from p->layers: stage s gets the next counts[s] layers
// (Σ counts = layers), devices the sum of their stages' static bytes.
void cut_layers(const std::vector<int>& counts, Problem* p);

const char* partition_rule_name(PartitionRule r);  // "balanced", "even", "even-accounted", "devices"
bool parse_partition_rule(const std::string& name, PartitionRule* out);
// Items per stage (what stages[s].num_layers holds) for p's stage count; InvalidInput without
// layers, or with more stages than the rule can give an item each.
Result<std::vector<int>> partition_counts(const Problem& p, PartitionRule rule);
// p re-cut to these items per stage (Σ = layers, each ≥ 1): stage times and bytes and device
// static bytes follow; the schedule's ops do not change, so any schedule of p runs on it.
// InvalidInput naming what is wrong (no layers, a count per stage, the sum).
Result<Problem> with_partition(const Problem& p, const std::vector<int>& items_per_stage);
// Every cut one item away from `items_per_stage`: one item from stage a to stage b (the stages
// between keep their counts, each passing one item on), every stage keeping at least one.
std::vector<std::vector<int>> one_item_moves(const std::vector<int>& items_per_stage);
// Per stage: its items (stages[s].num_layers), and of those its transformer layers.
std::vector<int> items_per_stage(const Problem& p);
std::vector<int> transformer_layers_per_stage(const Problem& p);
// Whether a and b are cut for the same placement and number of chunks per device.
bool same_placement(const Problem& a, const Problem& b);
// Whether p's stages are still what its layers sum to (an edit of the stages or a profile makes
// them stale, and rechunk then splits stages instead).
bool layers_match(const Problem& p);

}  // namespace optpipe
