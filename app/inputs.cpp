#include "inputs.h"

#include <unistd.h>
#include <climits>
#include <cstdio>

#include "optpipe/files.h"
#include "optpipe/json_io.h"
#include "optpipe/plan_file.h"

namespace optpipe {

// The one place a status becomes an exit code.
int exit_code(const Status& s) {
  switch (s.code) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kInvalidInput: return kExitBadInput;
    case StatusCode::kIoError: return kExitBadInput;
    case StatusCode::kInfeasible: return kExitInfeasible;
    case StatusCode::kTimeLimit: return kExitTimeLimit;
    case StatusCode::kInternal: return kExitInternal;
  }
  return kExitInternal;
}

int fail(const Status& s, const char* tool) {
  std::fprintf(stderr, "%s: %s\n", tool, s.message.c_str());
  return exit_code(s);
}

int usage_error(const std::string& message, const char* tool) {
  std::fprintf(stderr, "%s: %s\n", tool, message.c_str());
  return kExitUsage;
}

Result<Problem> load_problem(const std::string& path) {
  if (path.empty()) return Result<Problem>::Of(default_problem());
  Result<std::string> text = read_text_file(path);
  if (!text.ok()) return Result<Problem>::Error(text.status);
  Result<Problem> p = problem_from_json(text.value);
  if (!p.ok()) p.status.message = path + ": " + p.status.message;
  return p;
}

std::string executable_path() {
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  return n > 0 ? std::string(self, n) : std::string();
}

Status emit(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return Status::Ok();
  }
  return write_text_file(path, text);
}

namespace {

std::string g_command_line;

}  // namespace

void set_command_line(int argc, char** argv) {
  g_command_line.clear();
  for (int i = 0; i < argc; i++) {
    std::string arg = i == 0 ? "optpipe" : argv[i];
    if (arg.empty() || arg.find_first_of(" \t'\"$\\") != std::string::npos) {
      std::string quoted = "'";
      for (char ch : arg) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
      arg = quoted + "'";
    }
    if (i) g_command_line += ' ';
    g_command_line += arg;
  }
}

const std::string& command_line() { return g_command_line; }

std::string plan_file_text(const Problem& p, const Schedule& s, const std::optional<PlannedFor>& planned_for) {
  return plan_file_to_json({.schedule = s, .problem = p, .planned_for = planned_for, .command_line = command_line()});
}

Result<FamilySchedule> load_schedule(const std::string& problem_path, const std::string& schedule_path,
                                     const std::string& family, int chunks, std::optional<PlannedFor>* planned_for) {
  using R = Result<FamilySchedule>;
  OPTPIPE_CHECK(schedule_path.empty() != family.empty(), "the caller checks that one source is given");
  if (!family.empty()) {
    Result<Problem> p = load_problem(problem_path);
    if (!p.ok()) return R::Error(p.status);
    const Family* f = find_family(family);
    if (!f) return R::Error(Status::Invalid("unknown family \"" + family + "\" (see: optpipe families)"));
    return build_family(*f, p.value, chunks);
  }
  Result<std::string> text = read_text_file(schedule_path);
  if (!text.ok()) return R::Error(text.status);
  Result<PlanFile> file = plan_file_from_json(text.value);
  if (!file.ok()) return R::Error(Status::Invalid(schedule_path + ": " + file.status.message));
  if (planned_for) *planned_for = file.value.planned_for;
  Result<Problem> given = problem_path.empty() ? Result<Problem>::Of({}) : load_problem(problem_path);
  if (!given.ok()) return R::Error(given.status);
  Result<Problem> re = plan_problem(file.value, problem_path.empty() ? nullptr : &given.value, problem_path);
  if (!re.ok()) return R::Error(Status::Invalid(schedule_path + ": " + re.status.message));
  FamilySchedule out{std::move(re.value), std::move(file.value.schedule)};
  return R::Of(std::move(out));
}

}  // namespace optpipe
