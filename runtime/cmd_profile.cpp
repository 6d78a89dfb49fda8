// optpipe-runtime profile: every rank measures its chunks at the same time (or this process is
// one of them); the launcher merges their shares into the profile (and problem) JSON.
#include <ATen/Parallel.h>

#include <cstdio>
#include <cstdlib>

#include "../app/inputs.h"
#include "../app/tables.h"
#include "engine.h"
#include "launch.h"
#include "optpipe/files.h"
#include "optpipe/json_io.h"
#include "optpipe/units.h"
#include "profile.h"
#include "runtime_cli.h"

namespace optpipe::runtime::cli {

namespace {

// One rank's share, written where the launcher looks for it.
int profiling_rank(const RankEnv& e, const GptConfig& cfg, const ProfileArgs& a, const ModelArgs& model) {
  if (e.run_dir.empty())
    return fail(Status::Invalid("a profiling rank writes its share to OPTPIPE_RUN_DIR, which is not set"), kTool);
  Result<Group> group = join_group(model.rank_setup(e), a.timeout_s);
  Result<Problem> share = group.ok() ? profile_rank(cfg, a.spec, group.value) : Result<Problem>::Error(group.status);
  Status st =
      share.ok() ? write_text_file(e.run_dir + "/rank" + std::to_string(e.rank) + ".json", problem_to_json(share.value))
                 : share.status;
  if (!st.ok()) std::fprintf(stderr, "%s: %s\n", kTool, st.message.c_str());
  std::fflush(stderr);
  std::_Exit(st.ok() ? kExitOk : kExitBadInput);  // pending c10d work must not hold the process open
}

// The measured figures per stage, on stderr: stdout may be taking the profile JSON.
void print_profile(const Problem& p) {
  std::vector<std::vector<std::string>> rows = {{"stage", "F", "B", "W", "R", "kept by F", "kept for W"}};
  for (size_t s = 0; s < p.stages.size(); s++) {
    const StageSpec& st = p.stages[s];
    rows.push_back({std::to_string(s), format_us(st.t_f_us), format_us(st.t_b_us), format_us(st.t_w_us),
                    format_us(st.t_r_us), format_bytes(st.act_f_bytes), format_bytes(-st.act_w_bytes)});
  }
  std::fprintf(stderr, "%s", aligned_table(rows).c_str());
  std::fprintf(stderr, "hop between ranks %s; host copy %.2f GB/s + %s\n", format_us(p.t_comm_us).c_str(),
               p.host_link.d2h_gb_per_s, format_us(p.host_link.latency_us).c_str());
}

}  // namespace

int cmd_profile(ProfileArgs a, const ModelArgs& model, const std::vector<std::string>& argv) {
  if (!parse_placement(a.placement, &a.spec.placement))
    return usage_error("unknown placement \"" + a.placement + "\" (linear, interleaved, vshape)", kTool);
  if (a.spec.placement == Placement::kVShape && a.spec.chunks_per_device == 1) a.spec.chunks_per_device = 2;
  if (!a.budget.empty() && !parse_bytes(a.budget, &a.spec.mem_budget_bytes))
    return usage_error("--budget: expected a size such as 64MiB, got \"" + a.budget + "\"", kTool);
  if (Status st = check_profile_spec(a.spec); !st.ok()) return fail(st, kTool);
  Result<GptConfig> cfg = model.config(a.spec.num_microbatches, a.spec.num_devices * a.spec.chunks_per_device, nullptr);
  if (!cfg.ok()) return fail(cfg.status, kTool);
  at::set_num_threads(model.threads);

  Result<RankEnv> env = rank_env();
  if (!env.ok()) return fail(env.status, kTool);
  if (env.value.present) return profiling_rank(env.value, cfg.value, a, model);

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
  print_profile(p.value);
  if (Status st = emit(a.out_path, profile_to_json(p.value)); !st.ok()) return fail(st, kTool);
  if (!a.problem_out.empty())
    if (Status st = write_text_file(a.problem_out, problem_to_json(p.value)); !st.ok()) return fail(st, kTool);
  return kExitOk;
}

}  // namespace optpipe::runtime::cli
