// Plan files as JSON ("optpipe.schedule/2"; "/1" still reads): the schedule with one op name per
// entry, and beside it the problem, what it was planned for and who wrote it.
#include "io/json_reader.h"
#include "optpipe/json_io.h"
#include "optpipe/plan_file.h"

#ifndef OPTPIPE_VERSION
#error "CMake defines OPTPIPE_VERSION from project(optpipe VERSION ...)"
#endif

namespace optpipe {

using namespace json_read;

namespace {

constexpr const char* kScheduleFormatV1 = "optpipe.schedule/1";

void read_schedule_fields(Reader& r, Status& err, Schedule* s) {
  auto read_op = [&](const json& v, const std::string& where, Op* out) {
    if (!err.ok()) return;
    if (!v.is_string() || !parse_op_name(v.get<std::string>(), out))
      err = Status::Invalid(
          where + ": expected an op such as \"F3 s1\" (kinds F, B, W, BW, R, OFFLOAD, RELOAD, WAIT), got " + brief(v));
  };
  read_placement(r, &s->placement, &s->chunks_per_device);
  if (const json* items = r.array("items_per_stage", false))
    for (size_t k = 0; k < items->size() && err.ok(); k++) {
      if (!(*items)[k].is_number_integer() || (*items)[k].get<int64_t>() < 1 || (*items)[k].get<int64_t>() > 100000)
        err = Status::Invalid("items_per_stage[" + std::to_string(k) + "]: expected an integer from 1 to 100000, got " +
                              brief((*items)[k]));
      else
        s->items_per_stage.push_back((*items)[k].get<int>());
    }
  const json* devices = r.array("devices", true);
  if (!devices) return;
  for (size_t d = 0; d < devices->size() && err.ok(); d++) {
    const std::string dp = "devices[" + std::to_string(d) + "]";
    Reader dr((*devices)[d], dp, &err);
    DeviceSchedule ds;
    if (const json* a = dr.array("compute", true))
      for (size_t k = 0; k < a->size() && err.ok(); k++) {
        Op op;
        read_op((*a)[k], dp + ".compute[" + std::to_string(k) + "]", &op);
        ds.compute.push_back(op);
      }
    if (const json* a = dr.array("offloads", false))
      for (size_t k = 0; k < a->size() && err.ok(); k++) {
        Op op;
        read_op((*a)[k], dp + ".offloads[" + std::to_string(k) + "]", &op);
        ds.offloads.push_back(op);
      }
    if (const json* a = dr.array("reloads", false))
      for (size_t k = 0; k < a->size() && err.ok(); k++) {
        const std::string rp = dp + ".reloads[" + std::to_string(k) + "]";
        Reader rr((*a)[k], rp, &err);
        ReloadEntry e;
        if (const json* v = rr.get("op", true)) read_op(*v, rp + ".op", &e.reload);
        if (const json* v = rr.get("anchor", true)) read_op(*v, rp + ".anchor", &e.anchor);
        // One op, or a list of them.
        if (const json* v = rr.get("after", false)) {
          if (v->is_array()) {
            for (size_t x = 0; x < v->size() && err.ok(); x++)
              read_op((*v)[x], rp + ".after[" + std::to_string(x) + "]", &e.after.emplace_back());
          } else {
            read_op(*v, rp + ".after", &e.after.emplace_back());
          }
        }
        rr.finish();
        ds.reloads.push_back(e);
      }
    dr.finish();
    s->devices.push_back(std::move(ds));
  }
}

void read_model(const json& j, Status& err, ModelSpec* m) {
  Reader r(j, "planned_for.model", &err);
  r.string("name", &m->name, true);
  r.integer("num_layers", &m->num_layers, true);
  r.integer("hidden", &m->hidden, true);
  r.integer("ffn", &m->ffn, true);
  r.integer("heads", &m->heads, true);
  r.integer("kv_heads", &m->kv_heads, true);
  r.integer("seq_len", &m->seq_len, true);
  r.integer("vocab", &m->vocab, true);
  std::string mlp = "gelu";
  r.string("mlp", &mlp, true);
  if (mlp != "gelu" && mlp != "swiglu") r.fail(r.field("mlp"), "expected \"gelu\" or \"swiglu\", got \"" + mlp + "\"");
  m->mlp = mlp == "swiglu" ? Mlp::kSwiGlu : Mlp::kGelu;
  r.boolean("flash_attention", &m->flash_attention, true);
  r.integer("bytes_per_value", &m->bytes_per_value, true);
  r.integer("head_dim", &m->head_dim, false);
  r.finish();
  if (err.ok() && (m->num_layers < 1 || m->hidden < 1 || m->ffn < 1 || m->heads < 1 || m->kv_heads < 1 ||
                   m->seq_len < 1 || m->vocab < 1 || m->bytes_per_value < 1 || m->head_dim < 0))
    err = Status::Invalid(
        "planned_for.model: num_layers, hidden, ffn, heads, kv_heads, seq_len, vocab and "
        "bytes_per_value must be positive");
}

void read_planned_for(const json& j, Status& err, PlannedFor* pf) {
  Reader r(j, "planned_for", &err);
  PlanSpec& spec = pf->spec;
  if (const json* m = r.get("model", true)) read_model(*m, err, &pf->model);
  r.string("cluster", &pf->cluster, true);
  r.integer("tp", &spec.tp, true);
  r.integer("cp", &spec.cp, false);  // absent in files written before context parallelism: 1
  r.integer("dp", &spec.dp, true);
  r.boolean("sequence_parallel", &spec.sequence_parallel, true);
  r.boolean("distributed_optimizer", &spec.distributed_optimizer, true);
  std::string precision = precision_name(spec.precision);
  r.string("precision", &precision, false);
  r.boolean("tp_comm_overlap", &spec.tp_comm_overlap, false);
  r.integer("microbatch_size", &spec.microbatch_size, true);
  r.integer("num_microbatches", &spec.num_microbatches, true);
  r.integer("global_batch", &pf->global_batch, true);
  r.integer("mem_budget_bytes", &spec.mem_budget_bytes, true);
  r.finish();
  if (!err.ok()) return;
  Result<Precision> parsed = parse_precision(precision);
  if (!parsed.ok()) {
    err = Status::Invalid("planned_for.precision: " + parsed.status.message);
    return;
  }
  spec.precision = parsed.value;
  if (spec.tp < 1 || spec.cp < 1 || spec.dp < 1 || spec.microbatch_size < 1 || spec.num_microbatches < 1 ||
      spec.mem_budget_bytes < 1)
    err = Status::Invalid(
        "planned_for: tp, cp, dp, microbatch_size, num_microbatches and mem_budget_bytes must be positive");
  else if (pf->global_batch != int64_t{spec.num_microbatches} * spec.microbatch_size * spec.dp)
    err = Status::Invalid("planned_for.global_batch: " + std::to_string(pf->global_batch) +
                          " is not num_microbatches × microbatch_size × dp = " +
                          std::to_string(int64_t{spec.num_microbatches} * spec.microbatch_size * spec.dp));
}

nlohmann::ordered_json planned_for_json(const PlannedFor& pf) {
  const ModelSpec& m = pf.model;
  return {{"model",
           {{"name", m.name},
            {"num_layers", m.num_layers},
            {"hidden", m.hidden},
            {"ffn", m.ffn},
            {"heads", m.heads},
            {"kv_heads", m.kv_heads},
            {"seq_len", m.seq_len},
            {"vocab", m.vocab},
            {"mlp", m.mlp == Mlp::kSwiGlu ? "swiglu" : "gelu"},
            {"flash_attention", m.flash_attention},
            {"bytes_per_value", m.bytes_per_value},
            {"head_dim", m.head_dim}}},
          {"cluster", pf.cluster},
          {"tp", pf.spec.tp},
          {"cp", pf.spec.cp},
          {"dp", pf.spec.dp},
          {"sequence_parallel", pf.spec.sequence_parallel},
          {"distributed_optimizer", pf.spec.distributed_optimizer},
          {"precision", precision_name(pf.spec.precision)},
          {"tp_comm_overlap", pf.spec.tp_comm_overlap},
          {"microbatch_size", pf.spec.microbatch_size},
          {"num_microbatches", pf.spec.num_microbatches},
          {"global_batch", pf.global_batch},
          {"mem_budget_bytes", pf.spec.mem_budget_bytes}};
}

// A problem held must be the one the schedule runs on, not a base to re-cut.
Status check_problem_matches(const Problem& p, const Schedule& s) {
  auto differs = [](const std::string& what, int64_t in_problem, int64_t in_schedule) {
    return Status::Invalid("problem." + what + " is " + std::to_string(in_problem) + " but the schedule's is " +
                           std::to_string(in_schedule) + ": a plan file holds the problem its schedule runs on");
  };
  if (p.placement != s.placement)
    return Status::Invalid("problem.placement is " + std::string(placement_name(p.placement)) +
                           " but the schedule's is " + placement_name(s.placement) +
                           ": a plan file holds the problem its schedule runs on");
  if (p.chunks_per_device != s.chunks_per_device)
    return differs("chunks_per_device", p.chunks_per_device, s.chunks_per_device);
  if (p.num_devices != static_cast<int>(s.devices.size()))
    return differs("num_devices", p.num_devices, static_cast<int64_t>(s.devices.size()));
  if (!s.items_per_stage.empty() && layers_match(p) && items_per_stage(p) != s.items_per_stage)
    return Status::Invalid("problem.stages: its cut of the layers is not the schedule's items_per_stage");
  return Status::Ok();
}

}  // namespace

const char* optpipe_version() { return OPTPIPE_VERSION; }

Result<PlanFile> plan_file_from_json(const std::string& text) {
  using R = Result<PlanFile>;
  Result<json> parsed = parse(text, "schedule");
  if (!parsed.ok()) return R::Error(parsed.status);
  Status err;
  PlanFile f;
  Reader r(parsed.value, "", &err);
  std::string format = kScheduleFormat;
  r.string("format", &format, false);
  if (format == kScheduleFormatV1)
    f.format_version = 1;
  else if (format != kScheduleFormat)
    r.fail("format", "expected \"" + std::string(kScheduleFormat) + "\" (or \"" + kScheduleFormatV1 + "\"), got \"" +
                         format + "\"");
  read_schedule_fields(r, err, &f.schedule);
  if (f.format_version >= 2) {
    r.string("optpipe_version", &f.optpipe_version, false);
    r.string("command_line", &f.command_line, false);
    if (const json* pj = r.get("problem", false); pj && err.ok()) {
      Result<Problem> p = read_problem(*pj);
      if (!p.ok()) err = Status::Invalid("problem." + p.status.message);
      if (err.ok()) err = check_problem_matches(p.value, f.schedule);
      if (err.ok()) f.problem = std::move(p.value);
    }
    if (const json* pf = r.get("planned_for", false); pf && err.ok())
      read_planned_for(*pf, err, &f.planned_for.emplace());
  }
  r.finish();
  if (!err.ok()) return R::Error(err);
  return R::Of(std::move(f));
}

std::string plan_file_to_json(const PlanFile& f) {
  const Schedule& s = f.schedule;
  nlohmann::ordered_json j;  // in this order: format and provenance, the schedule, the problem
  j["format"] = kScheduleFormat;
  j["optpipe_version"] = f.optpipe_version.empty() ? optpipe_version() : f.optpipe_version;
  if (!f.command_line.empty()) j["command_line"] = f.command_line;
  if (f.planned_for) j["planned_for"] = planned_for_json(*f.planned_for);
  j["placement"] = placement_name(s.placement);
  j["chunks_per_device"] = s.chunks_per_device;
  if (!s.items_per_stage.empty()) j["items_per_stage"] = s.items_per_stage;
  j["devices"] = json::array();
  for (const DeviceSchedule& ds : s.devices) {
    nlohmann::ordered_json d;
    d["compute"] = json::array();
    for (const Op& op : ds.compute) d["compute"].push_back(op_name(op));
    d["offloads"] = json::array();
    for (const Op& op : ds.offloads) d["offloads"].push_back(op_name(op));
    d["reloads"] = json::array();
    for (const ReloadEntry& e : ds.reloads) {
      nlohmann::ordered_json r = {{"op", op_name(e.reload)}, {"anchor", op_name(e.anchor)}};
      if (e.after.size() == 1) r["after"] = op_name(e.after[0]);
      if (e.after.size() > 1)
        for (const Op& x : e.after) r["after"].push_back(op_name(x));
      d["reloads"].push_back(std::move(r));
    }
    j["devices"].push_back(std::move(d));
  }
  if (f.problem) j["problem"] = nlohmann::ordered_json::parse(problem_to_json(*f.problem));
  return j.dump(1) + "\n";
}

Result<Problem> plan_problem(const PlanFile& f, const Problem* given, const std::string& given_name) {
  using R = Result<Problem>;
  if (!f.problem && !given)
    return R::Error(
        Status::Invalid(std::string("the plan file holds no problem (") +
                        (f.format_version == 1 ? "format optpipe.schedule/1, written before plan files held one"
                                               : "written without one") +
                        "): pass the problem it was planned for (--problem/-p PROBLEM.json)"));
  if (!f.problem) return problem_for(*given, f.schedule);
  Result<Problem> own = problem_for(*f.problem, f.schedule);
  if (!own.ok() || !given) return own;
  Result<Problem> re = problem_for(*given, f.schedule);
  if (!re.ok())
    return R::Error(Status::Invalid(given_name + " is not the problem the plan file holds (" + re.status.message +
                                    "); leave it out to use the plan's own"));
  const json patch = json::diff(json::parse(problem_to_json(re.value)), json::parse(problem_to_json(own.value)));
  if (!patch.empty())
    return R::Error(Status::Invalid(given_name + " is not the problem the plan file holds: they differ at " +
                                    patch[0].value("path", "/") +
                                    " (as the schedule runs it); leave it out to use the plan's own"));
  return own;
}

Result<Schedule> schedule_from_json(const std::string& text) {
  Result<PlanFile> f = plan_file_from_json(text);
  if (!f.ok()) return Result<Schedule>::Error(f.status);
  return Result<Schedule>::Of(std::move(f.value.schedule));
}

std::string schedule_to_json(const Schedule& s) { return plan_file_to_json({.schedule = s}); }

}  // namespace optpipe
