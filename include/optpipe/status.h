// status.h — how optpipe reports results and failures.
//
// Bad input (a malformed problem, a schedule that breaks a rule, a budget nothing fits) comes
// back as data: a Status with a code and a message that names what is wrong. A broken internal
// invariant is a bug, not bad input: OPTPIPE_CHECK throws InvariantError with file and line.
// The library never calls exit().
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace optpipe {

// What happened. These are not exit codes: each program maps them in one place.
enum class StatusCode {
  kOk,
  kInvalidInput,  // the problem, schedule or an argument is malformed
  kInfeasible,    // well-formed, but no schedule satisfies the constraints (e.g. budget)
  kIoError,       // a file could not be read or written
  kTimeLimit,     // the time limit passed before there was an answer
  kInternal,      // a solver or library below reported an error that is not the input's fault
};

const char* status_code_name(StatusCode code);

struct [[nodiscard]] Status {
  StatusCode code = StatusCode::kOk;
  std::string message;

  bool ok() const { return code == StatusCode::kOk; }
  static Status Ok() { return {}; }
  static Status Invalid(std::string message) { return {StatusCode::kInvalidInput, std::move(message)}; }
  static Status Infeasible(std::string message) { return {StatusCode::kInfeasible, std::move(message)}; }
  static Status IoError(std::string message) { return {StatusCode::kIoError, std::move(message)}; }
  static Status TimeLimit(std::string message) { return {StatusCode::kTimeLimit, std::move(message)}; }
  static Status Internal(std::string message) { return {StatusCode::kInternal, std::move(message)}; }
};

// A value or the reason there is none.
template <class T>
struct [[nodiscard]] Result {
  Status status;
  T value{};

  bool ok() const { return status.ok(); }
  static Result Of(T v) { return {Status::Ok(), std::move(v)}; }
  static Result Error(Status s) { return {std::move(s), T{}}; }
};

class InvariantError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

[[noreturn]] void fail_invariant(const char* file, int line, const char* cond, const std::string& what);

}  // namespace optpipe

#define OPTPIPE_CHECK(cond, what)                                            \
  do {                                                                       \
    if (!(cond)) ::optpipe::fail_invariant(__FILE__, __LINE__, #cond, what); \
  } while (0)
