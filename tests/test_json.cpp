#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "optpipe/cost_model.h"
#include "optpipe/families.h"
#include "optpipe/json_io.h"
#include "optpipe/plan_file.h"

using namespace optpipe;

namespace {
std::string error_of(const std::string& text) {
  Result<Problem> r = problem_from_json(text);
  EXPECT_FALSE(r.ok()) << "accepted: " << text;
  return r.status.message;
}
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST(Json, ProblemRoundTrip) {
  Problem p = default_problem();
  p.stages[1].ws_b_bytes = 77;
  p.devices[2].host_link = 0;
  p.t_comm_us = 12.5;
  const std::string text = problem_to_json(p);
  Result<Problem> back = problem_from_json(text);
  ASSERT_TRUE(back.ok()) << back.status.message;
  EXPECT_EQ(problem_to_json(back.value), text);
}

TEST(Json, ScheduleRoundTrip) {
  Problem p = default_problem();
  Result<FamilySchedule> fs = build_family(*find_family("zb-v"), p);
  ASSERT_TRUE(fs.ok()) << fs.status.message;
  Schedule s = fs.value.schedule;
  s.devices[0].offloads.push_back({OpKind::kOffload, 0, 1});
  s.devices[0].reloads.push_back({{OpKind::kReload, 0, 1}, {OpKind::kF, 0, 3}});
  s.devices[0].offloads.push_back({OpKind::kOffload, 0, 2});
  s.devices[0].reloads.push_back({{OpKind::kReload, 0, 2}, {OpKind::kF, 0, 4}, {Op{OpKind::kOffload, 0, 1}}});
  s.devices[0].offloads.push_back({OpKind::kOffload, 0, 0});
  s.devices[0].reloads.push_back(
      {{OpKind::kReload, 0, 0}, {OpKind::kF, 0, 5}, {Op{OpKind::kOffload, 0, 1}, Op{OpKind::kF, 0, 4}}});
  s.devices[0].compute.insert(s.devices[0].compute.begin() + 5, {OpKind::kWait, 0, 1});
  const std::string text = schedule_to_json(s);
  EXPECT_TRUE(has(text, "\"after\": \"OFFLOAD1 s0\"")) << text;
  EXPECT_TRUE(has(text, "\"after\": [\n")) << text;  // several: a list
  EXPECT_TRUE(has(text, "\"WAIT1 s0\"")) << text;
  EXPECT_TRUE(has(text, "\"format\": \"optpipe.schedule/2\""));
  Result<Schedule> back = schedule_from_json(text);
  ASSERT_TRUE(back.ok()) << back.status.message;
  EXPECT_EQ(schedule_to_json(back.value), text);
  EXPECT_EQ(back.value.placement, Placement::kVShape);
  EXPECT_EQ(back.value.devices[0].reloads[0].anchor, (Op{OpKind::kF, 0, 3}));
  EXPECT_TRUE(back.value.devices[0].reloads[0].after.empty());
  EXPECT_EQ(back.value.devices[0].reloads[1].after, (std::vector<Op>{{OpKind::kOffload, 0, 1}}));
  EXPECT_EQ(back.value.devices[0].reloads[2].after, (std::vector<Op>{{OpKind::kOffload, 0, 1}, {OpKind::kF, 0, 4}}));
}

// Every plan-file version written so far reads: 1 (the schedule alone) and 2 (with the problem,
// what it was planned for, the writer's version and command line).
TEST(Json, PlanFileVersions) {
  Result<FamilySchedule> fs = build_family(*find_family("zb-v"), default_problem());
  ASSERT_TRUE(fs.ok()) << fs.status.message;
  const ModelSpec model = find_model("llama2-7b").value;
  PlannedFor pf{.model = model,
                .cluster = "8xh100",
                .spec = {.num_microbatches = 8,
                         .microbatch_size = 2,
                         .mem_budget_bytes = int64_t{60} << 30,
                         .tp = 2,
                         .dp = 2,
                         .cp = 2,
                         .precision = Precision::kFp8,
                         .tp_comm_overlap = true},
                .global_batch = 32};
  PlanFile f{.schedule = fs.value.schedule,
             .problem = fs.value.problem,
             .planned_for = pf,
             .command_line = "optpipe plan --tp 2"};
  const std::string v2 = plan_file_to_json(f);
  Result<PlanFile> back = plan_file_from_json(v2);
  ASSERT_TRUE(back.ok()) << back.status.message;
  EXPECT_EQ(back.value.format_version, 2);
  EXPECT_EQ(back.value.optpipe_version, optpipe_version());
  EXPECT_EQ(back.value.command_line, "optpipe plan --tp 2");
  ASSERT_TRUE(back.value.problem && back.value.planned_for);
  EXPECT_EQ(problem_to_json(*back.value.problem), problem_to_json(fs.value.problem));
  EXPECT_EQ(back.value.planned_for->model.hidden, model.hidden);
  EXPECT_EQ(back.value.planned_for->model.mlp, model.mlp);
  EXPECT_EQ(back.value.planned_for->spec.tp, 2);
  EXPECT_EQ(back.value.planned_for->spec.cp, 2);
  EXPECT_EQ(back.value.planned_for->spec.precision, Precision::kFp8);
  EXPECT_TRUE(back.value.planned_for->spec.tp_comm_overlap);
  EXPECT_EQ(plan_file_to_json(back.value), v2);

  // Version 1: no problem, nothing planned for.
  nlohmann::json j1 = nlohmann::json::parse(schedule_to_json(fs.value.schedule));
  j1.erase("optpipe_version");
  j1["format"] = "optpipe.schedule/1";
  const std::string v1 = j1.dump();
  back = plan_file_from_json(v1);
  ASSERT_TRUE(back.ok()) << back.status.message;
  EXPECT_EQ(back.value.format_version, 1);
  EXPECT_FALSE(back.value.problem || back.value.planned_for);
  EXPECT_EQ(schedule_to_json(back.value.schedule), schedule_to_json(fs.value.schedule));
  // A version-1 file knows no plan-file fields.
  Result<PlanFile> mixed = plan_file_from_json(v1.substr(0, v1.rfind('}')) + ", \"command_line\": \"x\"}");
  ASSERT_FALSE(mixed.ok());
  EXPECT_TRUE(has(mixed.status.message, "command_line: unknown field")) << mixed.status.message;

  // The problem held must be the one the schedule runs on; bad fields are named.
  PlanFile other = f;
  other.problem = default_problem();  // linear, not the V the schedule was made for
  Result<PlanFile> wrong = plan_file_from_json(plan_file_to_json(other));
  ASSERT_FALSE(wrong.ok());
  EXPECT_TRUE(has(wrong.status.message, "problem.placement is linear")) << wrong.status.message;
  PlanFile bad_batch = f;
  bad_batch.planned_for->global_batch = 33;
  wrong = plan_file_from_json(plan_file_to_json(bad_batch));
  ASSERT_FALSE(wrong.ok());
  EXPECT_TRUE(has(wrong.status.message, "planned_for.global_batch: 33")) << wrong.status.message;
  std::string bad_stage = v2;
  bad_stage.replace(bad_stage.find("\"t_f_us\""), 8, "\"t_f_usx\"");
  wrong = plan_file_from_json(bad_stage);
  ASSERT_FALSE(wrong.ok());
  EXPECT_TRUE(has(wrong.status.message, "problem.stages[0].")) << wrong.status.message;
}

TEST(Json, BadProblemsNameTheField) {
  const std::string ok_stage =
      R"({"t_f_us":1,"t_b_us":1,"t_w_us":1,"act_f_bytes":10,"act_b_bytes":-6,"act_w_bytes":-4})";
  const std::string ok_device = R"({"static_bytes":0,"mem_budget_bytes":100})";
  auto problem = [&](const std::string& fields, const std::string& stage, int n_stages, int n_devices) {
    std::string stages, devices;
    for (int i = 0; i < n_stages; i++) stages += (i ? "," : "") + stage;
    for (int i = 0; i < n_devices; i++) devices += (i ? "," : "") + ok_device;
    return "{" + fields + "\"stages\":[" + stages + "],\"devices\":[" + devices + "]}";
  };
  const std::string two = R"("num_devices":2,"num_microbatches":4,)";
  ASSERT_TRUE(problem_from_json(problem(two, ok_stage, 2, 2)).ok());

  EXPECT_TRUE(has(error_of("{\"num_devices\": 2,"), "malformed JSON"));
  EXPECT_TRUE(has(error_of("[1,2]"), "expected an object"));
  EXPECT_TRUE(has(error_of(problem(two + "\"colour\":1,", ok_stage, 2, 2)), "colour: unknown field"));
  EXPECT_TRUE(
      has(error_of(problem(
              two, R"({"t_f_us":-1,"t_b_us":1,"t_w_us":1,"act_f_bytes":10,"act_b_bytes":-6,"act_w_bytes":-4})", 2, 2)),
          "stages[0].t_f_us"));
  EXPECT_TRUE(has(
      error_of(problem(
          two, R"({"t_f_us":"fast","t_b_us":1,"t_w_us":1,"act_f_bytes":10,"act_b_bytes":-6,"act_w_bytes":-4})", 2, 2)),
      "stages[0].t_f_us: expected a number, got string"));
  EXPECT_TRUE(has(
      error_of(problem(
          two, R"({"t_f_us":1,"t_b_us":1,"t_w_us":1,"act_f_bytes":10,"act_b_bytes":-6,"act_w_bytes":-4,"t_x_us":3})", 2,
          2)),
      "stages[0].t_x_us: unknown field"));
  EXPECT_TRUE(
      has(error_of(problem(two, R"({"t_f_us":1,"t_b_us":1,"t_w_us":1,"act_f_bytes":10,"act_b_bytes":-6})", 2, 2)),
          "stages[0].act_w_bytes: is required"));
  EXPECT_TRUE(has(error_of(problem(R"("num_devices":0,"num_microbatches":4,)", ok_stage, 0, 0)), "num_devices"));
  EXPECT_TRUE(has(error_of(problem(two, ok_stage, 3, 2)),
                  "stages: must have num_devices × chunks_per_device = 2 entries, got 3"));
  EXPECT_TRUE(has(error_of(problem(two, ok_stage, 2, 1)), "devices: must have num_devices = 2 entries, got 1"));
  EXPECT_TRUE(has(error_of(problem(two + "\"placement\":\"zigzag\",", ok_stage, 2, 2)), "placement"));
  EXPECT_TRUE(has(error_of(problem(two + "\"num_microbatches\":2.5,", ok_stage, 2, 2)), "num_microbatches"));
  EXPECT_TRUE(
      has(error_of(problem(two + "\"host_link\":{\"d2h_gb_per_s\":0},", ok_stage, 2, 2)), "host_link.d2h_gb_per_s"));
  // NaN is not JSON; a number too large for a double is refused by the parser, which names it.
  EXPECT_TRUE(
      has(error_of(problem(
              two, R"({"t_f_us":NaN,"t_b_us":1,"t_w_us":1,"act_f_bytes":10,"act_b_bytes":-6,"act_w_bytes":-4})", 2, 2)),
          "malformed JSON"));
  EXPECT_TRUE(has(
      error_of(problem(
          two, R"({"t_f_us":1e400,"t_b_us":1,"t_w_us":1,"act_f_bytes":10,"act_b_bytes":-6,"act_w_bytes":-4})", 2, 2)),
      "number overflow parsing '1e400'"));
}

TEST(Json, BadSchedules) {
  auto err = [](const std::string& text) {
    Result<Schedule> r = schedule_from_json(text);
    EXPECT_FALSE(r.ok()) << text;
    return r.status.message;
  };
  EXPECT_TRUE(has(err(R"({"devices":[{"compute":["F0 s0","X1 s0"]}]})"), "devices[0].compute[1]"));
  EXPECT_TRUE(has(err(R"({"devices":[{"compute":[], "extra": 1}]})"), "devices[0].extra: unknown field"));
  EXPECT_TRUE(has(err(R"({"format":"optpipe.schedule/9","devices":[]})"), "format"));
  EXPECT_TRUE(
      has(err(R"({"devices":[{"compute":[],"reloads":[{"op":"RELOAD0 s0"}]}]})"), "devices[0].reloads[0].anchor"));
  EXPECT_TRUE(schedule_from_json(R"({"devices":[{"compute":["BW12 s3"]}]})").ok());
}

TEST(Json, IntegersBeyondInt64AreRefused) {
  std::string text = problem_to_json(default_problem());
  const std::string from = "\"act_w_bytes\": -536870912";
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, from.size(), "\"act_w_bytes\": 18446744073709551615");
  Result<Problem> r = problem_from_json(text);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status.message.find("stages[0].act_w_bytes: is out of range"), std::string::npos) << r.status.message;
}
