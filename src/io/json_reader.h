// The strict JSON reader every optpipe format shares (private to src/io): field by field, the
// first error remembered with its path ("stages[3].t_b_us: expected a number"), unknown fields
// refused, input that nests too deep refused before parsing.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <set>
#include <string>

#include "optpipe/problem.h"
#include "optpipe/status.h"

namespace optpipe::json_read {

using json = nlohmann::json;

inline const char* type_name(const json& j) { return j.type_name(); }

// A value as an error message quotes it: scalars as written, at most ~80 characters; containers
// by their type only (never serialized: input may nest deeply or run to megabytes).
std::string brief(const json& v);

// A JSON integer (or an integral float) that fits int64; false for anything else.
bool to_int64(const json& v, int64_t* out);

// Reads one JSON object field by field, remembering the first error with its path.
class Reader {
 public:
  Reader(const json& j, std::string path, Status* error) : j_(j), path_(std::move(path)), error_(error) {
    if (error_->ok() && !j_.is_object())
      fail(path_.empty() ? "top level" : path_, std::string("expected an object, got ") + type_name(j_));
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

  void boolean(const char* key, bool* out, bool required) {
    const json* v = get(key, required);
    if (!v) return;
    if (!v->is_boolean()) return fail(field(key), "expected true or false, got " + brief(*v));
    *out = v->get<bool>();
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

// `text` parsed; `what` names the input in the error ("problem", "schedule", "profile").
Result<json> parse(const std::string& text, const char* what);

// The optional "host_link" object of a problem or a profile.
void read_host_link(Reader& r, HostLinkSpec* link, Status* err);
// A stage's fields a profile measures (act_b_bytes follows from them), read and written. In a
// problem the times and act_f/act_w are required; in a profile every field is optional.
void read_measured_stage(Reader& sr, StageSpec* st, bool required);
json measured_stage_json(const StageSpec& st);
json host_link_json(const HostLinkSpec& link);
void check_format(Reader& r, const char* expected);
// A problem from its parsed JSON (problem_from_json without the text), checked.
Result<Problem> read_problem(const json& j);
void read_placement(Reader& r, Placement* placement, int* chunks_per_device);

}  // namespace optpipe::json_read
