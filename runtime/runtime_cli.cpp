#include "runtime_cli.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <utility>

#include "../app/inputs.h"
#include "launch.h"
#include "optpipe/files.h"
#include "optpipe/json_io.h"

namespace optpipe::runtime::cli {

void ModelArgs::add_to(CLI::App* c) {
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
  c->add_option(
       "--device", device,
       "auto (a GPU per rank when the runtime was built against CUDA LibTorch and one is visible), cpu or cuda")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  c->add_option("--layers-per-stage", layers_per_stage,
                "transformer layers per chunk in model order (e.g. 1,3), the same for profile and run; default: "
                "the schedule's partition when its problem has its layers, else the balanced cut")
      ->delimiter(',');
}

RankSetup ModelArgs::rank_setup(const RankEnv& env) const {
  const DeviceChoice choice = device == "cpu"    ? DeviceChoice::kCpu
                              : device == "cuda" ? DeviceChoice::kCuda
                                                 : DeviceChoice::kAuto;
  return {env.rank, env.world_size, env.master_addr, env.master_port, env.local_rank, env.local_world_size, choice};
}

Result<GptConfig> ModelArgs::config(int num_microbatches, int num_chunks, const Problem* plan) const {
  Result<ModelSpec> m = find_model(preset);
  if (!m.ok()) return Result<GptConfig>::Error(m.status);
  ModelSpec spec = m.value;
  for (auto [value, field] : {std::pair{layers, &spec.num_layers},
                              {hidden, &spec.hidden},
                              {ffn, &spec.ffn},
                              {seq_len, &spec.seq_len},
                              {vocab, &spec.vocab}})
    if (value > 0) *field = value;
  if (heads > 0) spec.heads = spec.kv_heads = heads;
  Result<GptConfig> cfg = gpt_config(spec, microbatch_size, num_microbatches, seed);
  if (!cfg.ok()) return cfg;
  std::vector<int> cut = layers_per_stage;
  if (plan && !plan->layers.empty() && layers_match(*plan)) {
    const std::vector<int> planned = transformer_layers_per_stage(*plan);
    if (!cut.empty() && cut != planned)
      return Result<GptConfig>::Error(
          Status::Invalid(fmt::format("--layers-per-stage {} disagrees with the schedule's partition {}",
                                      fmt::join(cut, ","), fmt::join(planned, ","))));
    cut = planned;
  }
  if (!cut.empty())
    if (Status st = set_layers_per_chunk(&cfg.value, cut, num_chunks); !st.ok())
      return Result<GptConfig>::Error(Status::Invalid(
          st.message + (layers_per_stage.empty() ? " (the schedule's partition)" : " (--layers-per-stage)")));
  return cfg;
}

std::string ms(double us) { return fmt::format("{:.2f} ms", us / 1e3); }
std::string mib(int64_t bytes) { return fmt::format("{:.2f} MiB", bytes / 1048576.0); }
std::string ratio(double measured, double predicted) {
  return predicted > 0 ? fmt::format("{:.3f}", measured / predicted) : "-";
}

namespace {

// The run directory holds the ranks' reports only. (Not std::filesystem::remove_all: PyPI's
// LibTorch exports its own copy of std::filesystem, which crashes the runtime built against it.)
void remove_run_dir(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d))
      if (std::string name = e->d_name; name != "." && name != "..") unlink((dir + "/" + name).c_str());
    closedir(d);
  }
  rmdir(dir.c_str());
}

}  // namespace

Result<std::vector<std::string>> launch_and_collect(const std::vector<std::string>& argv, int world_size,
                                                    double timeout_s) {
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
  remove_run_dir(run_dir);
  if (!st.ok()) return R::Error(st);
  return R::Of(std::move(texts));
}

}  // namespace optpipe::runtime::cli
