// optpipe-runtime run: refuse a schedule that cannot run, start one process per device (or be
// one of them), and set what the ranks measured beside the simulator's prediction.
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../app/inputs.h"
#include "../app/tables.h"
#include "engine.h"
#include "launch.h"
#include "optpipe/export.h"
#include "optpipe/files.h"
#include "optpipe/json_io.h"
#include "optpipe/results_json.h"
#include "optpipe/validate.h"
#include "profile.h"
#include "records.h"
#include "runtime_cli.h"

namespace optpipe::runtime::cli {

namespace {

using json = nlohmann::json;

// "exit@1" / "stall@0": the fault a test asks this rank to suffer.
Status parse_fault(const std::string& text, std::string* kind, int* rank) {
  const size_t at = text.find('@');
  if (at == std::string::npos) return Status::Invalid("--inject-fault: expected exit@RANK or stall@RANK");
  *kind = text.substr(0, at);
  try {
    *rank = std::stoi(text.substr(at + 1));
  } catch (...) {
    return Status::Invalid("--inject-fault: bad rank in \"" + text + "\"");
  }
  if (*kind != "exit" && *kind != "stall") return Status::Invalid("--inject-fault: kind must be exit or stall");
  return Status::Ok();
}

// On the rank --inject-fault names, the fault strikes before compute op --fault-after-ops of the
// first iteration, so that tests see how the other ranks end.
Status arm_fault(const RunArgs& a, int rank, EngineOptions* opt) {
  std::string kind;
  int fault_rank = -1;
  if (Status st = parse_fault(a.fault, &kind, &fault_rank); !st.ok()) return st;
  if (fault_rank != rank) return Status::Ok();
  opt->before_op = [kind, rank, after_ops = a.fault_after_ops](int iteration, int ops_done) {
    if (iteration != 0 || ops_done != after_ops) return;
    std::fprintf(stderr, "%s: rank %d: injected fault: %s\n", kTool, rank, kind.c_str());
    if (kind == "exit") std::_Exit(kExitBadInput);
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  };
  return Status::Ok();
}

// What re-profiling measures for a run of problem `p`: its devices, microbatches and placement.
ProfileSpec profile_spec_of(const Problem& p, int repetitions) {
  return {p.num_devices, p.num_microbatches, p.placement, p.chunks_per_device, repetitions, 0};
}

[[noreturn]] void die(const Status& st) {
  std::fprintf(stderr, "%s: %s\n", kTool, st.message.c_str());
  std::fflush(stderr);
  std::_Exit(kExitBadInput);  // pending c10d work must not hold the process open
}

// One rank's work: run, then write the report where the launcher looks for it.
int rank_main(const RankEnv& env, const FamilySchedule& fs, const GptConfig& cfg, const RunArgs& a,
              const ModelArgs& model) {
  EngineOptions opt;
  opt.iterations = a.iterations;
  opt.lr = a.lr;
  opt.check = a.check;
  if (!a.fault.empty())
    if (Status st = arm_fault(a, env.rank, &opt); !st.ok()) return usage_error(st.message, kTool);
  Result<Group> group = join_group(model.rank_setup(env), a.timeout_s);
  if (!group.ok()) die(group.status);
  std::string profile_json;
  if (a.reprofile) {
    const Problem& p = fs.problem;
    Result<Problem> share = profile_rank(cfg, profile_spec_of(p, a.reprofile_repetitions), group.value);
    if (!share.ok()) die(share.status);
    profile_json = problem_to_json(share.value);
  }
  Result<RankReport> r = run_rank(fs.problem, fs.schedule, cfg, group.value, opt);
  if (!r.ok()) die(r.status);
  r.value.profile_json = profile_json;
  if (!env.run_dir.empty()) {
    Status st =
        write_text_file(env.run_dir + "/rank" + std::to_string(env.rank) + ".json", rank_report_to_json(r.value));
    if (!st.ok()) return fail(st, kTool);
  } else {
    for (size_t it = 0; it < r.value.iterations.size(); it++)
      std::printf("rank %d iteration %zu: loss %.6f, peak activations %s\n", env.rank, it, r.value.iterations[it].loss,
                  mib(r.value.iterations[it].peak_activation_bytes).c_str());
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(kExitOk);
}

// The simulator's timeline for `s` on the problem the ranks re-profiled (budgets and host
// links kept from `p`).
Result<Timeline> reprofiled_prediction(const Problem& p, const Schedule& s, const std::vector<RankReport>& reports,
                                       int repetitions) {
  using R = Result<Timeline>;
  std::vector<Problem> shares;
  for (const RankReport& r : reports) {
    Result<Problem> share = problem_from_json(r.profile_json);
    if (!share.ok()) return R::Error(Status::Invalid("a rank's profile: " + share.status.message));
    shares.push_back(std::move(share.value));
  }
  Result<Problem> fresh = merge_profiles(profile_spec_of(p, repetitions), shares);
  if (!fresh.ok()) return R::Error(fresh.status);
  for (int d = 0; d < p.num_devices; d++)
    fresh.value.devices[d] = {fresh.value.devices[d].static_bytes, p.devices[d].mem_budget_bytes,
                              p.devices[d].host_link};
  SimResult sim = simulate(fresh.value, s, {.op_times = true, .memory_curve = true});
  if (!sim.ok()) return R::Error(Status::Invalid("re-profiled problem: " + sim.status.message));
  return R::Of(std::move(sim.timeline));
}

// Every rank's comparison with the unpipelined reference, printed as one line and returned as
// JSON with "ok": loss and every gradient within 1e-5 relative on the CPU, 1e-4 on a GPU (fp32
// with TF32 off, but its reductions sum in another order than the reference's).
json check_summary(const std::vector<RankReport>& reports, FILE* out) {
  const double limit = reports[0].device == "cpu" ? 1e-5 : 1e-4;
  double worst = 0, loss_err = 0;
  std::string worst_param;
  int checked = 0;
  for (const RankReport& r : reports) {
    checked += r.check.num_params_checked;
    if (r.check.max_grad_rel_error >= worst) {
      worst = r.check.max_grad_rel_error;
      worst_param = r.check.worst_param;
    }
    loss_err = std::max(loss_err, std::abs(r.check.loss - r.check.reference_loss) / std::abs(r.check.reference_loss));
  }
  const bool ok = worst <= limit && loss_err <= limit && checked > 0;
  std::fprintf(out,
               "check against one process with autograd: loss %.8f vs %.8f (rel. error %.2e), gradients of %d tensors "
               "within %.2e relative (worst %s): %s\n",
               reports[0].check.loss, reports[0].check.reference_loss, loss_err, checked, worst, worst_param.c_str(),
               ok ? "OK" : fmt::format("FAILED (limit {:.0e})", limit).c_str());
  return {{"ok", ok},
          {"limit", limit},
          {"loss_rel_error", loss_err},
          {"max_grad_rel_error", worst},
          {"worst_param", worst_param},
          {"num_tensors", checked}};
}

// Every rank's report, or why the launch failed.
Result<std::vector<RankReport>> run_ranks(const std::vector<std::string>& argv, int world_size, double timeout_s) {
  using R = Result<std::vector<RankReport>>;
  Result<std::vector<std::string>> texts = launch_and_collect(argv, world_size, timeout_s);
  std::vector<RankReport> reports;
  for (int d = 0; d < world_size && texts.ok(); d++) {
    Result<RankReport> rep = rank_report_from_json(texts.value[d]);
    if (!rep.ok()) texts.status = rep.status;
    reports.push_back(std::move(rep.value));
  }
  if (!texts.ok()) return R::Error(texts.status);
  return R::Of(std::move(reports));
}

std::vector<int> layers_per_chunk(const GptConfig& cfg, const Problem& p) {
  std::vector<int> out;
  for (const ChunkLayout& c : chunk_layouts(cfg, p.num_stages())) out.push_back(c.num_layers);
  return out;
}

// The run's heading, its losses and the table of measured against predicted figures.
void print_comparison(FILE* out, const RunComparison& c, const Problem& p, const GptConfig& cfg, const RunArgs& a,
                      const ModelArgs& model, const std::string& what, double file_predicted_us) {
  const bool gpu = c.device != "cpu";
  const std::string where =
      gpu ? c.device + ", hops over " + c.hops
          : fmt::format("c10d gloo, CPU, {} thread{} each", model.threads, model.threads == 1 ? "" : "s");
  std::fprintf(out, "%s on %d ranks (%s): %d microbatches of %d × %d tokens, %d iterations\n", what.c_str(),
               p.num_devices, where.c_str(), p.num_microbatches, cfg.microbatch_size, cfg.model.seq_len, a.iterations);
  std::fprintf(out, "transformer layers per chunk: %s\n",
               fmt::format("{}", fmt::join(layers_per_chunk(cfg, p), ",")).c_str());
  std::string losses;
  for (double l : c.losses) losses += (losses.empty() ? "" : " → ") + fmt::format("{:.4f}", l);
  std::fprintf(out, "loss: %s\n", losses.c_str());
  std::vector<std::vector<std::string>> rows = {{"", "measured", "predicted", "measured/predicted"}};
  rows.push_back({"iteration time", ms(c.measured_us), ms(c.predicted_us), ratio(c.measured_us, c.predicted_us)});
  rows.push_back({"  replayed on the measured op times", ms(c.measured_us), ms(c.replayed_us),
                  ratio(c.measured_us, c.replayed_us)});
  for (int d = 0; d < p.num_devices; d++)
    rows.push_back({"device " + std::to_string(d) + " idle", ms(c.measured_idle_us[d]), ms(c.predicted_idle_us[d]),
                    ratio(c.measured_idle_us[d], c.predicted_idle_us[d])});
  for (int d = 0; d < p.num_devices; d++)
    rows.push_back(
        {"device " + std::to_string(d) + " peak activations", mib(c.measured_peak_bytes[d]),
         mib(c.predicted_peak_bytes[d]),
         ratio(static_cast<double>(c.measured_peak_bytes[d]), static_cast<double>(c.predicted_peak_bytes[d]))});
  // On a GPU: everything the allocator held against the predicted static + activation peak, and
  // what it reserved against the budget. On the CPU: how often the memory gate held (a GPU has
  // no host-side gate, only the schedule's event gates).
  for (int d = 0; d < p.num_devices && gpu; d++) {
    const double predicted = static_cast<double>(c.predicted_peak_bytes[d] + p.devices[d].static_bytes);
    rows.push_back({"device " + std::to_string(d) + " allocator peak", mib(c.allocator_peak_bytes[d]),
                    mib(static_cast<int64_t>(predicted)),
                    ratio(static_cast<double>(c.allocator_peak_bytes[d]), predicted)});
    rows.push_back({"device " + std::to_string(d) + " allocator reserved", mib(c.allocator_reserved_bytes[d]),
                    "budget " + mib(p.devices[d].mem_budget_bytes),
                    ratio(static_cast<double>(c.allocator_reserved_bytes[d]),
                          static_cast<double>(p.devices[d].mem_budget_bytes))});
  }
  for (int d = 0; d < p.num_devices && !gpu; d++)
    rows.push_back({"device " + std::to_string(d) + " memory gate held",
                    fmt::format("{} ({}×)", ms(c.gate_held_us[d]), c.gate_holds[d]), "0 under any timing", ""});
  std::fputs(aligned_table(rows).c_str(), out);
  std::fprintf(out,
               "(iteration %d of %d shown: the median after the first; peaks are the max over all iterations; the "
               "memory gate holds an allocation until frees make room, summed over all iterations)\n",
               c.shown_iteration + 1, a.iterations);
  if (a.reprofile)
    std::fprintf(out,
                 "predicted from the ranks' profile taken just before the run; from %s: %s (measured/predicted %s)\n",
                 a.problem_path.c_str(), ms(file_predicted_us).c_str(),
                 ratio(c.measured_us, file_predicted_us).c_str());
}

json run_json(const RunArgs& a, const std::string& what, const Problem& p, const RunComparison& c,
              double file_predicted_us) {
  return {{"schedule", what},
          {"device", c.device},
          {"hops", c.hops},
          {"num_devices", p.num_devices},
          {"iterations", a.iterations},
          {"iteration_us", c.iteration_us},
          {"losses", c.losses},
          {"shown_iteration", c.shown_iteration},
          {"measured_us", c.measured_us},
          {"predicted_us", c.predicted_us},
          {"replayed_us", c.replayed_us},
          {"reprofiled", a.reprofile},
          {"problem_file_predicted_us", file_predicted_us},
          {"measured_idle_us", c.measured_idle_us},
          {"predicted_idle_us", c.predicted_idle_us},
          {"measured_peak_activation_bytes", c.measured_peak_bytes},
          {"predicted_peak_activation_bytes", c.predicted_peak_bytes},
          {"allocator_peak_bytes", c.allocator_peak_bytes},
          {"allocator_reserved_bytes", c.allocator_reserved_bytes},
          {"gate_holds", c.gate_holds},
          {"gate_held_us", c.gate_held_us}};
}

// Runs the ranks, then the comparison with `predicted` (the problem file's timeline) and what
// the options ask for besides: the check, the trace, the JSON.
int launch_and_compare(const RunArgs& a, const ModelArgs& model, const FamilySchedule& fs, const GptConfig& cfg,
                       const std::string& what, Timeline predicted, const std::vector<std::string>& argv) {
  const Problem& p = fs.problem;
  Result<std::vector<RankReport>> reports = run_ranks(argv, p.num_devices, a.timeout_s);
  if (!reports.ok()) return fail(Status::Invalid("run failed: " + reports.status.message), kTool);

  // With --reprofile the prediction comes from what the ranks measured just before running.
  const double file_predicted_us = predicted.makespan_us;
  if (a.reprofile) {
    Result<Timeline> fresh = reprofiled_prediction(p, fs.schedule, reports.value, a.reprofile_repetitions);
    if (!fresh.ok()) return fail(fresh.status, kTool);
    predicted = std::move(fresh.value);
  }
  // The table goes to stderr when the JSON takes stdout.
  FILE* out = a.json_path == "-" ? stderr : stdout;
  RunComparison c = compare_run(p, fs.schedule, predicted, reports.value);
  print_comparison(out, c, p, cfg, a, model, what, file_predicted_us);

  int rc = kExitOk;
  json check_json;
  if (a.check) {
    check_json = check_summary(reports.value, out);
    if (!check_json["ok"].get<bool>()) rc = kExitBadInput;
  }
  if (!a.trace_path.empty()) {
    Status st = write_text_file(a.trace_path, chrome_trace_json(p, fs.schedule, c.measured));
    if (!st.ok()) return fail(st, kTool);
  }
  if (!a.json_path.empty()) {
    json j = run_json(a, what, p, c, file_predicted_us);
    j["layers_per_chunk"] = layers_per_chunk(cfg, p);
    if (a.check) j["check"] = check_json;
    Status st = emit(a.json_path, j.dump(2) + "\n");
    if (!st.ok()) return fail(st, kTool);
  }
  return rc;
}

}  // namespace

int cmd_run(const RunArgs& a, const ModelArgs& model, const std::vector<std::string>& argv) {
  if (a.schedule_path.empty() == a.family.empty())
    return usage_error("give either --schedule FILE or --family NAME", kTool);
  // A plan file holds its problem; a family is built on the profiled one.
  if (a.problem_path.empty() && !a.family.empty())
    return usage_error("run --family needs --problem (the one `optpipe profile` wrote for this model)", kTool);
  Result<FamilySchedule> fs = load_schedule(a.problem_path, a.schedule_path, a.family, a.chunks);
  if (!fs.ok()) return fail(fs.status, kTool);
  // The runtime recomputes whole stages for the microbatches a schedule's R ops name, not layers.
  if (Status st = check_no_recompute_layers(fs.value.problem); !st.ok())
    return fail(Status::Invalid(st.message + " (the runtime recomputes with R ops only)"), kTool);
  Result<GptConfig> cfg =
      model.config(fs.value.problem.num_microbatches, fs.value.problem.num_stages(), &fs.value.problem);
  if (!cfg.ok()) return fail(cfg.status, kTool);
  at::set_num_threads(model.threads);

  Result<RankEnv> env = rank_env();
  if (!env.ok()) return fail(env.status, kTool);
  if (env.value.present) return rank_main(env.value, fs.value, cfg.value, a, model);

  // Refused before any process starts: a schedule that does not validate or does not fit.
  const std::string what = a.family.empty() ? a.schedule_path : a.family;
  Validation v = validate(fs.value.problem, fs.value.schedule,
                          {.check_memory_budget = false, .sim = {.op_times = true, .memory_curve = true}});
  if (!v.ok()) return fail(Status::Invalid(what + " does not validate, nothing was started:\n" + v.summary()), kTool);
  if (!fits_budget(fs.value.problem, v.sim.timeline))
    return fail(Status::Infeasible(what + " does not fit the memory budget, nothing was started:\n" +
                                   validate(fs.value.problem, fs.value.schedule).summary()),
                kTool);
  if (!a.fault.empty()) {
    std::string kind;
    int rank = 0;
    if (Status st = parse_fault(a.fault, &kind, &rank); !st.ok()) return usage_error(st.message, kTool);
  }
  return launch_and_compare(a, model, fs.value, cfg.value, what, v.sim.timeline, argv);
}

}  // namespace optpipe::runtime::cli
