// timeouts.h — private to the engine: how its messages write a timeout, so that a rank's waits
// on its own threads and its waits on peers read alike.
#pragma once

#include <cstdio>
#include <string>

namespace optpipe::runtime {

// "60 s"
inline std::string seconds(double s) {
  char buf[32];
  snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

}  // namespace optpipe::runtime
