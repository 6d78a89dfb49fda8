// optpipe-runtime — the one program that links LibTorch; `optpipe run` and `optpipe profile`
// hand over to it. Exit codes as optpipe's: 0 ok, 1 bad input or a failed run/check, 2 usage,
// 3 a schedule over its budget, 70 internal error.
//
//   run      execute a schedule: one process per device on this machine (or, with RANK,
//            WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, this process is one rank, as under
//            torchrun), then measured figures beside the simulator's prediction
//   profile  measure the model on this machine and write the profile (and problem) JSON
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "../app/cli.h"
#include "../app/inputs.h"
#include "../app/report.h"
#include "engine.h"
#include "launch.h"
#include "optpipe/export.h"
#include "optpipe/figures.h"
#include "optpipe/json_io.h"
#include "optpipe/units.h"
#include "optpipe/validate.h"
#include "profile.h"

using namespace optpipe;
using namespace optpipe::runtime;
using json = nlohmann::json;

namespace {

constexpr const char* kTool = "optpipe-runtime";

struct ModelArgs {
  std::string preset = "gpt-tiny";
  int layers = 0, hidden = 0, ffn = 0, heads = 0, seq_len = 0, vocab = 0;
  int microbatch_size = 2;
  uint64_t seed = 0;
  int threads = 1;

  void add_to(CLI::App* c) {
    c->add_option("--model", preset, "model preset (a GPT one: gpt-tiny, gpt-7b, gpt-14b)")->capture_default_str();
    c->add_option("--layers", layers, "override the preset's number of layers");
    c->add_option("--hidden", hidden, "override the hidden width");
    c->add_option("--ffn", ffn, "override the MLP width");
    c->add_option("--heads", heads, "override the number of attention heads");
    c->add_option("--seq-len", seq_len, "override the sequence length");
    c->add_option("--vocab", vocab, "override the vocabulary size");
    c->add_option("--microbatch-size", microbatch_size, "sequences per microbatch")->capture_default_str();
    c->add_option("--seed", seed, "parameters and data")->capture_default_str();
    c->add_option("--threads", threads, "compute threads per rank")->capture_default_str()->check(CLI::Range(1, 256));
  }

  Result<GptConfig> config(int num_microbatches) const {
    Result<ModelSpec> m = find_model(preset);
    if (!m.ok()) return Result<GptConfig>::Error(m.status);
    ModelSpec spec = m.value;
    for (auto [value, field] : {std::pair{layers, &spec.num_layers}, {hidden, &spec.hidden}, {ffn, &spec.ffn},
                                {seq_len, &spec.seq_len}, {vocab, &spec.vocab}})
      if (value > 0) *field = value;
    if (heads > 0) spec.heads = spec.kv_heads = heads;
    return gpt_config(spec, microbatch_size, num_microbatches, seed);
  }
};

struct RunArgs {
  std::string problem_path, schedule_path, family, trace_path, json_path, fault;
  int chunks = 0, iterations = 3, fault_after_ops = 2, reprofile_repetitions = 3;
  double lr = 3e-3, timeout_s = 60;
  bool check = false, reprofile = false;
};

std::string ms(double us) { return fmt::format("{:.2f} ms", us / 1e3); }
std::string mib(int64_t bytes) { return fmt::format("{:.2f} MiB", bytes / 1048576.0); }
std::string ratio(double measured, double predicted) {
  return predicted > 0 ? fmt::format("{:.3f}", measured / predicted) : "-";
}

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

// Starts one process per rank with this command line and returns what each wrote to the run
// directory (index = rank).
Result<std::vector<std::string>> launch_and_collect(const std::vector<std::string>& argv, int world_size, double timeout_s) {
  using R = Result<std::vector<std::string>>;
  std::vector<std::string> ranks_argv = argv;
  ranks_argv.at(0) = executable_path();
  if (ranks_argv[0].empty()) return R::Error(Status::Invalid("cannot find this executable (/proc/self/exe)"));
  char tmpl[] = "/tmp/optpipe-run-XXXXXX";
  if (!mkdtemp(tmpl)) return R::Error(Status::Invalid("cannot create a run directory in /tmp"));
  const std::string run_dir = tmpl;
  Status st = launch_local({ranks_argv, world_size, run_dir, timeout_s + 5});
  std::vector<std::string> texts;
  for (int r = 0; r < world_size && st.ok(); r++) {
    Result<std::string> text = read_text_file(run_dir + "/rank" + std::to_string(r) + ".json");
    st = text.status;
    texts.push_back(std::move(text.value));
  }
  std::filesystem::remove_all(run_dir);
  if (!st.ok()) return R::Error(st);
  return R::Of(std::move(texts));
}

// What re-profiling measures for a run of problem `p`: its devices, microbatches and placement.
ProfileSpec profile_spec_of(const Problem& p, int repetitions) {
  return {p.num_devices, p.num_microbatches, p.placement, p.chunks_per_device, repetitions, 0};
}

// One rank's work: run, then write the report where the launcher looks for it.
int rank_main(const RankEnv& env, const FamilySchedule& fs, const GptConfig& cfg, const RunArgs& a) {
  EngineOptions opt;
  opt.iterations = a.iterations;
  opt.lr = a.lr;
  opt.check = a.check;
  std::string fault_kind;
  int fault_rank = -1;
  if (!a.fault.empty()) {
    if (Status st = parse_fault(a.fault, &fault_kind, &fault_rank); !st.ok()) return usage_error(st.message, kTool);
    if (fault_rank == env.rank)
      opt.before_op = [&](int iteration, int ops_done) {
        if (iteration != 0 || ops_done != a.fault_after_ops) return;
        std::fprintf(stderr, "%s: rank %d: injected fault: %s\n", kTool, env.rank, fault_kind.c_str());
        if (fault_kind == "exit") std::_Exit(kExitBadInput);
        for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
      };
  }
  auto die = [](const Status& st) {
    std::fprintf(stderr, "%s: %s\n", kTool, st.message.c_str());
    std::fflush(stderr);
    std::_Exit(kExitBadInput);  // pending c10d work must not hold the process open
  };
  Result<Group> group = join_group({env.rank, env.world_size, env.master_addr, env.master_port}, a.timeout_s);
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
    Status st = write_text_file(env.run_dir + "/rank" + std::to_string(env.rank) + ".json", rank_report_to_json(r.value));
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
    fresh.value.devices[d] = {fresh.value.devices[d].static_bytes, p.devices[d].mem_budget_bytes, p.devices[d].host_link};
  SimResult sim = simulate(fresh.value, s, {.op_times = true, .memory_curve = true});
  if (!sim.ok()) return R::Error(Status::Invalid("re-profiled problem: " + sim.status.message));
  return R::Of(std::move(sim.timeline));
}

// Every rank's comparison with the unpipelined reference, printed as one line and returned as
// JSON with "ok": loss and every gradient within 1e-5 relative.
json check_summary(const std::vector<RankReport>& reports, FILE* out) {
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
  const bool ok = worst <= 1e-5 && loss_err <= 1e-5 && checked > 0;
  std::fprintf(out, "check against one process with autograd: loss %.8f vs %.8f (rel. error %.2e), gradients of %d tensors "
              "within %.2e relative (worst %s): %s\n",
              reports[0].check.loss, reports[0].check.reference_loss, loss_err, checked, worst, worst_param.c_str(),
              ok ? "OK" : "FAILED (limit 1e-5)");
  return {{"ok", ok}, {"loss_rel_error", loss_err}, {"max_grad_rel_error", worst}, {"worst_param", worst_param},
          {"num_tensors", checked}};
}

int cmd_run(const RunArgs& a, const ModelArgs& model, const std::vector<std::string>& argv) {
  if (a.problem_path.empty())
    return usage_error("run needs --problem (the one `optpipe profile` wrote for this model)", kTool);
  if (a.schedule_path.empty() == a.family.empty()) return usage_error("give either --schedule FILE or --family NAME", kTool);
  Result<FamilySchedule> fs = load_schedule(a.problem_path, a.schedule_path, a.family, a.chunks);
  if (!fs.ok()) return fail(fs.status, kTool);
  Result<GptConfig> cfg = model.config(fs.value.problem.num_microbatches);
  if (!cfg.ok()) return fail(cfg.status, kTool);
  at::set_num_threads(model.threads);

  Result<RankEnv> env = rank_env();
  if (!env.ok()) return fail(env.status, kTool);
  if (env.value.present) return rank_main(env.value, fs.value, cfg.value, a);

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
  const Problem& p = fs.value.problem;
  Result<std::vector<std::string>> texts = launch_and_collect(argv, p.num_devices, a.timeout_s);
  std::vector<RankReport> reports;
  for (int d = 0; d < p.num_devices && texts.ok(); d++) {
    Result<RankReport> rep = rank_report_from_json(texts.value[d]);
    if (!rep.ok()) texts.status = rep.status;
    reports.push_back(std::move(rep.value));
  }
  if (!texts.ok()) return fail(Status::Invalid("run failed: " + texts.status.message), kTool);

  // With --reprofile the prediction comes from what the ranks measured just before running.
  Timeline predicted = v.sim.timeline;
  const double file_predicted_us = predicted.makespan_us;
  if (a.reprofile) {
    Result<Timeline> fresh = reprofiled_prediction(p, fs.value.schedule, reports, a.reprofile_repetitions);
    if (!fresh.ok()) return fail(fresh.status, kTool);
    predicted = std::move(fresh.value);
  }
  // The table goes to stderr when the JSON takes stdout.
  FILE* out = a.json_path == "-" ? stderr : stdout;
  RunComparison c = compare_run(p, fs.value.schedule, predicted, reports);
  std::fprintf(out, "%s on %d ranks (c10d gloo, CPU, %d thread%s each): %d microbatches of %d × %d tokens, %d iterations\n",
              what.c_str(), p.num_devices, model.threads, model.threads == 1 ? "" : "s", p.num_microbatches,
              cfg.value.microbatch_size, cfg.value.model.seq_len, a.iterations);
  std::string losses;
  for (double l : c.losses) losses += (losses.empty() ? "" : " → ") + fmt::format("{:.4f}", l);
  std::fprintf(out, "loss: %s\n", losses.c_str());
  std::vector<std::vector<std::string>> rows = {{"", "measured", "predicted", "measured/predicted"}};
  rows.push_back({"iteration time", ms(c.measured_us), ms(c.predicted_us), ratio(c.measured_us, c.predicted_us)});
  rows.push_back({"  replayed on the measured op times", ms(c.measured_us), ms(c.replayed_us), ratio(c.measured_us, c.replayed_us)});
  for (int d = 0; d < p.num_devices; d++)
    rows.push_back({"device " + std::to_string(d) + " idle", ms(c.measured_idle_us[d]), ms(c.predicted_idle_us[d]),
                    ratio(c.measured_idle_us[d], c.predicted_idle_us[d])});
  for (int d = 0; d < p.num_devices; d++)
    rows.push_back({"device " + std::to_string(d) + " peak activations", mib(c.measured_peak_bytes[d]),
                    mib(c.predicted_peak_bytes[d]),
                    ratio(static_cast<double>(c.measured_peak_bytes[d]), static_cast<double>(c.predicted_peak_bytes[d]))});
  for (int d = 0; d < p.num_devices; d++)
    rows.push_back({"device " + std::to_string(d) + " memory gate held", fmt::format("{} ({}×)", ms(c.gate_held_us[d]), c.gate_holds[d]),
                    "0 under any timing", ""});
  std::fputs(aligned_table(rows).c_str(), out);
  std::fprintf(out, "(iteration %d of %d shown: the median after the first; peaks are the max over all iterations; the "
                    "memory gate holds an allocation until frees make room, summed over all iterations)\n",
              c.shown_iteration + 1, a.iterations);
  if (a.reprofile)
    std::fprintf(out, "predicted from the ranks' profile taken just before the run; from %s: %s (measured/predicted %s)\n",
                a.problem_path.c_str(), ms(file_predicted_us).c_str(), ratio(c.measured_us, file_predicted_us).c_str());

  int rc = kExitOk;
  json check_json;
  if (a.check) {
    check_json = check_summary(reports, out);
    if (!check_json["ok"].get<bool>()) rc = kExitBadInput;
  }
  if (!a.trace_path.empty()) {
    Status st = write_text_file(a.trace_path, chrome_trace_json(p, fs.value.schedule, c.measured));
    if (!st.ok()) return fail(st, kTool);
  }
  if (!a.json_path.empty()) {
    json j = {{"schedule", what},
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
              {"gate_holds", c.gate_holds},
              {"gate_held_us", c.gate_held_us}};
    if (a.check) j["check"] = check_json;
    Status st = emit(a.json_path, j.dump(2) + "\n");
    if (!st.ok()) return fail(st, kTool);
  }
  return rc;
}

struct ProfileArgs {
  ProfileSpec spec;
  std::string placement = "linear", budget, out_path, problem_out;
  double timeout_s = 60;
};

int cmd_profile(ProfileArgs a, const ModelArgs& model, const std::vector<std::string>& argv) {
  if (!parse_placement(a.placement, &a.spec.placement))
    return usage_error("unknown placement \"" + a.placement + "\" (linear, interleaved, vshape)", kTool);
  if (a.spec.placement == Placement::kVShape && a.spec.chunks_per_device == 1) a.spec.chunks_per_device = 2;
  if (!a.budget.empty() && !parse_bytes(a.budget, &a.spec.mem_budget_bytes))
    return usage_error("--budget: expected a size such as 64MiB, got \"" + a.budget + "\"", kTool);
  if (Status st = check_profile_spec(a.spec); !st.ok()) return fail(st, kTool);
  Result<GptConfig> cfg = model.config(a.spec.num_microbatches);
  if (!cfg.ok()) return fail(cfg.status, kTool);
  at::set_num_threads(model.threads);

  Result<RankEnv> env = rank_env();
  if (!env.ok()) return fail(env.status, kTool);
  if (env.value.present) {
    const RankEnv& e = env.value;
    if (e.run_dir.empty()) return fail(Status::Invalid("a profiling rank writes its share to OPTPIPE_RUN_DIR, which is not set"), kTool);
    Result<Group> group = join_group({e.rank, e.world_size, e.master_addr, e.master_port}, a.timeout_s);
    Result<Problem> share = group.ok() ? profile_rank(cfg.value, a.spec, group.value) : Result<Problem>::Error(group.status);
    Status st = share.ok() ? write_text_file(e.run_dir + "/rank" + std::to_string(e.rank) + ".json", problem_to_json(share.value))
                           : share.status;
    if (!st.ok()) std::fprintf(stderr, "%s: %s\n", kTool, st.message.c_str());
    std::fflush(stderr);
    std::_Exit(st.ok() ? kExitOk : kExitBadInput);
  }

  std::vector<Problem> shares;
  Result<std::vector<std::string>> texts = launch_and_collect(argv, a.spec.num_devices, a.timeout_s);
  if (!texts.ok()) return fail(Status::Invalid("profiling failed: " + texts.status.message), kTool);
  for (const std::string& text : texts.value) {
    Result<Problem> share = problem_from_json(text);
    if (!share.ok()) return fail(Status::Invalid("profiling failed: a rank's share: " + share.status.message), kTool);
    shares.push_back(std::move(share.value));
  }
  Result<Problem> p = merge_profiles(a.spec, shares);
  if (!p.ok()) return fail(p.status, kTool);
  std::vector<std::vector<std::string>> rows = {{"stage", "F", "B", "W", "R", "kept by F", "kept for W"}};
  for (size_t s = 0; s < p.value.stages.size(); s++) {
    const StageSpec& st = p.value.stages[s];
    rows.push_back({std::to_string(s), format_us(st.t_f_us), format_us(st.t_b_us), format_us(st.t_w_us),
                    format_us(st.t_r_us), format_bytes(st.act_f_bytes), format_bytes(-st.act_w_bytes)});
  }
  std::fprintf(stderr, "%s", aligned_table(rows).c_str());
  std::fprintf(stderr, "hop between ranks %s; host copy %.2f GB/s + %s\n", format_us(p.value.t_comm_us).c_str(),
               p.value.host_link.d2h_gb_per_s, format_us(p.value.host_link.latency_us).c_str());
  if (Status st = emit(a.out_path, profile_to_json(p.value)); !st.ok()) return fail(st, kTool);
  if (!a.problem_out.empty())
    if (Status st = write_text_file(a.problem_out, problem_to_json(p.value)); !st.ok()) return fail(st, kTool);
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  keep_freed_memory();
  CLI::App app{"optpipe-runtime: run pipeline schedules for real on LibTorch + c10d"};
  app.require_subcommand(1);
  ModelArgs model;

  RunArgs run;
  CLI::App* run_cmd = app.add_subcommand("run", "execute a schedule, one process per device, and compare with the simulator");
  run_cmd->add_option("--problem,-p", run.problem_path, "problem JSON (as `optpipe profile --problem-out` writes)");
  run_cmd->add_option("--schedule,-s", run.schedule_path, "schedule JSON (from optimize, schedule or export)");
  run_cmd->add_option("--family,-f", run.family, "or build this family's schedule");
  run_cmd->add_option("--chunks", run.chunks, "chunks per device, for interleaved families")->check(CLI::Range(1, 64));
  run_cmd->add_option("--iterations", run.iterations, "training iterations")->capture_default_str()->check(CLI::Range(1, 100000));
  run_cmd->add_option("--lr", run.lr, "Adam learning rate")->capture_default_str();
  run_cmd->add_option("--timeout", run.timeout_s, "seconds any rank waits for a peer before giving up")
      ->capture_default_str()->check(CLI::Range(0.1, 86400.0));
  run_cmd->add_flag("--reprofile", run.reprofile,
                    "predict from a profile the ranks take just before running (same processes, same machine state)");
  run_cmd->add_option("--reprofile-repetitions", run.reprofile_repetitions, "timed runs per op when re-profiling")
      ->capture_default_str()->check(CLI::Range(1, 1000));
  run_cmd->add_flag("--check", run.check, "compare loss and gradients of the first iteration with one unpipelined process");
  run_cmd->add_option("--trace", run.trace_path, "write a Chrome trace of the measured iteration");
  run_cmd->add_option("--json", run.json_path, "write the figures as JSON (- for stdout)");
  run_cmd->add_option("--inject-fault", run.fault, "for tests: exit@RANK or stall@RANK in the first iteration");
  run_cmd->add_option("--fault-after-ops", run.fault_after_ops, "compute ops the faulty rank runs first")->capture_default_str();
  model.add_to(run_cmd);

  ProfileArgs prof;
  CLI::App* profile_cmd = app.add_subcommand("profile", "measure the model on this machine; write profile (and problem) JSON");
  profile_cmd->add_option("--devices", prof.spec.num_devices, "pipeline ranks")->capture_default_str()->check(CLI::Range(1, 1024));
  profile_cmd->add_option("--microbatches", prof.spec.num_microbatches, "microbatches per iteration")->capture_default_str()->check(CLI::Range(1, 100000));
  profile_cmd->add_option("--placement", prof.placement, "linear, interleaved or vshape")->capture_default_str();
  profile_cmd->add_option("--chunks", prof.spec.chunks_per_device, "chunks per device")->capture_default_str()->check(CLI::Range(1, 64));
  profile_cmd->add_option("--repetitions", prof.spec.repetitions, "timed runs per op (median kept)")->capture_default_str()->check(CLI::Range(1, 10000));
  profile_cmd->add_option("--budget", prof.budget, "memory budget per device in the problem (default: everything fits)");
  profile_cmd->add_option("--out,-o", prof.out_path, "profile JSON (default: stdout)");
  profile_cmd->add_option("--problem-out", prof.problem_out, "also write the measured problem JSON");
  profile_cmd->add_option("--timeout", prof.timeout_s, "seconds any rank waits for a peer")->capture_default_str()->check(CLI::Range(0.1, 86400.0));
  model.add_to(profile_cmd);

  return parse_and_run(app, argc, argv, kTool, [&] {
    if (*run_cmd) return cmd_run(run, model, std::vector<std::string>(argv, argv + argc));
    if (*profile_cmd) return cmd_profile(prof, model, std::vector<std::string>(argv, argv + argc));
    return kExitUsage;
  });
}
