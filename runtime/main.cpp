// optpipe-runtime — the one program that links LibTorch; `optpipe run` and `optpipe profile`
// hand over to it. Exit codes as optpipe's: 0 ok, 1 bad input or a failed run/check, 2 usage,
// 3 a schedule over its budget, 70 internal error.
//
//   run      execute a schedule: one process per device on this machine (or, with RANK,
//            WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, this process is one rank, as under
//            torchrun), then measured figures beside the simulator's prediction
//   profile  measure the model on this machine and write the profile (and problem) JSON
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "../app/cli.h"
#include "../app/inputs.h"
#include "engine.h"
#include "runtime_cli.h"

using namespace optpipe;
using namespace optpipe::runtime;
using namespace optpipe::runtime::cli;

int main(int argc, char** argv) {
  keep_freed_memory();
  CLI::App app{"optpipe-runtime: run pipeline schedules for real on LibTorch + c10d"};
  app.require_subcommand(1);
  ModelArgs model;

  RunArgs run;
  CLI::App* run_cmd =
      app.add_subcommand("run", "execute a schedule, one process per device, and compare with the simulator");
  run_cmd->add_option("--problem,-p", run.problem_path,
                      "problem JSON (as `optpipe profile --problem-out` writes); a plan file holds its own");
  run_cmd->add_option("--schedule,-s", run.schedule_path, "plan file (from plan, optimize, schedule or export)");
  run_cmd->add_option("--family,-f", run.family, "or build this family's schedule");
  run_cmd->add_option("--chunks", run.chunks, "chunks per device, for interleaved families")->check(CLI::Range(1, 64));
  run_cmd->add_option("--iterations", run.iterations, "training iterations")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  run_cmd->add_option("--lr", run.lr, "Adam learning rate")->capture_default_str();
  run_cmd->add_option("--timeout", run.timeout_s, "seconds any rank waits for a peer before giving up")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  run_cmd->add_flag("--reprofile", run.reprofile,
                    "predict from a profile the ranks take just before running (same processes, same machine state)");
  run_cmd->add_option("--reprofile-repetitions", run.reprofile_repetitions, "timed runs per op when re-profiling")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  run_cmd->add_flag("--check", run.check,
                    "compare loss and gradients of the first iteration with one unpipelined process");
  run_cmd->add_option("--trace", run.trace_path, "write a Chrome trace of the measured iteration");
  run_cmd->add_option("--json", run.json_path, "write the figures as JSON (- for stdout)");
  run_cmd->add_option("--inject-fault", run.fault, "for tests: exit@RANK or stall@RANK in the first iteration");
  run_cmd->add_option("--fault-after-ops", run.fault_after_ops, "compute ops the faulty rank runs first")
      ->capture_default_str();
  model.add_to(run_cmd);

  ProfileArgs prof;
  CLI::App* profile_cmd =
      app.add_subcommand("profile", "measure the model on this machine; write profile (and problem) JSON");
  profile_cmd->add_option("--devices", prof.spec.num_devices, "pipeline ranks")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  profile_cmd->add_option("--microbatches", prof.spec.num_microbatches, "microbatches per iteration")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  profile_cmd->add_option("--placement", prof.placement, "linear, interleaved or vshape")->capture_default_str();
  profile_cmd->add_option("--chunks", prof.spec.chunks_per_device, "chunks per device")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  profile_cmd->add_option("--repetitions", prof.spec.repetitions, "timed runs per op (median kept)")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  profile_cmd->add_option("--budget", prof.budget,
                          "memory budget per device in the problem (default: everything fits)");
  profile_cmd->add_option("--out,-o", prof.out_path, "profile JSON (default: stdout)");
  profile_cmd->add_option("--problem-out", prof.problem_out, "also write the measured problem JSON");
  profile_cmd->add_option("--timeout", prof.timeout_s, "seconds any rank waits for a peer")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  model.add_to(profile_cmd);

  return parse_and_run(app, argc, argv, kTool, [&] {
    if (*run_cmd) return cmd_run(run, model, std::vector<std::string>(argv, argv + argc));
    if (*profile_cmd) return cmd_profile(prof, model, std::vector<std::string>(argv, argv + argc));
    return kExitUsage;
  });
}
