// Practitioner baselines (families.h, Tuning): Megatron's selective recompute as a per-stage share
// of layers in the model, and PipeOffload's offload ratio, each the least that fits.
#include <gtest/gtest.h>

#include "optpipe/cost_model.h"
#include "optpipe/families.h"
#include "optpipe/json_io.h"
#include "optpipe/optimize.h"
#include "optpipe/passes.h"
#include "optpipe/schedule_rules.h"
#include "optpipe/space.h"

using namespace optpipe;

namespace {

StageSpec five_layers() {
  StageSpec g;
  g.t_f_us = 100;
  g.t_b_us = 150;
  g.t_w_us = 80;
  g.t_r_us = 110;
  g.act_f_bytes = 5000;
  g.act_w_bytes = -2000;
  g.act_b_bytes = -3000;
  g.act_input_bytes = 100;
  g.ws_b_bytes = 50;
  g.num_layers = 5;
  return g;
}

// llama2-13b on 8 A100s at 36 GiB: no published family but full recompute fits.
Problem tight_plan() {
  Result<Problem> p = build_problem(find_model("llama2-13b").value, find_cluster("8xa100-40gb").value,
                                    {.num_microbatches = 16, .mem_budget_bytes = 36ll << 30});
  EXPECT_TRUE(p.ok()) << p.status.message;
  return p.value;
}

const FamilyRun* find_run(const std::vector<FamilyRun>& runs, const char* family, Tuning tuning) {
  for (const FamilyRun& r : runs)
    if (r.family->name == std::string(family) && r.tuning == tuning && r.status.ok()) return &r;
  return nullptr;
}

bool fits_with(const FamilyRun& run, const Problem& p) {
  SimResult sim = simulate(p, run.built.schedule, {.op_times = false, .any_timing = false});
  EXPECT_TRUE(sim.ok()) << sim.status.message;
  return fits_budget(p, sim.timeline);
}

}  // namespace

TEST(RecomputeLayers, ShareScalesKeptBytesAndBackwardTime) {
  Problem p = make_uniform_problem({.num_devices = 2});
  p.stages.assign(2, five_layers());
  Result<Problem> q = with_recompute_layers(p, {3, 0}, /*weights_in_b=*/true);
  ASSERT_TRUE(q.ok()) << q.status.message;
  const StageSpec& g = q.value.stages[0];
  EXPECT_EQ(g.recompute_layers, 3);
  EXPECT_EQ(g.act_f_bytes, 5000 - 3000 + 3 * 100);  // 3 of 5 layers dropped, their 3 inputs kept
  EXPECT_EQ(g.act_w_bytes, -800);                   // W holds the 2 layers it still computes
  EXPECT_EQ(g.act_f_bytes + g.act_b_bytes + g.act_w_bytes, 0);
  EXPECT_DOUBLE_EQ(g.t_b_us, 150 + 0.6 * (110 + 80));  // B reruns 3/5 of the forward, and their W
  EXPECT_DOUBLE_EQ(g.t_w_us, 0.4 * 80);
  EXPECT_EQ(g.ws_b_bytes, 50 + 1000);  // one layer's activation while it reruns
  EXPECT_DOUBLE_EQ(g.t_f_us, 100);
  EXPECT_EQ(q.value.stages[1].act_f_bytes, 5000);

  // Every layer recomputed: the inputs alone are kept, and W has nothing left.
  Result<Problem> all = with_recompute_layers(p, {5, 5}, true);
  ASSERT_TRUE(all.ok()) << all.status.message;
  EXPECT_EQ(all.value.stages[0].act_f_bytes, 500);
  EXPECT_EQ(all.value.stages[0].act_w_bytes, 0);
  EXPECT_DOUBLE_EQ(all.value.stages[0].t_w_us, 0);

  // W left where it was: it holds its inputs from B on, so B now allocates them.
  Result<Problem> held = with_recompute_layers(p, {5, 5});
  ASSERT_TRUE(held.ok()) << held.status.message;
  EXPECT_EQ(held.value.stages[0].act_w_bytes, -2000);
  EXPECT_EQ(held.value.stages[0].act_b_bytes, 1500);
  EXPECT_DOUBLE_EQ(held.value.stages[0].t_w_us, 80);
  EXPECT_DOUBLE_EQ(held.value.stages[0].t_b_us, 150 + 110);
  p.stages[0].act_b_bytes = 1;
  p.stages[0].act_w_bytes = -5001;
  EXPECT_NE(check_problem(p).message.find("act_b_bytes"), std::string::npos);  // not without recompute
}

TEST(RecomputeLayers, BadCountsAndReconfiguringAreRefused) {
  Problem p = make_uniform_problem({.num_devices = 2});
  p.stages.assign(2, five_layers());
  EXPECT_NE(with_recompute_layers(p, {6, 0}).status.message.find("not in 0..5"), std::string::npos);
  EXPECT_FALSE(with_recompute_layers(p, {1}).ok());
  Result<Problem> q = with_recompute_layers(p, {1, 2});
  ASSERT_TRUE(q.ok());
  EXPECT_NE(with_recompute_layers(q.value, {1, 2}).status.message.find("recompute_layers"), std::string::npos);
  EXPECT_FALSE(rechunk(q.value, Placement::kVShape, 2).ok());
  EXPECT_NE(optimize(q.value, {}).status.message.find("stages[0].recompute_layers"), std::string::npos);
  const ScheduleRules no_recompute{.recompute = false};
  Result<FamilySchedule> fs = build_family(*find_family("1f1b"), p);
  ASSERT_TRUE(fs.ok());
  EXPECT_FALSE(check_rules(no_recompute, q.value, fs.value.schedule).ok());
  EXPECT_TRUE(check_rules(no_recompute, p, fs.value.schedule).ok());

  // The configuration survives a JSON round trip.
  Result<Problem> back = problem_from_json(problem_to_json(q.value));
  ASSERT_TRUE(back.ok()) << back.status.message;
  EXPECT_EQ(back.value.stages[1].recompute_layers, 2);
  EXPECT_EQ(back.value.stages[1].num_layers, 5);
  EXPECT_EQ(back.value.stages[1].act_f_bytes, q.value.stages[1].act_f_bytes);
}

TEST(RecomputeLayers, RechunkSharesLayersOut) {
  Problem p = make_uniform_problem({.num_devices = 2});
  p.stages.assign(2, five_layers());
  Result<Problem> v = rechunk(p, Placement::kVShape, 2);
  ASSERT_TRUE(v.ok());
  for (const StageSpec& g : v.value.stages) EXPECT_EQ(g.num_layers, 3);  // 5 / 2, rounded
  Result<Problem> back = rechunk(v.value, Placement::kLinear, 1);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back.value.stages[0].num_layers, 6);
}

TEST(Practitioner, LeastRecomputeFitsAndOneLayerLessDoesNot) {
  const Problem p = tight_plan();
  const std::vector<FamilyRun> runs = run_families(p, {.op_times = false});
  const FamilyRun* published = find_run(runs, "1f1b", Tuning::kAsPublished);
  const FamilyRun* tuned = find_run(runs, "1f1b", Tuning::kRecompute);
  ASSERT_TRUE(published && tuned);
  ASSERT_FALSE(published->fits);
  ASSERT_TRUE(tuned->fits);
  EXPECT_EQ(tuned->label.rfind("1f1b +recompute ", 0), 0u) << tuned->label;
  // Per stage, one layer fewer overflows (1F1B's peaks do not depend on the other stages' counts).
  std::vector<int> layers;
  for (const StageSpec& g : tuned->built.problem.stages) layers.push_back(g.recompute_layers);
  int lowered = 0;
  for (size_t s = 0; s < layers.size(); s++) {
    if (layers[s] == 0) continue;
    std::vector<int> fewer = layers;
    fewer[s]--;
    Result<Problem> q = with_recompute_layers(published->built.problem, fewer);
    ASSERT_TRUE(q.ok());
    EXPECT_FALSE(fits_with(*tuned, q.value)) << "stage " << s << " fits with " << fewer[s] << " layers";
    lowered++;
  }
  EXPECT_GT(lowered, 0);
  // Selective recompute beats recomputing every layer of every microbatch.
  const FamilyRun* full = find_run(runs, "1f1b-recompute", Tuning::kAsPublished);
  ASSERT_TRUE(full && full->fits);
  EXPECT_LT(tuned->timeline.makespan_us, full->timeline.makespan_us);
  // A split backward fits too, its rerun layers' weight gradients computed in B.
  const FamilyRun* zb_v = find_run(runs, "zb-v", Tuning::kRecompute);
  ASSERT_TRUE(zb_v && zb_v->fits);
  EXPECT_NE(zb_v->label.find(", W in B"), std::string::npos) << zb_v->label;
  // Under --no-recompute it is ruled out.
  std::vector<FamilyRun> ruled = run_families(p, {.op_times = false});
  rule_out({.recompute = false}, placement_space(p, {}), &ruled);
  EXPECT_EQ(find_run(ruled, "1f1b", Tuning::kRecompute), nullptr);
}

TEST(Practitioner, SmallestOffloadRatioFits) {
  // At 36 GiB on A100-40GB no ratio fits any family (a V-shape's device 0 holds the embedding and
  // the LM head); at 44 GiB on A100-80GB four families fit with offloads.
  Result<Problem> plan = build_problem(find_model("llama2-13b").value, find_cluster("8xa100-80gb").value,
                                       {.num_microbatches = 16, .mem_budget_bytes = 44ll << 30});
  ASSERT_TRUE(plan.ok()) << plan.status.message;
  const Problem& p = plan.value;
  const std::vector<FamilyRun> runs = run_families(p, {.op_times = false});
  int found = 0;
  for (const FamilyRun& run : runs) {
    if (run.tuning != Tuning::kOffload) continue;
    found++;
    EXPECT_TRUE(run.fits) << run.label;
    EXPECT_TRUE(run.fits_any_timing) << run.label;  // gated as PipeOffload's runtime waits on copies
    const FamilyRun* published = find_run(runs, run.family->name, Tuning::kAsPublished);
    ASSERT_TRUE(published);
    if (run.offload_fraction > 0.15) {
      Schedule less = add_offloads(published->built.problem, published->built.schedule, 2, run.offload_fraction - 0.1);
      SimResult sim = simulate(published->built.problem, less, {.op_times = false, .any_timing = false});
      ASSERT_TRUE(sim.ok());
      EXPECT_FALSE(fits_budget(published->built.problem, sim.timeline)) << run.label << " fits with a tenth less";
    }
  }
  EXPECT_GE(found, 3);
}

// On the families' own chunk counts (at more interleaved chunks, pipeoffload fits as published).
TEST(Practitioner, OptimizerReportsBothBaselines) {
  OptimizeOptions o;
  o.time_limit_s = 600;
  o.max_evaluations = 1500;
  o.rules.chunk_counts = {1, 2};
  OptimizeResult r = optimize(tight_plan(), o);
  ASSERT_TRUE(r.status.ok()) << r.status.message;
  EXPECT_EQ(r.stats.best_published_family.label, "1f1b-recompute");
  EXPECT_NE(r.stats.best_family.label.find(" +"), std::string::npos) << r.stats.best_family.label;
  EXPECT_LT(r.stats.best_family.makespan_us, r.stats.best_published_family.makespan_us);
  EXPECT_LE(r.timeline.makespan_us, r.stats.best_family.makespan_us + 1e-6);
}
