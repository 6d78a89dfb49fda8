// cli.h — how both command-line programs parse and dispatch: one place that turns a CLI11 parse
// error into an exit code and an exception escaping a command into an internal error.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <functional>

#include "inputs.h"

namespace optpipe {

// For unsigned options: CLI11 would wrap "-1" around to 2^64 − 1.
inline const CLI::Validator kNoMinus(
    [](std::string& text) {
      return text.find('-') == std::string::npos ? std::string() : "must not be negative, got " + text;
    },
    "UINT");

// Parses argv into `app` (help and version exit 0, usage errors 2), then runs `dispatch`, whose
// result is the exit code. An exception out of a command is a bug: "<tool>: internal error: …"
// and exit 70.
inline int parse_and_run(CLI::App& app, int argc, char** argv, const char* tool, const std::function<int()>& dispatch) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  try {
    return dispatch();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", tool, e.what());
    return kExitInternal;
  }
}

}  // namespace optpipe
