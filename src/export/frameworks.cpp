// A plan's layout and partition as the flags of Megatron-LM and torchtitan.
//
// Megatron-LM (megatron/core/transformer/pipeline_parallel_layer_layout.py, parse_str_to_list):
// stages split by "|", E embedding, t decoder layer, L loss (with the output layer), "(...)*n"
// repeats a group, "x*n" a character, commas are cosmetic; flat stage i is virtual stage i / pp of
// pipeline rank i mod pp (looped placement only). torchtitan (torchtitan/distributed/
// pipeline_parallel.py): module_fqns_per_model_part lists each stage's modules in global stage
// order; rank r holds stages r, r + pp, ... ("loop"), or r and 2·pp − 1 − r ("v", chosen by the
// schedule names ZBVZeroBubble and DualPipeV).
#include <string>

#include "optpipe/export.h"

namespace optpipe {

namespace {

Status need_items(const Problem& p, const char* framework) {
  if (!layers_match(p) || p.layers.front().kind != LayerKind::kEmbedding || p.layers.back().kind != LayerKind::kHead)
    return Status::Invalid(std::string(framework) +
                           " export needs the model's items (embedding, layers, head) behind the stages: a problem "
                           "from plan (--problem-out), its stages unedited");
  return Status::Ok();
}

// "t*3", "t", or "" for k layers.
std::string layers_token(int k) { return k == 0 ? "" : k == 1 ? "t" : "t*" + std::to_string(k); }

}  // namespace

Result<std::string> megatron_flags(const Problem& p) {
  using R = Result<std::string>;
  if (Status st = need_items(p, "Megatron-LM"); !st.ok()) return R::Error(st);
  if (p.placement == Placement::kVShape || p.placement == Placement::kWave)
    return R::Error(Status::Invalid(std::string("Megatron-LM places virtual stage c of pipeline rank r at stage c·pp + "
                                                "r (looped); a ") +
                                    (p.placement == Placement::kWave ? "wave" : "V-shape") +
                                    " placement cannot be expressed: plan with --placement linear or interleaved for "
                                    "Megatron"));
  if (p.num_devices == 1 && p.chunks_per_device > 1)
    return R::Error(Status::Invalid(
        "Megatron-LM runs virtual pipeline stages only with a pipeline size above 1; this plan puts " +
        std::to_string(p.chunks_per_device) + " chunks on its single device: plan with --chunks 1 for Megatron"));
  const std::vector<int> layers = transformer_layers_per_stage(p);
  const int S = p.num_stages(), D = p.num_devices;
  std::vector<std::string> stages;
  int total = 0;
  for (int s = 0; s < S; s++) {
    std::string stage = s == 0 ? "E" : "";
    stage += layers_token(layers[s]);
    if (s == S - 1) stage += 'L';
    stages.push_back(std::move(stage));
    total += layers[s];
  }
  // Runs of equal stages as "(x|)*n", then the next stage after a cosmetic comma.
  std::string layout;
  for (int s = 0; s < S;) {
    int n = 1;
    while (s + n < S && stages[s + n] == stages[s]) n++;
    if (n >= 2) {
      layout += "(" + stages[s] + "|)*" + std::to_string(n) + (s + n < S ? "," : "");
    } else {
      layout += stages[s] + (s + 1 < S ? "|" : "");
    }
    s += n;
  }
  if (!layout.empty() && layout.back() == ',') layout.pop_back();
  std::string out = "# optpipe plan for Megatron-LM: the pipeline layout and partition. Megatron runs its own ";
  out += p.chunks_per_device > 1 ? "interleaved 1F1B" : "1F1B";
  out += " order; optpipe's order, offloads and recomputes are not expressible as its flags.\n";
  out += "--pipeline-model-parallel-size " + std::to_string(D) + " --num-layers " + std::to_string(total) +
         " --pipeline-model-parallel-layout \"" + layout + "\"\n";
  // Without virtual stages, the first/last-stage flags say the same when the middle stages are even.
  bool even_middle = S >= 3;
  for (int s = 2; s + 1 < S; s++) even_middle = even_middle && layers[s] == layers[1];
  if (p.chunks_per_device == 1 && even_middle && layers[0] > 0 && layers[S - 1] > 0)
    out += "# or, equivalently: --pipeline-model-parallel-size " + std::to_string(D) + " --num-layers " +
           std::to_string(total) + " --decoder-first-pipeline-num-layers " + std::to_string(layers[0]) +
           " --decoder-last-pipeline-num-layers " + std::to_string(layers[S - 1]) + "\n";
  return R::Of(std::move(out));
}

Result<std::string> torchtitan_toml(const Problem& p, const std::string& csv_path) {
  using R = Result<std::string>;
  if (Status st = need_items(p, "torchtitan"); !st.ok()) return R::Error(st);
  if ((p.placement == Placement::kVShape || p.placement == Placement::kWave) && p.chunks_per_device != 2)
    return R::Error(Status::Invalid(
        "torchtitan places stages looped or in a V of exactly 2 stages a rank (stage_ids_this_rank's \"loop\" and "
        "\"v\" styles); a wave of " +
        std::to_string(p.chunks_per_device) + " chunks cannot be expressed: plan with --placement interleaved"));
  const std::vector<int> layers = transformer_layers_per_stage(p);
  const int S = p.num_stages();
  std::string parts = "[\n";
  for (int s = 0, next = 0; s < S; s++) {
    parts += "  [";
    std::string names;
    if (s == 0) names += "\"tok_embeddings\"";
    for (int k = 0; k < layers[s]; k++)
      names += (names.empty() ? "\"layers." : ", \"layers.") + std::to_string(next++) + "\"";
    if (s == S - 1) names += names.empty() ? "\"norm\", \"output\"" : ", \"norm\", \"output\"";
    parts += names + "]" + (s + 1 < S ? "," : "") + "\n";
  }
  parts += "]";
  // The stage-to-rank style follows the schedule's name even when a CSV gives the order.
  const char* schedule = p.placement == Placement::kVShape || p.placement == Placement::kWave ? "ZBVZeroBubble"
                         : p.chunks_per_device > 1                                            ? "Interleaved1F1B"
                                                                                              : "1F1B";
  std::string out =
      "# optpipe plan for torchtitan (Llama module names; torchtitan's TOML config, [parallelism]). The order is "
      "the CSV (optpipe export --format csv);\n# the stage-to-rank mapping follows pipeline_parallel_schedule even "
      "with a CSV. Newer torchtitan reads the same fields from ParallelismConfig, and names the head lm_head.\n";
  out += "[parallelism]\n";
  out += "pipeline_parallel_degree = " + std::to_string(p.num_devices) + "\n";
  out += std::string("pipeline_parallel_schedule = \"") + schedule + "\"\n";
  out += "pipeline_parallel_schedule_csv = \"" + csv_path + "\"\n";
  out += "module_fqns_per_model_part = " + parts + "\n";
  return R::Of(std::move(out));
}

}  // namespace optpipe
