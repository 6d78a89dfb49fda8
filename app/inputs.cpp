#include "inputs.h"

#include <unistd.h>
#include <climits>
#include <cstdio>

#include "optpipe/files.h"
#include "optpipe/json_io.h"

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

Result<FamilySchedule> load_schedule(const std::string& problem_path, const std::string& schedule_path,
                                     const std::string& family, int chunks) {
  using R = Result<FamilySchedule>;
  Result<Problem> p = load_problem(problem_path);
  if (!p.ok()) return R::Error(p.status);
  OPTPIPE_CHECK(schedule_path.empty() != family.empty(), "the caller checks that one source is given");
  if (!family.empty()) {
    const Family* f = find_family(family);
    if (!f) return R::Error(Status::Invalid("unknown family \"" + family + "\" (see: optpipe families)"));
    return build_family(*f, p.value, chunks);
  }
  Result<std::string> text = read_text_file(schedule_path);
  if (!text.ok()) return R::Error(text.status);
  Result<Schedule> s = schedule_from_json(text.value);
  if (!s.ok()) return R::Error(Status::Invalid(schedule_path + ": " + s.status.message));
  Result<Problem> re = problem_for(p.value, s.value);
  if (!re.ok()) return R::Error(re.status);
  FamilySchedule out{std::move(re.value), std::move(s.value)};
  return R::Of(std::move(out));
}

}  // namespace optpipe
