// Schedules as JSON ("optpipe.schedule/1"): one op name per entry.
#include "io/json_reader.h"
#include "optpipe/json_io.h"

namespace optpipe {

using namespace json_read;

Result<Schedule> schedule_from_json(const std::string& text) {
  Result<json> parsed = parse(text, "schedule");
  if (!parsed.ok()) return Result<Schedule>::Error(parsed.status);
  Status err;
  Schedule s;
  Reader r(parsed.value, "", &err);
  check_format(r, kScheduleFormat);
  auto read_op = [&](const json& v, const std::string& where, Op* out) {
    if (!err.ok()) return;
    if (!v.is_string() || !parse_op_name(v.get<std::string>(), out))
      err = Status::Invalid(
          where + ": expected an op such as \"F3 s1\" (kinds F, B, W, BW, R, OFFLOAD, RELOAD, WAIT), got " + brief(v));
  };
  read_placement(r, &s.placement, &s.chunks_per_device);
  if (const json* items = r.array("items_per_stage", false))
    for (size_t k = 0; k < items->size() && err.ok(); k++) {
      if (!(*items)[k].is_number_integer() || (*items)[k].get<int64_t>() < 1 || (*items)[k].get<int64_t>() > 100000)
        err = Status::Invalid("items_per_stage[" + std::to_string(k) + "]: expected an integer from 1 to 100000, got " +
                              brief((*items)[k]));
      else
        s.items_per_stage.push_back((*items)[k].get<int>());
    }
  if (const json* devices = r.array("devices", true)) {
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
      s.devices.push_back(std::move(ds));
    }
  }
  r.finish();
  if (!err.ok()) return Result<Schedule>::Error(err);
  return Result<Schedule>::Of(std::move(s));
}

std::string schedule_to_json(const Schedule& s) {
  json j;
  j["format"] = kScheduleFormat;
  j["placement"] = placement_name(s.placement);
  j["chunks_per_device"] = s.chunks_per_device;
  if (!s.items_per_stage.empty()) j["items_per_stage"] = s.items_per_stage;
  j["devices"] = json::array();
  for (const DeviceSchedule& ds : s.devices) {
    json d;
    d["compute"] = json::array();
    for (const Op& op : ds.compute) d["compute"].push_back(op_name(op));
    d["offloads"] = json::array();
    for (const Op& op : ds.offloads) d["offloads"].push_back(op_name(op));
    d["reloads"] = json::array();
    for (const ReloadEntry& e : ds.reloads) {
      json r = {{"op", op_name(e.reload)}, {"anchor", op_name(e.anchor)}};
      if (e.after.size() == 1) r["after"] = op_name(e.after[0]);
      if (e.after.size() > 1)
        for (const Op& x : e.after) r["after"].push_back(op_name(x));
      d["reloads"].push_back(std::move(r));
    }
    j["devices"].push_back(std::move(d));
  }
  return j.dump(1) + "\n";
}

}  // namespace optpipe
