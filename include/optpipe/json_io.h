// json_io.h — problems, schedules and profiles as JSON text, read strictly (files: files.h).
//
// Reading rejects what it does not understand: malformed JSON, unknown fields, wrong types,
// missing required fields. Every error names the field ("stages[3].t_b_us: expected a number").
// A problem read here is also passed through check_problem().
//
//   Result<Problem> p = problem_from_json(text);
//   std::string out = schedule_to_json(schedule);  // {"format": "optpipe.schedule/2", ...}
#pragma once

#include <string>

#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "optpipe/status.h"

namespace optpipe {

constexpr const char* kProblemFormat = "optpipe.problem/1";
constexpr const char* kScheduleFormat = "optpipe.schedule/2";  // plan_file.h; /1 still reads
constexpr const char* kProfileFormat = "optpipe.profile/1";

Result<Problem> problem_from_json(const std::string& text);
std::string problem_to_json(const Problem& p);  // pretty-printed, every field

// The schedule of a plan file (plan_file.h), and a plan file holding only a schedule.
Result<Schedule> schedule_from_json(const std::string& text);
std::string schedule_to_json(const Schedule& s);  // one op name per entry, e.g. "BW3 s1"

// Overrides stage times and bytes (and optionally t_comm_us, devices' static bytes and the host
// link) with measured ones. Format "optpipe.profile/1":
//   {"stages": [{"t_f_us", "t_b_us", "t_w_us", "t_r_us", "act_f_bytes", "act_w_bytes",
//                "act_input_bytes"}, ...], "t_comm_us": ..., "static_bytes": [...],
//    "host_link": {"d2h_gb_per_s", "h2d_gb_per_s", "latency_us"}}
// Every field is optional; "stages" and "static_bytes", when present, have one entry per stage
// and per device. act_b_bytes follows as −act_f_bytes − act_w_bytes. The result is checked.
Status apply_profile(const std::string& profile_json, Problem* p);
// The measured fields of `p` in that format (what `optpipe profile` writes).
std::string profile_to_json(const Problem& p);

}  // namespace optpipe
