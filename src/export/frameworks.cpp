// A plan's layout and partition as the flags of Megatron-LM and torchtitan.
//
// Megatron-LM (megatron/core/transformer/pipeline_parallel_layer_layout.py, parse_str_to_list):
// stages split by "|", E embedding, t decoder layer, L loss (with the output layer), "(...)*n"
// repeats a group, "x*n" a character, commas are cosmetic; flat stage i is virtual stage i / pp of
// pipeline rank i mod pp (looped placement only). torchtitan (torchtitan/distributed/
// pipeline_parallel.py): module_fqns_per_model_part lists each stage's modules in global stage
// order; rank r holds stages r, r + pp, ... ("loop"), or r and 2·pp − 1 − r ("v", chosen by the
// schedule names ZBVZeroBubble and DualPipeV).
#include <algorithm>
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

// Megatron's recompute flags for what the plan recomputes, or "" with *note saying what they
// cannot carry: Megatron recomputes every microbatch of every stage alike ("full", method
// "block": the first n layers of each virtual stage), optpipe chooses per stage and microbatch.
// (A problem whose stages recompute layers has no items behind it: need_items refuses it.)
std::string megatron_recompute(const Problem& p, const Schedule& s, std::string* note) {
  int recomputes = 0, offloads = 0;
  for (const DeviceSchedule& ds : s.devices) {
    for (const Op& op : ds.compute) recomputes += op.kind == OpKind::kR;
    offloads += static_cast<int>(ds.offloads.size());
  }
  if (offloads > 0)
    *note = std::to_string(offloads) + " activation offloads (Megatron's flags have no per-microbatch offload)";
  const int forwards = p.num_stages() * p.num_microbatches;
  if (recomputes == forwards) {  // each stage forward recomputed once: all of them, whole
    int most = 0;
    for (int k : transformer_layers_per_stage(p)) most = std::max(most, k);
    return " --recompute-granularity full --recompute-method block --recompute-num-layers " + std::to_string(most);
  }
  if (recomputes > 0)
    *note += std::string(note->empty() ? "" : "; ") + std::to_string(recomputes) + " of " + std::to_string(forwards) +
             " stage forwards recomputed (Megatron recomputes all microbatches of a stage alike)";
  return "";
}

// Megatron's interleaved schedule runs microbatches in groups of --microbatch-group-size-per-vp-stage
// (default: the pipeline size); it requires a group size from pp to M whose remainder M mod N is 0
// or at least pp (megatron/core/pipeline_parallel/schedules.py). 0: the default is fine; -1: none.
int megatron_group_size(int pp, int num_microbatches) {
  if (num_microbatches < pp) return -1;
  for (int n = pp; n <= num_microbatches; n++) {
    const int rest = num_microbatches % n;
    if (rest == 0 || rest >= pp) return n == pp ? 0 : n;
  }
  return -1;
}

}  // namespace

Result<std::string> megatron_flags(const Problem& p, const Schedule& s, const PlannedFor* planned_for) {
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
  const int S = p.num_stages(), D = p.num_devices, M = p.num_microbatches;
  const int group = p.chunks_per_device > 1 ? megatron_group_size(D, M) : 0;
  if (group < 0)
    return R::Error(Status::Invalid(
        "Megatron-LM's interleaved schedule needs at least as many microbatches as "
        "pipeline ranks; this plan has " +
        std::to_string(M) + " on " + std::to_string(D) + ": plan with more --microbatches, or --chunks 1"));
  const std::vector<int> layers = transformer_layers_per_stage(p);
  std::vector<std::string> stages;
  int total = 0;
  for (int st = 0; st < S; st++) {
    std::string stage = st == 0 ? "E" : "";
    stage += layers_token(layers[st]);
    if (st == S - 1) stage += 'L';
    stages.push_back(std::move(stage));
    total += layers[st];
  }
  // Runs of equal stages as "(x|)*n", then the next stage after a cosmetic comma.
  std::string layout;
  for (int st = 0; st < S;) {
    int n = 1;
    while (st + n < S && stages[st + n] == stages[st]) n++;
    if (n >= 2) {
      layout += "(" + stages[st] + "|)*" + std::to_string(n) + (st + n < S ? "," : "");
    } else {
      layout += stages[st] + (st + 1 < S ? "|" : "");
    }
    st += n;
  }
  if (!layout.empty() && layout.back() == ',') layout.pop_back();
  if (planned_for && planned_for->model.num_layers != total)
    return R::Error(Status::Invalid("the plan's model has " + std::to_string(planned_for->model.num_layers) +
                                    " layers but its problem's stages hold " + std::to_string(total)));

  std::string flags = "--pipeline-model-parallel-size " + std::to_string(D) + " --num-layers " + std::to_string(total) +
                      " --pipeline-model-parallel-layout \"" + layout + "\"";
  if (group > 0) flags += " --microbatch-group-size-per-vp-stage " + std::to_string(group);
  std::string not_carried =
      "the order (Megatron runs its own " + std::string(p.chunks_per_device > 1 ? "interleaved 1F1B" : "1F1B") + ")";
  std::string recompute_note;
  flags += megatron_recompute(p, s, &recompute_note);
  if (!recompute_note.empty()) not_carried += ", " + recompute_note;
  if (planned_for) {
    const PlannedFor& pf = *planned_for;
    const ModelSpec& m = pf.model;
    flags += " --tensor-model-parallel-size " + std::to_string(pf.spec.tp);
    if (pf.spec.tp > 1 && pf.spec.sequence_parallel) flags += " --sequence-parallel";
    if (pf.spec.cp > 1) flags += " --context-parallel-size " + std::to_string(pf.spec.cp);
    if (pf.spec.tp_comm_overlap && pf.spec.tp > 1 && pf.spec.sequence_parallel) flags += " --tp-comm-overlap";
    if (pf.spec.dp > 1 && pf.spec.distributed_optimizer) flags += " --use-distributed-optimizer";
    flags += " --micro-batch-size " + std::to_string(pf.spec.microbatch_size) + " --global-batch-size " +
             std::to_string(pf.global_batch);
    flags += " --hidden-size " + std::to_string(m.hidden) + " --ffn-hidden-size " + std::to_string(m.ffn) +
             " --num-attention-heads " + std::to_string(m.heads);
    if (m.head_dim > 0) flags += " --kv-channels " + std::to_string(m.head_dim);  // Megatron's head width
    if (m.kv_heads != m.heads) flags += " --group-query-attention --num-query-groups " + std::to_string(m.kv_heads);
    flags += " --seq-length " + std::to_string(m.seq_len) + " --max-position-embeddings " + std::to_string(m.seq_len);
    if (m.mlp == Mlp::kSwiGlu) flags += " --swiglu";
    if (m.bytes_per_value == 2) flags += " --bf16";
    // FP8 as planned: Transformer Engine's GEMMs, current (tensor-wise) scaling; the weights held
    // in FP8 alone where the distributed optimizer keeps the master copy.
    if (pf.spec.precision == Precision::kFp8) {
      flags += " --fp8-format hybrid --fp8-recipe tensorwise";
      if (pf.spec.dp * pf.spec.cp > 1 && pf.spec.distributed_optimizer) flags += " --fp8-param-gather";
    }
  }
  std::string out = "# optpipe plan for Megatron-LM: layout, partition";
  out += planned_for ? ", parallel sizes, batch and the model's shape" : "";
  out += ". Not carried: " + not_carried + ".\n";
  if (planned_for)
    out += "# Launch on tp × cp × pp × dp = " + std::to_string(planned_for->spec.tp) + " × " +
           std::to_string(planned_for->spec.cp) + " × " + std::to_string(D) + " × " +
           std::to_string(planned_for->spec.dp) + " = " +
           std::to_string(planned_for->spec.tp * planned_for->spec.cp * D * planned_for->spec.dp) +
           " GPUs (Megatron derives the data-parallel size from the world size); the architecture flags optpipe does "
           "not model (normalization, position embedding, biases, tokenizer) are the model's own.\n";
  else
    out +=
        "# The parallel sizes, batch and model flags come with a plan file from optpipe plan (this problem has no "
        "model behind it).\n";
  out += flags + "\n";
  // Without virtual stages, the first/last-stage flags say the same when the middle stages are even.
  bool even_middle = S >= 3;
  for (int st = 2; st + 1 < S; st++) even_middle = even_middle && layers[st] == layers[1];
  if (p.chunks_per_device == 1 && even_middle && layers[0] > 0 && layers[S - 1] > 0)
    out += "# or, for the layout flag: --decoder-first-pipeline-num-layers " + std::to_string(layers[0]) +
           " --decoder-last-pipeline-num-layers " + std::to_string(layers[S - 1]) + "\n";
  return R::Of(std::move(out));
}

namespace {

// Ok when torchtitan can take the plan: the model's items behind the stages, a stage-to-rank
// style for the placement (it follows the schedule's name even when a CSV gives the order; a
// wave of more than 2 chunks has none), and a pipeline to run them on (more than one device).
Status torchtitan_can_place(const Problem& p) {
  if (Status st = need_items(p, "torchtitan"); !st.ok()) return st;
  if ((p.placement == Placement::kVShape || p.placement == Placement::kWave) && p.chunks_per_device != 2)
    return Status::Invalid(
        "torchtitan places stages looped or in a V of exactly 2 stages a rank (stage_ids_this_rank's \"loop\" and "
        "\"v\" styles); a wave of " +
        std::to_string(p.chunks_per_device) + " chunks cannot be expressed: plan with --placement interleaved");
  if (p.num_devices == 1 && p.chunks_per_device > 1)
    return Status::Invalid(
        "torchtitan pipelines only at pipeline_parallel_degree above 1 (ParallelDims.pp_enabled); "
        "this plan puts " +
        std::to_string(p.chunks_per_device) + " chunks on its single device: plan with --chunks 1 for torchtitan");
  return Status::Ok();
}

const char* torchtitan_schedule(const Problem& p) {
  return p.placement == Placement::kVShape || p.placement == Placement::kWave ? "ZBVZeroBubble"
         : p.chunks_per_device > 1                                            ? "Interleaved1F1B"
                                                                              : "1F1B";
}

// module_fqns_per_model_part: each stage's modules in global stage order, Llama's names, the head
// named `head` ("output" in torchtitan 0.2, "lm_head" in 0.3); `indent` before each stage's list,
// `close` before the closing bracket.
std::string torchtitan_parts(const Problem& p, const char* head, const char* indent, const char* close) {
  const std::vector<int> layers = transformer_layers_per_stage(p);
  const int S = p.num_stages();
  std::string parts = "[\n";
  for (int st = 0, next = 0; st < S; st++) {
    std::string names;
    if (st == 0) names += "\"tok_embeddings\"";
    for (int k = 0; k < layers[st]; k++)
      names += (names.empty() ? "\"layers." : ", \"layers.") + std::to_string(next++) + "\"";
    if (st == S - 1) names += std::string(names.empty() ? "" : ", ") + "\"norm\", \"" + head + "\"";
    parts += std::string(indent) + "[" + names + "]" + (st + 1 < S ? "," : "") + "\n";
  }
  return parts + close + "]";
}

}  // namespace

namespace {

// One torchtitan setting: in [training] or [parallelism], its value as a literal.
struct TitanSetting {
  bool training;
  std::string key, value;
};

// The settings both torchtitan forms carry, in order; `python` picks the literals (True/False)
// and the head's name and indentation of module_fqns_per_model_part (0.3: lm_head).
std::vector<TitanSetting> torchtitan_settings(const Problem& p, const std::string& csv_path,
                                              const PlannedFor* planned_for, bool python) {
  auto flag = [&](bool on) { return std::string(on ? (python ? "True" : "true") : (python ? "False" : "false")); };
  std::vector<TitanSetting> out;
  if (planned_for) {
    // torchtitan runs local_batch_size // pipeline_parallel_microbatch_size microbatches.
    const PlannedFor& pf = *planned_for;
    out.push_back(
        {true, "local_batch_size", std::to_string(int64_t{pf.spec.num_microbatches} * pf.spec.microbatch_size)});
    out.push_back({true, "global_batch_size", std::to_string(pf.global_batch)});
    out.push_back({true, "seq_len", std::to_string(pf.model.seq_len)});
  }
  out.push_back({false, "pipeline_parallel_degree", std::to_string(p.num_devices)});
  if (planned_for) {
    const PlannedFor& pf = *planned_for;
    out.push_back({false, "pipeline_parallel_microbatch_size", std::to_string(pf.spec.microbatch_size)});
    out.push_back({false, "tensor_parallel_degree", std::to_string(pf.spec.tp)});
    out.push_back({false, "context_parallel_degree", std::to_string(pf.spec.cp)});
    out.push_back({false, "enable_sequence_parallel", flag(pf.spec.sequence_parallel)});
    // torchtitan has no ZeRO-1: FSDP shards weights and gradients too (less memory than planned),
    // plain data parallelism replicates them.
    out.push_back(
        {false, "data_parallel_shard_degree", std::to_string(pf.spec.distributed_optimizer ? pf.spec.dp : 1)});
    out.push_back(
        {false, "data_parallel_replicate_degree", std::to_string(pf.spec.distributed_optimizer ? 1 : pf.spec.dp)});
  }
  out.push_back({false, "pipeline_parallel_schedule", std::string("\"") + torchtitan_schedule(p) + "\""});
  out.push_back({false, "pipeline_parallel_schedule_csv", "\"" + csv_path + "\""});
  out.push_back(
      {false, "module_fqns_per_model_part",
       python ? torchtitan_parts(p, "lm_head", "        ", "    ") : torchtitan_parts(p, "output", "  ", "")});
  return out;
}

// What the plan asks that torchtitan's pipeline and parallelism settings cannot say, as a comment line.
std::string torchtitan_not_carried(const PlannedFor* planned_for) {
  if (!planned_for) return "";
  std::string what;
  if (planned_for->spec.precision == Precision::kFp8) what = "FP8 GEMMs (torchtitan's float8 model converter)";
  if (planned_for->spec.tp_comm_overlap)
    what += std::string(what.empty() ? "" : "; ") + "the TP overlap (torchtitan's async TP, under torch.compile)";
  return what.empty() ? "" : "# Planned but set apart: " + what + ".\n";
}

}  // namespace

Result<std::string> torchtitan_toml(const Problem& p, const std::string& csv_path, const PlannedFor* planned_for) {
  using R = Result<std::string>;
  if (Status st = torchtitan_can_place(p); !st.ok()) return R::Error(st);
  std::string out =
      "# optpipe plan for torchtitan 0.2 (its TOML config; Llama module names). The order is the CSV (optpipe "
      "export --format csv);\n# the stage-to-rank mapping follows pipeline_parallel_schedule even with a CSV. "
      "torchtitan 0.3 takes its configuration in Python: optpipe export --format torchtitan-py.\n";
  out += torchtitan_not_carried(planned_for);
  const std::vector<TitanSetting> settings = torchtitan_settings(p, csv_path, planned_for, /*python=*/false);
  for (bool training : {true, false}) {
    if (!training || planned_for) out += training ? "[training]\n" : "[parallelism]\n";
    for (const TitanSetting& t : settings)
      if (t.training == training) out += t.key + " = " + t.value + "\n";
  }
  return R::Of(std::move(out));
}

Result<std::string> torchtitan_config(const Problem& p, const std::string& csv_path, const PlannedFor* planned_for) {
  using R = Result<std::string>;
  if (Status st = torchtitan_can_place(p); !st.ok()) return R::Error(st);
  std::string out =
      "# optpipe plan for torchtitan 0.3 (configurations in Python: torchtitan/config/configs.py). Call it on your\n"
      "# Trainer.Config before training; the order is the CSV (optpipe export --format csv).\n" +
      torchtitan_not_carried(planned_for) +
      "\n\n"
      "def apply_optpipe_plan(config):\n"
      "    parallelism = config.parallelism\n";
  const std::vector<TitanSetting> settings = torchtitan_settings(p, csv_path, planned_for, /*python=*/true);
  for (bool training : {false, true})
    for (const TitanSetting& t : settings)
      if (t.training == training)
        out += std::string(training ? "    config.training." : "    parallelism.") + t.key + " = " + t.value + "\n";
  out += "    return config\n";
  return R::Of(std::move(out));
}

}  // namespace optpipe
