// The one table of schedule families, shared by the CLI, the tests and the docs.
#include <algorithm>
#include <functional>

#include "families/common.h"
#include "optpipe/simulate.h"
#include "optpipe/space.h"
#include "optpipe/validate.h"

namespace optpipe {

const std::vector<Family>& families() {
  static const std::vector<Family> kFamilies = {
      {"gpipe", Placement::kLinear, 1, make_gpipe, "all forwards, then all backwards; M activations alive"},
      {"1f1b", Placement::kLinear, 1, make_1f1b, "one forward, one backward; at most D−d activations on device d"},
      {"interleaved-1f1b", Placement::kInterleaved, 2, make_interleaved_1f1b,
       "Megatron's interleaved 1F1B over v chunks per device; bubble ÷ v, more activations"},
      {"looped-bfs", Placement::kInterleaved, 2, make_looped_bfs,
       "torch's breadth-first loop: every microbatch through a chunk, then the next; GPipe's memory, v chunks"},
      {"interleaved-zb", Placement::kInterleaved, 2, make_interleaved_zb,
       "torch's interleaved zero bubble (ZB-1P over v chunks): split backward, W fills the bubbles"},
      {"zb-h1", Placement::kLinear, 1, make_zb_h1, "zero-bubble H1: split backward, W fills bubbles; 1F1B's memory"},
      {"zb-h2", Placement::kLinear, 1, make_zb_h2, "zero-bubble H2: more warm-up forwards; ~zero bubble at ~2× memory"},
      {"zb-auto", Placement::kLinear, 1, make_zb_auto,
       "zero-bubble's automatic scheduler (ZB-1p/ZB-2p): greedy under the budget, W filling the waits"},
      {"zb-v", Placement::kVShape, 2, make_zb_v, "zero-bubble V: two chunks in a V; ~zero bubble at 1F1B's memory"},
      {"v-half", Placement::kVShape, 2, make_v_half, "V-shape at half of 1F1B's activation memory"},
      {"v-min", Placement::kVShape, 2, make_v_min, "V-shape at a third of 1F1B's activation memory"},
      {"dualpipe-v", Placement::kVShape, 2, make_dualpipe_v,
       "DeepSeek's DualPipeV: V-shape, forward and backward overlapped"},
      {"pipeoffload", Placement::kInterleaved, 2, make_pipeoffload,
       "PipeOffload-style: interleaved 1F1B, offloading activations whose lifespan covers the round trip"},
      {"1f1b-recompute", Placement::kLinear, 1, make_1f1b_recompute,
       "1F1B recomputing every forward before its backward; keeps only chunk inputs"},
  };
  return kFamilies;
}

const Family* find_family(const std::string& name) {
  for (const Family& f : families())
    if (name == f.name) return &f;
  return nullptr;
}

Result<FamilySchedule> build_family(const Family& f, const Problem& p, int chunks_per_device) {
  int v = f.chunks_per_device;
  if (chunks_per_device > 0) {
    if (!f.takes_any_chunks() && chunks_per_device != f.chunks_per_device)
      return Result<FamilySchedule>::Error(
          Status::Invalid(std::string(f.name) + " runs " + std::to_string(f.chunks_per_device) +
                          " chunk(s) per device, not " + std::to_string(chunks_per_device)));
    v = chunks_per_device;
  }
  FamilySchedule out;
  if (p.placement == f.placement && p.chunks_per_device == v) {
    out.problem = p;
  } else {
    Result<Problem> re = rechunk(p, f.placement, v);
    if (!re.ok()) return Result<FamilySchedule>::Error(re.status);
    out.problem = std::move(re.value);
  }
  Result<Schedule> s = f.make(out.problem);
  if (!s.ok()) return Result<FamilySchedule>::Error(s.status);
  out.schedule = std::move(s.value);
  return Result<FamilySchedule>::Of(std::move(out));
}

void score_run(const SimOptions& sim, FamilyRun* run) {
  Validation v = validate(run->built.problem, run->built.schedule, {.check_memory_budget = false, .sim = sim});
  OPTPIPE_CHECK(v.ok(), "family " + run->label + " produced an invalid schedule: " + v.summary());
  run->timeline = std::move(v.sim.timeline);
  run->fits = fits_budget(run->built.problem, run->timeline);
  run->fits_any_timing = sim.any_timing && fits_any_timing(run->built.problem, run->timeline);
}

namespace {

// The chunk counts a family is run at: its own, or for a family that takes any (interleaved) each of
// `interleaved_chunks`, else every count from 2 to what p's items fill.
std::vector<int> chunks_to_run(const Family& f, const Problem& p, const std::vector<int>& interleaved_chunks) {
  if (!f.takes_any_chunks()) return {f.chunks_per_device};
  if (!interleaved_chunks.empty()) return interleaved_chunks;
  std::vector<int> all;
  for (int v = 2; v <= std::max(2, max_chunks_per_device(p)); v++) all.push_back(v);
  return all;
}

// run_families for the families `wanted` takes.
std::vector<FamilyRun> run_some_families(const Problem& p, const SimOptions& sim,
                                         std::chrono::steady_clock::time_point deadline,
                                         const std::vector<int>& interleaved_chunks,
                                         std::chrono::steady_clock::time_point tunings_deadline,
                                         const std::function<bool(const Family&)>& wanted) {
  std::vector<FamilyRun> out;
  for (const Family& f : families()) {
    if (!wanted(f)) continue;
    for (int v : chunks_to_run(f, p, interleaved_chunks)) {
      FamilyRun run;
      run.family = &f;
      run.label = f.takes_any_chunks() ? std::string(f.name) + " v" + std::to_string(v) : f.name;
      if (std::chrono::steady_clock::now() > deadline) {
        run.status = Status::Invalid(run.label + ": not built, the time limit had passed");
        out.push_back(std::move(run));
        continue;
      }
      Result<FamilySchedule> fs = build_family(f, p, v);
      if (!fs.ok()) {
        run.status = fs.status;
        out.push_back(std::move(run));
        continue;
      }
      run.built = std::move(fs.value);
      score_run(sim, &run);
      out.push_back(std::move(run));
    }
  }
  // The tunings after every family is built (they cost more: a tight deadline leaves them out,
  // never a family), each family's after it.
  std::vector<FamilyRun> with_tunings;
  for (FamilyRun& run : out) {
    std::vector<FamilyRun> tuned = practitioner_runs(run, sim, std::min(deadline, tunings_deadline));
    with_tunings.push_back(std::move(run));
    for (FamilyRun& t : tuned) with_tunings.push_back(std::move(t));
  }
  return with_tunings;
}

}  // namespace

std::vector<FamilyRun> run_families(const Problem& p, const SimOptions& sim,
                                    std::chrono::steady_clock::time_point deadline,
                                    const std::vector<int>& interleaved_chunks,
                                    std::chrono::steady_clock::time_point tunings_deadline) {
  return run_some_families(p, sim, deadline, interleaved_chunks, tunings_deadline, [](const Family&) { return true; });
}

std::vector<FamilyRun> run_families_on_cut(const Problem& q, const SimOptions& sim,
                                           std::chrono::steady_clock::time_point deadline,
                                           std::chrono::steady_clock::time_point tunings_deadline) {
  return run_some_families(q, sim, deadline, {q.chunks_per_device}, tunings_deadline, [&](const Family& f) {
    return f.placement == q.placement && (f.takes_any_chunks() || f.chunks_per_device == q.chunks_per_device);
  });
}

const FamilyRun* fastest_fitting(const std::vector<FamilyRun>& runs, Objective objective, bool as_published_only) {
  const FamilyRun* best = nullptr;
  for (const FamilyRun& r : runs)
    if (r.status.ok() && r.fits && (!as_published_only || r.tuning == Tuning::kAsPublished) &&
        (!best || objective_us(r.timeline, objective) < objective_us(best->timeline, objective)))
      best = &r;
  return best;
}

void rule_out(const ScheduleRules& rules, const std::vector<PlacementCandidate>& space, std::vector<FamilyRun>* runs) {
  for (FamilyRun& run : *runs) {
    if (!run.status.ok()) continue;
    const Problem& q = run.built.problem;
    auto searched = [&](const PlacementCandidate& c) { return same_placement(c.problem, q); };
    if (Status st = rules.any() ? check_rules(rules, q, run.built.schedule) : Status::Ok(); !st.ok())
      run.status = Status::Invalid("ruled out: " + st.message);
    else if (rules.fixed_partition && run.tuning == Tuning::kPartition)
      run.status = Status::Invalid("ruled out: the partition is fixed");
    else if (std::none_of(space.begin(), space.end(), searched))
      run.status = Status::Invalid(
          "ruled out: " + placement_label(q.placement, q.chunks_per_device) + " is not among the placements searched" +
          (q.num_devices == 1 ? " (one device is no pipeline: --chunks asks for chunks)" : ""));
  }
}

}  // namespace optpipe
