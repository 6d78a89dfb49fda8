// optpipe — command-line front end: the command table. Each command lives in app/cmd_<name>.cpp.
// Exit codes (app/inputs.h): 0 ok, 1 bad input, 2 usage, 3 infeasible (a schedule over its
// budget, nothing fits), 4 time limit with no answer, 70 internal error (a bug: please report it).
#include <unistd.h>

#include <string>
#include <vector>

#include "cli.h"
#include "commands.h"
#include "inputs.h"
#include "optpipe/plan_file.h"

using namespace optpipe;

namespace {

// `run` and `profile` live in optpipe-runtime, the one program that links LibTorch, built next
// to this one: hand the whole command line over to it.
int exec_runtime(int argc, char** argv) {
  std::string path = executable_path();
  path = path.substr(0, path.rfind('/') + 1) + "optpipe-runtime";
  if (access(path.c_str(), X_OK) != 0)
    return fail(Status::Invalid(std::string("`optpipe ") + argv[1] +
                                "` needs the LibTorch runtime, which this build lacks (" + path +
                                " not found): install libtorch-dev, libgloo-dev and libopenblas0-pthread "
                                "(./scripts/setup.sh --full does) and build again"));
  std::vector<char*> args(argv, argv + argc);
  args[0] = path.data();
  args.push_back(nullptr);
  execv(path.c_str(), args.data());
  return fail(Status::Invalid("cannot start " + path));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && (std::string(argv[1]) == "run" || std::string(argv[1]) == "profile")) return exec_runtime(argc, argv);
  CLI::App app{"optpipe: pipeline-parallel schedules under a memory budget"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("optpipe ") + optpipe_version());
  // Listed for --help; main() hands them to optpipe-runtime before parsing.
  app.add_subcommand(
      "run",
      "execute a schedule for real on LibTorch + c10d and compare with the simulator (optpipe-runtime run --help)");
  app.add_subcommand(
      "profile",
      "measure the runtime's model on this machine: profile and problem JSON (optpipe-runtime profile --help)");
  const std::vector<Command> commands = {
      add_families_command(app), add_problem_command(app),  add_schedule_command(app),
      add_simulate_command(app), add_compare_command(app),  add_export_command(app),
      add_report_command(app),   add_optimize_command(app), add_plan_command(app),
  };
  set_command_line(argc, argv);
  return parse_and_run(app, argc, argv, "optpipe", [&] {
    for (const Command& c : commands)
      if (*c.app) return c.run();
    return kExitUsage;
  });
}
