#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "optpipe/cost_model.h"
#include "optpipe/export.h"
#include "optpipe/families.h"
#include "optpipe/validate.h"

using namespace optpipe;

namespace {

struct Built {
  FamilySchedule fs;
  Timeline t;
};

Built build(const char* family, const Problem& p = default_problem()) {
  Result<FamilySchedule> fs = build_family(*find_family(family), p);
  EXPECT_TRUE(fs.ok()) << fs.status.message;
  SimResult r = simulate(fs.value.problem, fs.value.schedule, {.op_times = true, .memory_curve = true});
  EXPECT_TRUE(r.ok()) << r.status.message;
  return {fs.value, r.timeline};
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t pos = text.find(part); pos != std::string::npos; pos = text.find(part, pos + 1)) n++;
  return n;
}

}  // namespace

TEST(ChromeTrace, OneEventPerOpWithRealDurations) {
  Problem p = default_problem();
  p.host_link = {1000, 1000, 0};  // offloads happen
  Built b = build("pipeoffload", p);
  const auto j = nlohmann::json::parse(chrome_trace_json(b.fs.problem, b.fs.schedule, b.t));
  size_t spans = 0, counters = 0, offloads = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X") {
      spans++;
      EXPECT_GE(e["dur"].get<double>(), 0);
      if (e["tid"] == 1) offloads++;
    }
    if (e["ph"] == "C") counters++;
  }
  EXPECT_EQ(spans, b.fs.schedule.num_ops());
  EXPECT_GT(offloads, 0u);
  size_t points = 0;
  for (const auto& m : b.t.memory) points += m.size();
  EXPECT_EQ(counters, points);
  // Named like "F3 s1", with the simulator's times.
  const Op first = b.fs.schedule.devices[0].compute[0];
  bool found = false;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X" && e["name"] == op_name(first) && e["pid"] == 0) {
      found = true;
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), b.t.start_us[op_id(b.fs.problem, first)]);
    }
  EXPECT_TRUE(found);
}

TEST(PytorchCsv, ActionsPerRank) {
  Built b = build("zb-v");
  Result<CsvExport> exported = pytorch_csv(b.fs.schedule);
  ASSERT_TRUE(exported.ok()) << exported.status.message;
  const CsvExport& csv = exported.value;
  EXPECT_TRUE(csv.notes.empty());
  EXPECT_EQ(count(csv.csv, "\n"), 4u);
  // <digits><F|I|W|B><digits>, checked by hand (GCC 12 warns inside std::regex).
  auto is_action = [](const std::string& cell) {
    const size_t kind = cell.find_first_not_of("0123456789");
    return kind > 0 && kind != std::string::npos && std::string("FIWB").find(cell[kind]) != std::string::npos &&
           kind + 1 < cell.size() && cell.find_first_not_of("0123456789", kind + 1) == std::string::npos;
  };
  size_t cells = 0;
  size_t start = 0;
  for (size_t end = csv.csv.find_first_of(",\n"); end != std::string::npos; end = csv.csv.find_first_of(",\n", start)) {
    const std::string cell = csv.csv.substr(start, end - start);
    EXPECT_TRUE(is_action(cell)) << cell;
    cells++;
    start = end + 1;
  }
  EXPECT_EQ(cells, b.fs.schedule.num_ops());
  // V-shape: device 0 runs stages 0 and 7; the input-gradient B is "I".
  EXPECT_EQ(csv.csv.substr(0, 4), "0F0,");
  EXPECT_NE(csv.csv.find("7I0"), std::string::npos);

  const Schedule recomputing = build("1f1b-recompute").fs.schedule;
  Result<CsvExport> refused = pytorch_csv(recomputing);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status.message.find("R0 s0"), std::string::npos) << refused.status.message;
  Result<CsvExport> dropped = pytorch_csv(recomputing, /*drop_memory_ops=*/true);
  ASSERT_TRUE(dropped.ok());
  const CsvExport& rc = dropped.value;
  ASSERT_EQ(rc.notes.size(), 1u);
  EXPECT_NE(rc.notes[0].find("recompute"), std::string::npos);
  EXPECT_EQ(rc.csv.find('R'), std::string::npos);
}

// torch's _PipelineScheduleRuntime reads the last stage's losses in forward order: a schedule whose
// last stage runs microbatch 1's forward before microbatch 0's is renumbered on every rank, and says so.
TEST(PytorchCsv, LastStageForwardsInOrderAfterRenumbering) {
  Schedule s;
  s.devices.resize(2);
  auto op = [](OpKind k, int stage, int mb) { return Op{k, stage, mb}; };
  s.devices[0].compute = {op(OpKind::kF, 0, 0), op(OpKind::kF, 0, 1), op(OpKind::kBW, 0, 1), op(OpKind::kBW, 0, 0)};
  s.devices[1].compute = {op(OpKind::kF, 1, 1), op(OpKind::kBW, 1, 1), op(OpKind::kF, 1, 0), op(OpKind::kBW, 1, 0)};
  Result<CsvExport> exported = pytorch_csv(s);
  ASSERT_TRUE(exported.ok()) << exported.status.message;
  EXPECT_EQ(exported.value.csv, "0F1,0F0,0B0,0B1\n1F0,1B0,1F1,1B1\n");
  ASSERT_EQ(exported.value.notes.size(), 1u);
  EXPECT_NE(exported.value.notes[0].find("renumbered"), std::string::npos);
  EXPECT_NE(exported.value.notes[0].find("0→1, 1→0"), std::string::npos) << exported.value.notes[0];
  // In order already: nothing moves, no note.
  std::swap(s.devices[1].compute[0], s.devices[1].compute[2]);
  std::swap(s.devices[1].compute[1], s.devices[1].compute[3]);
  Result<CsvExport> kept = pytorch_csv(s);
  ASSERT_TRUE(kept.ok());
  EXPECT_TRUE(kept.value.notes.empty());
  EXPECT_EQ(kept.value.csv, "0F0,0F1,0B1,0B0\n1F0,1B0,1F1,1B1\n");
}

TEST(Svg, DrawsEveryOpAndTheMemoryCurves) {
  Built b = build("zb-h1");
  const std::string svg = schedule_svg(b.fs.problem, b.fs.schedule, b.t, "zb-h1");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(count(svg, "<title>"), b.fs.schedule.num_ops());
  EXPECT_GE(count(svg, std::string("fill=\"") + op_colour(OpKind::kF) + "\""), 32u);
  EXPECT_GE(count(svg, std::string("fill=\"") + op_colour(OpKind::kW) + "\""), 32u);
  EXPECT_EQ(count(svg, "<polyline"), 4u);  // one memory curve per device
  EXPECT_EQ(count(svg, "budget 52.00 GiB"), 4u);
  EXPECT_EQ(count(svg, "peak 48.00 GiB"), 1u);  // device 0's peak
}

TEST(HtmlReport, SelfContained) {
  Built b = build("1f1b");
  ReportRow row{"1f1b", "linear v1", true, "", b.t.makespan_us, b.t.bubble_ratio, 0, true};
  ReportRow na{"dualpipe-v", "vshape v2", false, "needs at least 8 microbatches", 0, 0, 0, false};
  const std::string html = html_report("report <&>", "4 devices", {row, na},
                                       {{"1f1b", schedule_svg(b.fs.problem, b.fs.schedule, b.t, "1f1b")}});
  EXPECT_NE(html.find("<title>report &lt;&amp;&gt;</title>"), std::string::npos);
  EXPECT_NE(html.find("not applicable: needs at least 8 microbatches"), std::string::npos);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  // Nothing fetched: no scripts, stylesheets, images or fonts from elsewhere.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(count(html, "http"), count(html, "http://www.w3.org/2000/svg"));
}

// Megatron's recompute flags say what the plan recomputes only where Megatron can: every
// microbatch of every stage recomputed whole; a plan recomputing some gets a comment instead.
TEST(Megatron, RecomputeFlagsWhereMegatronCanSayThem) {
  const Problem p = build_problem(find_model("llama2-7b").value, find_cluster("4xh100").value, PlanSpec{}).value;
  auto flags_of = [&](const Schedule& s) {
    Result<std::string> text = megatron_flags(p, s);
    EXPECT_TRUE(text.ok()) << text.status.message;
    return text.value;
  };
  Result<FamilySchedule> plain = build_family(*find_family("1f1b"), p);
  Result<FamilySchedule> all = build_family(*find_family("1f1b-recompute"), p);
  ASSERT_TRUE(plain.ok() && all.ok());
  EXPECT_EQ(flags_of(plain.value.schedule).find("--recompute"), std::string::npos);
  const std::vector<int> layers = transformer_layers_per_stage(p);
  const int most = *std::max_element(layers.begin(), layers.end());
  const std::string full = flags_of(all.value.schedule);
  EXPECT_NE(
      full.find("--recompute-granularity full --recompute-method block --recompute-num-layers " + std::to_string(most)),
      std::string::npos)
      << full;
  // One stage forward recomputed: not expressible, said in the comment.
  Schedule some = plain.value.schedule;
  std::vector<Op>& ops = some.devices[0].compute;
  const auto b0 = std::find(ops.begin(), ops.end(), Op{OpKind::kBW, 0, 0});
  ASSERT_NE(b0, ops.end());
  ops.insert(b0, Op{OpKind::kR, 0, 0});
  ASSERT_TRUE(validate(p, some, {.check_memory_budget = false}).ok()) << validate(p, some).summary();
  const std::string partial = flags_of(some);
  EXPECT_EQ(partial.find("--recompute-granularity"), std::string::npos) << partial;
  EXPECT_NE(partial.find("1 of " + std::to_string(p.num_stages() * p.num_microbatches) + " stage forwards recomputed"),
            std::string::npos)
      << partial;
}

// One device is no pipeline: Megatron-LM runs virtual stages only with a pipeline size above 1,
// and torchtitan pipelines only at pipeline_parallel_degree above 1 (ParallelDims.pp_enabled), so
// neither takes a plan of several chunks on one device; with one chunk both export it.
TEST(Frameworks, SeveralChunksOnOneDeviceAreRefused) {
  PlanSpec spec;
  spec.tp = 4;  // the four GPUs one pipeline device
  const Problem p = build_problem(find_model("llama2-7b").value, find_cluster("4xh100").value, spec).value;
  ASSERT_EQ(p.num_devices, 1);
  Result<Problem> chunked = rechunk(p, Placement::kInterleaved, 4);
  ASSERT_TRUE(chunked.ok()) << chunked.status.message;
  Result<Schedule> s = make_interleaved_1f1b(chunked.value);
  ASSERT_TRUE(s.ok()) << s.status.message;
  const Result<std::string> megatron = megatron_flags(chunked.value, s.value);
  EXPECT_FALSE(megatron.ok());
  EXPECT_NE(megatron.status.message.find("pipeline size above 1"), std::string::npos) << megatron.status.message;
  for (const Result<std::string>& titan :
       {torchtitan_toml(chunked.value, "plan.csv"), torchtitan_config(chunked.value, "plan.csv")}) {
    EXPECT_FALSE(titan.ok());
    EXPECT_NE(titan.status.message.find("pipeline_parallel_degree above 1"), std::string::npos) << titan.status.message;
  }
  Result<Schedule> linear = make_1f1b(p);
  ASSERT_TRUE(linear.ok());
  EXPECT_TRUE(megatron_flags(p, linear.value).ok());
  EXPECT_TRUE(torchtitan_toml(p, "plan.csv").ok());
}
