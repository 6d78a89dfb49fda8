#include "optpipe/status.h"

namespace optpipe {

void fail_invariant(const char* file, int line, const char* cond, const std::string& what) {
  throw InvariantError(std::string(file) + ":" + std::to_string(line) + ": invariant failed: " + cond +
                       (what.empty() ? "" : " — " + what));
}

}  // namespace optpipe
