// recipes.h — published training recipes (NVIDIA Megatron-Bridge's performance tables) and what
// optpipe's cost model predicts for each, run as the recipe runs it: Megatron's interleaved 1F1B
// at the recipe's virtual pipeline size, on Megatron's layer split. Shared by bench_recipes and the
// calibration test.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "optpipe/cost_model.h"
#include "optpipe/status.h"

namespace optpipe {

struct Recipe {
  std::string name;    // "h100-70b-fp8"
  std::string source;  // the table and container release it is quoted from
  std::string model;   // a preset
  std::string gpu;     // a GPU preset; the cluster is num_gpus of it
  int num_gpus = 0;
  Precision precision = Precision::kBf16;
  std::string precision_as_published;  // "FP8-CS", "MXFP8", ...
  int64_t global_batch = 0;
  int microbatch_size = 1, seq_len = 0, tp = 1, pp = 1, cp = 1, vp = 1;
  PartitionRule partition = PartitionRule::kEven;  // Megatron's split (--account-for-* where the recipe sets it)
  bool tp_comm_overlap = false;
  double tokens_per_s_per_gpu = 0, model_tflops_per_gpu = 0;  // as published
  bool held_out = false;                                      // not used to calibrate
};

// The recipes file (bench/recipes.json): strict, every field named on error.
Result<std::vector<Recipe>> read_recipes(const std::string& path);

struct RecipePrediction {
  ModelSpec model;
  ClusterSpec cluster;  // with the utilization predicted at
  PlanSpec spec;        // the recipe's layout (dp = GPUs / (tp · cp · pp))
  IterationFigures figures;
  int64_t peak_bytes = 0;  // the busiest GPU's, simulated
  bool fits = false;       // within 90% of the GPU's memory, as optpipe's budget defaults
};

// The recipe as Megatron runs it, every GPU of the preset at `utilization` of its peaks.
Result<RecipePrediction> predict_recipe(const Recipe& r, double utilization);

// The one utilization for the recipes not held out: the least mean |log(predicted / published)|
// tokens/s over a grid of 0.20 to 0.95 in steps of 0.005.
double calibrate_utilization(const std::vector<Recipe>& recipes);

}  // namespace optpipe
