// runtime_cli.h — what optpipe-runtime's command line shares: the options of its two commands,
// the model options both take, how they print figures, and how they start their ranks.
// main.cpp defines the options; cmd_run.cpp and cmd_profile.cpp run the commands.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine.h"
#include "gpt.h"
#include "launch.h"
#include "optpipe/status.h"
#include "profile.h"

namespace CLI {
class App;
}

namespace optpipe::runtime::cli {

inline constexpr const char* kTool = "optpipe-runtime";

// The model both commands build: a preset with any of its sizes overridden.
struct ModelArgs {
  std::string preset = "gpt-tiny";
  int layers = 0, hidden = 0, ffn = 0, heads = 0, seq_len = 0, vocab = 0;
  int microbatch_size = 2;
  uint64_t seed = 0;
  int threads = 1;
  std::string device = "auto";        // auto, cpu or cuda
  std::vector<int> layers_per_stage;  // the chunks' transformer layers; empty: see config()

  void add_to(CLI::App* c);
  // The model cut into `num_chunks` chunks: by --layers-per-stage, else as `plan` is cut where it
  // is a problem with its layers (a plan's partition; the flag must then agree), else balanced.
  Result<GptConfig> config(int num_microbatches, int num_chunks, const Problem* plan) const;
  RankSetup rank_setup(const RankEnv& env) const;  // this rank's place, and the device it computes on
};

struct RunArgs {
  std::string problem_path, schedule_path, family, trace_path, json_path, fault;
  int chunks = 0, iterations = 3, fault_after_ops = 2, reprofile_repetitions = 3;
  double lr = 3e-3, timeout_s = 60;
  bool check = false, reprofile = false;
};

struct ProfileArgs {
  ProfileSpec spec;
  std::string placement = "linear", budget, out_path, problem_out;
  double timeout_s = 60;
};

// Each returns the exit code. `argv` is this process's command line: the launcher starts every
// rank with it.
int cmd_run(const RunArgs& a, const ModelArgs& model, const std::vector<std::string>& argv);
int cmd_profile(ProfileArgs a, const ModelArgs& model, const std::vector<std::string>& argv);

std::string ms(double us);                             // "12.34 ms"
std::string mib(int64_t bytes);                        // "4.80 MiB"
std::string ratio(double measured, double predicted);  // "1.234", or "-" with nothing predicted

// Starts one process per rank with this command line and returns what each wrote to the run
// directory (index = rank).
Result<std::vector<std::string>> launch_and_collect(const std::vector<std::string>& argv, int world_size,
                                                    double timeout_s);

}  // namespace optpipe::runtime::cli
