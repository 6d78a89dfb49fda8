// inputs.h — what the command-line tools share: exit codes, reading a problem and a schedule
// (from a file or a family), writing output.
#pragma once

#include <optional>
#include <string>

#include "optpipe/families.h"
#include "optpipe/plan_file.h"
#include "optpipe/problem.h"
#include "optpipe/status.h"

namespace optpipe {

// Exit codes: 0 ok, 1 bad input (or a file that cannot be read or written), 2 usage, 3
// infeasible, 4 time limit passed with no answer; 70 internal error (a bug).
constexpr int kExitOk = 0, kExitBadInput = 1, kExitUsage = 2, kExitInfeasible = 3, kExitTimeLimit = 4,
              kExitInternal = 70;

// The one place a library status becomes an exit code.
int exit_code(const Status& s);

// Prints "<tool>: <message>" on stderr and returns the status's exit code.
int fail(const Status& s, const char* tool = "optpipe");

// Options that do not go together: prints "<tool>: <message>" and returns kExitUsage.
int usage_error(const std::string& message, const char* tool = "optpipe");

// The problem in `path`, or the built-in problem when the path is empty.
Result<Problem> load_problem(const std::string& path);

// This program's own path (from /proc/self/exe), or "" when it cannot be read.
std::string executable_path();

// Writes to the file, or to stdout when the path is empty or "-".
Status emit(const std::string& path, const std::string& text);

// The command line as typed (shell-quoted), for the plan files a command writes; main sets it.
void set_command_line(int argc, char** argv);
const std::string& command_line();

// A plan file of the schedule with the problem it runs on, what it was planned for (if from a
// model) and this command line.
std::string plan_file_text(const Problem& p, const Schedule& s, const std::optional<PlannedFor>& planned_for = {});

// The schedule to work on: read from a plan file, or built by a family. A plan file's own problem
// is used; a problem path given beside it must be the same problem (else InvalidInput naming
// where they differ). A file without a problem (format 1) needs the path. A schedule made for
// another placement of the same model (a V-shape schedule, a linear problem) gets the problem
// re-cut. Exactly one of schedule_path and family is given (the caller checks: a usage error).
// planned_for, when given, gets what the file says it was planned for.
Result<FamilySchedule> load_schedule(const std::string& problem_path, const std::string& schedule_path,
                                     const std::string& family, int chunks,
                                     std::optional<PlannedFor>* planned_for = nullptr);

}  // namespace optpipe
