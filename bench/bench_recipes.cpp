// bench_recipes: NVIDIA's published Megatron-Bridge recipes (bench/recipes.json) predicted by
// optpipe's cost model as Megatron runs them, then beaten by optpipe's own plan on the same GPUs and
// global batch.
//
//   build/bench_recipes --recipes bench/recipes.json [--search-time 30]
//
// 1. One utilization constant is fitted on the recipes not held out (calibrate_utilization) and
//    every recipe is predicted with it: tokens/s/GPU and model TFLOP/s/GPU against the published.
// 2. With --search-time: on each recipe's own layout the optimizer's schedule (order, partition,
//    chunks, offload, recompute within 90% of the GPU's memory), then `plan --search`'s layout
//    search over every layout of the GPUs for the batch: the gain over the recipe split into what
//    the schedule brings on the recipe's layout and what the layout brings on top.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>

#include "optpipe/layouts.h"
#include "optpipe/optimize.h"
#include "optpipe/simulate.h"
#include "recipes.h"

using namespace optpipe;

namespace {

std::string layout_of(const Recipe& r, int dp) {
  return fmt::format("tp{} pp{} cp{} vp{} dp{}", r.tp, r.pp, r.cp, r.vp, dp);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"published recipes: predicted, then beaten"};
  std::string path = "bench/recipes.json";
  double search_time_s = 0;
  double utilization = 0;
  app.add_option("--recipes", path, "the recipes file");
  app.add_option("--search-time", search_time_s, "seconds of layout search per recipe (0: predict only)");
  app.add_option("--utilization", utilization, "predict at this utilization instead of calibrating");
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a row at a time: the search takes minutes
  Result<std::vector<Recipe>> recipes = read_recipes(path);
  if (!recipes.ok()) {
    std::fprintf(stderr, "bench_recipes: %s\n", recipes.status.message.c_str());
    return 1;
  }
  if (!(utilization > 0)) utilization = calibrate_utilization(recipes.value);
  std::printf("utilization %.3f of each precision's peak (%s)\n\n", utilization,
              app.get_option("--utilization")->count() > 0 ? "given" : "fitted on the recipes not held out");
  std::printf("%-20s %5s %-24s %-7s %9s %9s %7s %8s %8s %9s %5s  %s\n", "recipe", "GPUs", "layout", "prec", "pub tok/s",
              "pred", "ratio", "pub TF/s", "pred", "peak GiB", "fits", "role");
  double held_log = 0, cal_log = 0, held_max = 0;
  int held = 0, cal = 0, within = 0;
  std::vector<RecipePrediction> predicted;
  for (const Recipe& r : recipes.value) {
    Result<RecipePrediction> p = predict_recipe(r, utilization);
    if (!p.ok()) {
      std::printf("%-20s refused: %s\n", r.name.c_str(), p.status.message.c_str());
      predicted.push_back({});
      continue;
    }
    const IterationFigures& f = p.value.figures;
    const double ratio = f.tokens_per_s_per_gpu / r.tokens_per_s_per_gpu;
    std::printf("%-20s %5d %-24s %-7s %9.0f %9.0f %7.3f %8.0f %8.0f %9.1f %5s  %s\n", r.name.c_str(), r.num_gpus,
                layout_of(r, p.value.spec.dp).c_str(), r.precision_as_published.c_str(), r.tokens_per_s_per_gpu,
                f.tokens_per_s_per_gpu, ratio, r.model_tflops_per_gpu, f.model_tflops_per_gpu,
                p.value.peak_bytes / double(int64_t{1} << 30), p.value.fits ? "yes" : "no",
                r.held_out ? "held out" : "calibration");
    (r.held_out ? held_log : cal_log) += std::abs(std::log(ratio));
    (r.held_out ? held : cal)++;
    if (r.held_out) {
      held_max = std::max(held_max, std::abs(ratio - 1));
      within += std::abs(ratio - 1) <= 0.15;
    }
    predicted.push_back(std::move(p.value));
  }
  std::printf(
      "\ncalibration rows: %d, mean |log ratio| %.3f; held out: %d, mean |log ratio| %.3f, largest error %.1f%%, "
      "%d of %d within ±15%%\n",
      cal, cal > 0 ? cal_log / cal : 0, held, held > 0 ? held_log / held : 0, 100 * held_max, within, held);
  if (!(search_time_s > 0)) return 0;

  std::printf("\n%-20s %12s %12s %12s %8s %8s %8s  %s\n", "recipe", "recipe iter", "same layout", "searched",
              "schedule", "layout", "total", "optpipe's layout and schedule");
  for (size_t i = 0; i < recipes.value.size(); i++) {
    const Recipe& r = recipes.value[i];
    const RecipePrediction& p = predicted[i];
    if (p.model.num_layers == 0) continue;
    // The recipe's layout, the optimizer's schedule, within optpipe's default budget.
    PlanSpec own = p.spec;
    own.mem_budget_bytes = 0;
    Result<Problem> problem = build_problem(p.model, p.cluster, own);
    double same_layout_us = NAN;
    if (problem.ok()) {
      OptimizeResult o = optimize(problem.value, {.time_limit_s = search_time_s / 3, .seed = 1});
      if (o.status.ok() && o.outcome != Outcome::kInfeasible)
        same_layout_us =
            iteration_figures(p.model, p.cluster, own, r.global_batch, o.timeline.makespan_us).iteration_us;
    }
    LayoutSearchOptions lo{.global_batch = r.global_batch,
                           .time_limit_s = search_time_s,
                           .max_microbatch_size = 4,
                           .seed = 1,
                           .precision = r.precision,
                           .tp_comm_overlap = true};
    Result<LayoutSearch> ls = search_layouts(p.model, p.cluster, lo);
    const LayoutRow* best = ls.ok() && !ls.value.rows.empty() && ls.value.rows[0].fits ? &ls.value.rows[0] : nullptr;
    const double recipe_us = p.figures.iteration_us;
    const double searched_us = best ? std::min(best->iteration_us, same_layout_us) : same_layout_us;
    const bool searched_wins = best && best->iteration_us <= same_layout_us;
    std::printf("%-20s %12s %12s %12s %8.3f %8.3f %8.3f  %s\n", r.name.c_str(),
                fmt::format("{:.0f} ms", recipe_us / 1e3).c_str(),
                std::isnan(same_layout_us) ? "none fits" : fmt::format("{:.0f} ms", same_layout_us / 1e3).c_str(),
                fmt::format("{:.0f} ms", searched_us / 1e3).c_str(), recipe_us / same_layout_us,
                same_layout_us / searched_us, recipe_us / searched_us,
                searched_wins
                    ? (best->label() + ", mbs " + std::to_string(best->microbatch_size) + ", " + best->schedule).c_str()
                    : "the recipe's layout, the optimizer's schedule");
  }
  return 0;
}
