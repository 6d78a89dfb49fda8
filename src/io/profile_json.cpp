// Measured profiles ("optpipe.profile/1") over a problem, and the profile of a problem.
#include "io/json_reader.h"
#include "optpipe/json_io.h"

namespace optpipe {

using namespace json_read;

Status apply_profile(const std::string& profile_json, Problem* p) {
  Result<json> parsed = parse(profile_json, "profile");
  if (!parsed.ok()) return parsed.status;
  Status err;
  Problem q = *p;
  Reader r(parsed.value, "", &err);
  check_format(r, kProfileFormat);
  if (const json* stages = r.array("stages", false)) {
    if (err.ok() && stages->size() != q.stages.size())
      r.fail("stages", "must have one entry per stage (" + std::to_string(q.stages.size()) + "), got " +
                           std::to_string(stages->size()));
    for (size_t i = 0; i < stages->size() && err.ok(); i++) {
      Reader sr((*stages)[i], "stages[" + std::to_string(i) + "]", &err);
      StageSpec& st = q.stages[i];
      read_measured_stage(sr, &st, false);
      sr.finish();
      st.act_b_bytes = -st.act_f_bytes - st.act_w_bytes;
    }
  }
  r.number("t_comm_us", &q.t_comm_us, false);
  read_host_link(r, &q.host_link, &err);
  if (const json* statics = r.array("static_bytes", false)) {
    if (err.ok() && statics->size() != q.devices.size())
      r.fail("static_bytes", "must have one entry per device (" + std::to_string(q.devices.size()) + "), got " +
                                 std::to_string(statics->size()));
    for (size_t d = 0; d < statics->size() && err.ok(); d++) {
      if (!to_int64((*statics)[d], &q.devices[d].static_bytes))
        r.fail("static_bytes[" + std::to_string(d) + "]", "expected an integer in range, got " + brief((*statics)[d]));
    }
  }
  r.finish();
  if (err.ok()) err = check_problem(q);
  if (!err.ok()) return err;
  *p = std::move(q);
  return Status::Ok();
}

std::string profile_to_json(const Problem& p) {
  json j;
  j["format"] = kProfileFormat;
  j["stages"] = json::array();
  for (const StageSpec& st : p.stages) j["stages"].push_back(measured_stage_json(st));
  j["t_comm_us"] = p.t_comm_us;
  j["static_bytes"] = json::array();
  for (const DeviceSpec& d : p.devices) j["static_bytes"].push_back(d.static_bytes);
  j["host_link"] = host_link_json(p.host_link);
  return j.dump(2) + "\n";
}

}  // namespace optpipe
