#include "optpipe/json_io.h"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace optpipe {
namespace {

using json = nlohmann::json;

const char* type_name(const json& j) { return j.type_name(); }

// A value as an error message quotes it: scalars as written, at most ~80 characters; containers
// by their type only (never serialized: input may nest deeply or run to megabytes).
std::string brief(const json& v) {
  constexpr size_t kMax = 80;
  if (v.is_object() || v.is_array()) return std::string("an ") + type_name(v);
  if (v.is_string()) {
    const std::string& text = v.get_ref<const std::string&>();
    if (text.size() <= kMax) return json(text).dump(-1, ' ', false, json::error_handler_t::replace);
    return json(text.substr(0, kMax)).dump(-1, ' ', false, json::error_handler_t::replace) + "… (" +
           std::to_string(text.size()) + " bytes)";
  }
  return v.dump();
}

// A JSON integer (or an integral float) that fits int64; false for anything else.
bool to_int64(const json& v, int64_t* out) {
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return false;
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18) {
      *out = static_cast<int64_t>(d);
      return true;
    }
  }
  return false;
}

// Reads one JSON object field by field, remembering the first error with its path.
class Reader {
 public:
  Reader(const json& j, std::string path, Status* error) : j_(j), path_(std::move(path)), error_(error) {
    if (error_->ok() && !j_.is_object()) fail(path_.empty() ? "top level" : path_, std::string("expected an object, got ") + type_name(j_));
  }

  bool has(const char* key) const { return j_.is_object() && j_.contains(key); }

  std::string field(const char* key) const { return path_.empty() ? key : path_ + "." + key; }

  const json* get(const char* key, bool required) {
    seen_.insert(key);
    if (!error_->ok() || !j_.is_object()) return nullptr;
    auto it = j_.find(key);
    if (it == j_.end()) {
      if (required) fail(field(key), "is required");
      return nullptr;
    }
    return &*it;
  }

  void number(const char* key, double* out, bool required) {
    const json* v = get(key, required);
    if (!v) return;
    if (!v->is_number()) return fail(field(key), std::string("expected a number, got ") + type_name(*v));
    *out = v->get<double>();
  }

  void integer(const char* key, int64_t* out, bool required) {
    const json* v = get(key, required);
    if (!v || to_int64(*v, out)) return;
    if (v->is_number_unsigned()) return fail(field(key), "is out of range, got " + brief(*v));
    fail(field(key), std::string("expected an integer, got ") + (v->is_number() ? brief(*v) : type_name(*v)));
  }

  void integer(const char* key, int* out, bool required) {
    int64_t v = *out;
    integer(key, &v, required);
    if (v < -2147483647 || v > 2147483647) return fail(field(key), "is out of range");
    *out = static_cast<int>(v);
  }

  void string(const char* key, std::string* out, bool required) {
    const json* v = get(key, required);
    if (!v) return;
    if (!v->is_string()) return fail(field(key), std::string("expected a string, got ") + type_name(*v));
    *out = v->get<std::string>();
  }

  const json* array(const char* key, bool required) {
    const json* v = get(key, required);
    if (!v) return nullptr;
    if (!v->is_array()) {
      fail(field(key), std::string("expected an array, got ") + type_name(*v));
      return nullptr;
    }
    return v;
  }

  // Call after reading every known field: anything left is a typo or a field from elsewhere.
  void finish() {
    if (!error_->ok() || !j_.is_object()) return;
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!seen_.count(it.key())) return fail(field(it.key().c_str()), "unknown field");
  }

  void fail(const std::string& where, const std::string& what) {
    if (error_->ok()) *error_ = Status::Invalid(where + ": " + what);
  }

 private:
  const json& j_;
  std::string path_;
  Status* error_;
  std::set<std::string> seen_;
};

// Nothing optpipe reads nests deeper than a few levels; deeper input is refused before parsing,
// so no recursive walk over it (copy, destruction, messages) can exhaust the stack.
constexpr int kMaxJsonDepth = 64;

bool nests_too_deep(const std::string& text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return true;
    } else if (c == ']' || c == '}') {
      depth--;
    }
  }
  return false;
}

Result<json> parse(const std::string& text, const char* what) {
  if (nests_too_deep(text))
    return Result<json>::Error(Status::Invalid(std::string("malformed JSON in ") + what + ": nested deeper than " +
                                               std::to_string(kMaxJsonDepth) + " levels"));
  try {
    return Result<json>::Of(json::parse(text));
  } catch (const json::exception& e) {  // parse errors and number overflow
    std::string why = e.what();  // it quotes the token read last, which may be long
    if (why.size() > 240) why = why.substr(0, 240) + "…";
    return Result<json>::Error(Status::Invalid(std::string("malformed JSON in ") + what + ": " + why));
  }
}

// The optional "host_link" object of a problem or a profile.
void read_host_link(Reader& r, HostLinkSpec* link, Status* err) {
  const json* h = r.get("host_link", false);
  if (!h) return;
  Reader hr(*h, "host_link", err);
  hr.number("d2h_gb_per_s", &link->d2h_gb_per_s, false);
  hr.number("h2d_gb_per_s", &link->h2d_gb_per_s, false);
  hr.number("latency_us", &link->latency_us, false);
  hr.finish();
}

// A stage's fields a profile measures (act_b_bytes follows from them), read and written. In a
// problem the times and act_f/act_w are required; in a profile every field is optional.
void read_measured_stage(Reader& sr, StageSpec* st, bool required) {
  sr.number("t_f_us", &st->t_f_us, required);
  sr.number("t_b_us", &st->t_b_us, required);
  sr.number("t_w_us", &st->t_w_us, required);
  sr.number("t_r_us", &st->t_r_us, false);
  sr.integer("act_f_bytes", &st->act_f_bytes, required);
  sr.integer("act_w_bytes", &st->act_w_bytes, required);
  sr.integer("act_input_bytes", &st->act_input_bytes, false);
}

json measured_stage_json(const StageSpec& st) {
  return {{"t_f_us", st.t_f_us},           {"t_b_us", st.t_b_us},       {"t_w_us", st.t_w_us},
          {"t_r_us", st.t_r_us},           {"act_f_bytes", st.act_f_bytes}, {"act_w_bytes", st.act_w_bytes},
          {"act_input_bytes", st.act_input_bytes}};
}

json host_link_json(const HostLinkSpec& link) {
  return {{"d2h_gb_per_s", link.d2h_gb_per_s}, {"h2d_gb_per_s", link.h2d_gb_per_s}, {"latency_us", link.latency_us}};
}

void check_format(Reader& r, const char* expected) {
  std::string format = expected;
  r.string("format", &format, false);
  if (format != expected) r.fail(r.field("format"), "expected \"" + std::string(expected) + "\", got \"" + format + "\"");
}

void read_placement(Reader& r, Placement* placement, int* chunks_per_device) {
  std::string name = placement_name(*placement);
  r.string("placement", &name, false);
  if (!parse_placement(name, placement))
    r.fail("placement", "expected \"linear\", \"interleaved\" or \"vshape\", got \"" + name + "\"");
  r.integer("chunks_per_device", chunks_per_device, false);
}

}  // namespace

Result<Problem> problem_from_json(const std::string& text) {
  Result<json> parsed = parse(text, "problem");
  if (!parsed.ok()) return Result<Problem>::Error(parsed.status);
  Status err;
  Problem p;
  Reader r(parsed.value, "", &err);
  check_format(r, kProblemFormat);
  r.integer("num_devices", &p.num_devices, true);
  r.integer("num_microbatches", &p.num_microbatches, true);
  read_placement(r, &p.placement, &p.chunks_per_device);
  r.number("t_comm_us", &p.t_comm_us, false);
  if (const json* stages = r.array("stages", true)) {
    for (size_t i = 0; i < stages->size() && err.ok(); i++) {
      Reader sr((*stages)[i], "stages[" + std::to_string(i) + "]", &err);
      StageSpec st;
      st.t_r_us = std::numeric_limits<double>::quiet_NaN();  // absent: a recompute costs a forward
      read_measured_stage(sr, &st, true);
      if (std::isnan(st.t_r_us)) st.t_r_us = st.t_f_us;
      sr.integer("act_b_bytes", &st.act_b_bytes, true);
      sr.integer("ws_f_bytes", &st.ws_f_bytes, false);
      sr.integer("ws_b_bytes", &st.ws_b_bytes, false);
      sr.integer("ws_w_bytes", &st.ws_w_bytes, false);
      sr.finish();
      p.stages.push_back(st);
    }
  }
  if (const json* devices = r.array("devices", true)) {
    for (size_t i = 0; i < devices->size() && err.ok(); i++) {
      Reader dr((*devices)[i], "devices[" + std::to_string(i) + "]", &err);
      DeviceSpec dev;
      dev.host_link = static_cast<int>(i);
      dr.integer("static_bytes", &dev.static_bytes, true);
      dr.integer("mem_budget_bytes", &dev.mem_budget_bytes, true);
      dr.integer("host_link", &dev.host_link, false);
      dr.finish();
      p.devices.push_back(dev);
    }
  }
  read_host_link(r, &p.host_link, &err);
  r.finish();
  if (err.ok()) err = check_problem(p);
  if (!err.ok()) return Result<Problem>::Error(err);
  return Result<Problem>::Of(std::move(p));
}

std::string problem_to_json(const Problem& p) {
  json j;
  j["format"] = kProblemFormat;
  j["num_devices"] = p.num_devices;
  j["num_microbatches"] = p.num_microbatches;
  j["placement"] = placement_name(p.placement);
  j["chunks_per_device"] = p.chunks_per_device;
  j["t_comm_us"] = p.t_comm_us;
  j["stages"] = json::array();
  for (const StageSpec& st : p.stages) {
    json s = measured_stage_json(st);
    s["act_b_bytes"] = st.act_b_bytes;
    s["ws_f_bytes"] = st.ws_f_bytes;
    s["ws_b_bytes"] = st.ws_b_bytes;
    s["ws_w_bytes"] = st.ws_w_bytes;
    j["stages"].push_back(s);
  }
  j["devices"] = json::array();
  for (const DeviceSpec& d : p.devices)
    j["devices"].push_back(
        {{"static_bytes", d.static_bytes}, {"mem_budget_bytes", d.mem_budget_bytes}, {"host_link", d.host_link}});
  j["host_link"] = host_link_json(p.host_link);
  return j.dump(2) + "\n";
}

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
      err = Status::Invalid(where + ": expected an op such as \"F3 s1\" (kinds F, B, W, BW, R, OFFLOAD, RELOAD, WAIT), got " +
                            brief(v));
  };
  read_placement(r, &s.placement, &s.chunks_per_device);
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

Result<std::string> read_text_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return Result<std::string>::Error(Status::IoError("cannot read " + path + ": it is a directory"));
  std::ifstream in(path, std::ios::binary);
  if (!in) return Result<std::string>::Error(Status::IoError("cannot read " + path));
  std::stringstream ss;
  ss << in.rdbuf();
  return Result<std::string>::Of(ss.str());
}

Status write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out) return Status::IoError("cannot write " + path);
  out << text;
  out.close();
  if (!out) return Status::IoError("error while writing " + path);
  return Status::Ok();
}

}  // namespace optpipe
