#include "optpipe/status.h"

namespace optpipe {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidInput: return "invalid input";
    case StatusCode::kInfeasible: return "infeasible";
    case StatusCode::kIoError: return "I/O error";
    case StatusCode::kTimeLimit: return "time limit";
    case StatusCode::kInternal: return "internal error";
  }
  return "?";
}

void fail_invariant(const char* file, int line, const char* cond, const std::string& what) {
  throw InvariantError(std::string(file) + ":" + std::to_string(line) + ": invariant failed: " + cond +
                       (what.empty() ? "" : " — " + what));
}

}  // namespace optpipe
