#include "io/json_reader.h"

#include <cmath>

namespace optpipe::json_read {

namespace {

// Nothing optpipe reads nests deeper than a few levels; deeper input is refused before parsing,
// so no recursive walk over it (copy, destruction, messages) can exhaust the stack.
constexpr int kMaxJsonDepth = 64;

bool nests_too_deep(const std::string& text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
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

}  // namespace

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

Result<json> parse(const std::string& text, const char* what) {
  if (nests_too_deep(text))
    return Result<json>::Error(Status::Invalid(std::string("malformed JSON in ") + what + ": nested deeper than " +
                                               std::to_string(kMaxJsonDepth) + " levels"));
  try {
    return Result<json>::Of(json::parse(text));
  } catch (const json::exception& e) {  // parse errors and number overflow
    std::string why = e.what();         // it quotes the token read last, which may be long
    if (why.size() > 240) why = why.substr(0, 240) + "…";
    return Result<json>::Error(Status::Invalid(std::string("malformed JSON in ") + what + ": " + why));
  }
}

void read_host_link(Reader& r, HostLinkSpec* link, Status* err) {
  const json* h = r.get("host_link", false);
  if (!h) return;
  Reader hr(*h, "host_link", err);
  hr.number("d2h_gb_per_s", &link->d2h_gb_per_s, false);
  hr.number("h2d_gb_per_s", &link->h2d_gb_per_s, false);
  hr.number("latency_us", &link->latency_us, false);
  hr.finish();
}

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
  return {{"t_f_us", st.t_f_us},
          {"t_b_us", st.t_b_us},
          {"t_w_us", st.t_w_us},
          {"t_r_us", st.t_r_us},
          {"act_f_bytes", st.act_f_bytes},
          {"act_w_bytes", st.act_w_bytes},
          {"act_input_bytes", st.act_input_bytes}};
}

json host_link_json(const HostLinkSpec& link) {
  return {{"d2h_gb_per_s", link.d2h_gb_per_s}, {"h2d_gb_per_s", link.h2d_gb_per_s}, {"latency_us", link.latency_us}};
}

void check_format(Reader& r, const char* expected) {
  std::string format = expected;
  r.string("format", &format, false);
  if (format != expected)
    r.fail(r.field("format"), "expected \"" + std::string(expected) + "\", got \"" + format + "\"");
}

void read_placement(Reader& r, Placement* placement, int* chunks_per_device) {
  std::string name = placement_name(*placement);
  r.string("placement", &name, false);
  if (!parse_placement(name, placement))
    r.fail("placement", "expected \"linear\", \"interleaved\", \"vshape\" or \"wave\", got \"" + name + "\"");
  r.integer("chunks_per_device", chunks_per_device, false);
}

}  // namespace optpipe::json_read
