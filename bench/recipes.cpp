// Published recipes, read and predicted (recipes.h).
#include "recipes.h"

#include <algorithm>
#include <cmath>

#include "io/json_reader.h"
#include "optpipe/families.h"
#include "optpipe/files.h"
#include "optpipe/simulate.h"

namespace optpipe {

using json_read::json;
using json_read::Reader;

Result<std::vector<Recipe>> read_recipes(const std::string& path) {
  using R = Result<std::vector<Recipe>>;
  Result<std::string> text = read_text_file(path);
  if (!text.ok()) return R::Error(text.status);
  const json j = json::parse(text.value, nullptr, false);
  if (j.is_discarded()) return R::Error(Status::Invalid(path + ": not JSON"));
  Status err;
  Reader top(j, "", &err);
  const json* rows = top.array("recipes", true);
  std::string about;
  top.string("about", &about, false);
  top.finish();
  std::vector<Recipe> out;
  for (size_t i = 0; rows && err.ok() && i < rows->size(); i++) {
    Recipe r;
    Reader e((*rows)[i], "recipes[" + std::to_string(i) + "]", &err);
    std::string precision = "bf16", partition = "even";
    e.string("name", &r.name, true);
    e.string("source", &r.source, true);
    e.string("model", &r.model, true);
    e.string("gpu", &r.gpu, true);
    e.integer("num_gpus", &r.num_gpus, true);
    e.string("precision", &precision, true);
    e.string("precision_as_published", &r.precision_as_published, true);
    e.integer("global_batch", &r.global_batch, true);
    e.integer("microbatch_size", &r.microbatch_size, true);
    e.integer("seq_len", &r.seq_len, true);
    e.integer("tp", &r.tp, true);
    e.integer("pp", &r.pp, true);
    e.integer("cp", &r.cp, true);
    e.integer("vp", &r.vp, true);
    e.string("partition", &partition, false);
    e.boolean("tp_comm_overlap", &r.tp_comm_overlap, true);
    e.number("tokens_per_s_per_gpu", &r.tokens_per_s_per_gpu, true);
    e.number("model_tflops_per_gpu", &r.model_tflops_per_gpu, true);
    e.boolean("held_out", &r.held_out, true);
    e.finish();
    if (!err.ok()) break;
    Result<Precision> p = parse_precision(precision);
    if (!p.ok()) return R::Error(Status::Invalid(path + ": " + r.name + ": " + p.status.message));
    r.precision = p.value;
    if (partition != "even" && partition != "even-accounted")
      return R::Error(Status::Invalid(path + ": " + r.name + ": partition is even or even-accounted"));
    r.partition = partition == "even" ? PartitionRule::kEven : PartitionRule::kEvenAccounted;
    out.push_back(std::move(r));
  }
  if (!err.ok()) return R::Error(Status::Invalid(path + ": " + err.message));
  return R::Of(std::move(out));
}

Result<RecipePrediction> predict_recipe(const Recipe& r, double utilization) {
  using R = Result<RecipePrediction>;
  RecipePrediction out;
  Result<ModelSpec> model = find_model(r.model);
  Result<ClusterSpec> cluster = find_cluster(std::to_string(r.num_gpus) + "x" + r.gpu);
  if (!model.ok()) return R::Error(model.status);
  if (!cluster.ok()) return R::Error(cluster.status);
  out.model = model.value;
  out.model.seq_len = r.seq_len;
  out.cluster = cluster.value;
  out.cluster.utilization = utilization;
  const int64_t model_gpus = int64_t{r.tp} * r.cp * r.pp;
  if (model_gpus < 1 || r.num_gpus % model_gpus != 0)
    return R::Error(Status::Invalid(r.name + ": tp × cp × pp does not divide the GPUs"));
  const int dp = static_cast<int>(r.num_gpus / model_gpus);
  if (r.global_batch % (int64_t{dp} * r.microbatch_size) != 0)
    return R::Error(Status::Invalid(r.name + ": the global batch is not a multiple of dp × microbatch size"));
  out.spec = {.num_microbatches = static_cast<int>(r.global_batch / (int64_t{dp} * r.microbatch_size)),
              .microbatch_size = r.microbatch_size,
              .mem_budget_bytes = int64_t{1} << 50,  // predicted whatever it needs; `fits` says if it does
              .partition = r.partition,
              .tp = r.tp,
              .dp = dp,
              .cp = r.cp,
              .precision = r.precision,
              .tp_comm_overlap = r.tp_comm_overlap};
  Result<Problem> p = build_problem(out.model, out.cluster, out.spec);
  if (!p.ok()) return R::Error(Status::Invalid(r.name + ": " + p.status.message));
  const Family& family = *find_family(r.vp > 1 ? "interleaved-1f1b" : "1f1b");
  Result<FamilySchedule> fs = build_family(family, p.value, r.vp > 1 ? r.vp : 0);
  if (!fs.ok()) return R::Error(Status::Invalid(r.name + ": " + fs.status.message));
  SimResult sim = simulate(fs.value.problem, fs.value.schedule, {.op_times = false, .any_timing = false});
  if (!sim.ok()) return R::Error(Status::Internal(r.name + ": the family's schedule does not simulate"));
  out.figures = iteration_figures(out.model, out.cluster, out.spec, r.global_batch, sim.timeline.makespan_us);
  out.peak_bytes = max_peak(sim.timeline);
  out.fits = out.peak_bytes <= out.cluster.hbm_bytes / 10 * 9;
  return R::Of(std::move(out));
}

double calibrate_utilization(const std::vector<Recipe>& recipes) {
  double best_u = 0, best_error = INFINITY;
  for (int k = 0; k <= 150; k++) {
    const double u = 0.20 + 0.005 * k;
    double error = 0;
    int n = 0;
    for (const Recipe& r : recipes) {
      if (r.held_out) continue;
      Result<RecipePrediction> p = predict_recipe(r, u);
      if (!p.ok()) continue;
      error += std::abs(std::log(p.value.figures.tokens_per_s_per_gpu / r.tokens_per_s_per_gpu));
      n++;
    }
    if (n > 0 && error / n < best_error) {
      best_error = error / n;
      best_u = u;
    }
  }
  return best_u;
}

}  // namespace optpipe
