// optpipe problem: the built-in problem as JSON, a starting point to edit.
#include "commands.h"
#include "inputs.h"
#include "optpipe/json_io.h"

namespace optpipe {

Command add_problem_command(CLI::App& app) {
  auto out_path = std::make_shared<std::string>();
  CLI::App* c = app.add_subcommand("problem", "write the built-in problem as JSON (a starting point to edit)");
  c->add_option("--out,-o", *out_path, "output file (default: stdout)");
  return {c, [out_path] {
            Status st = emit(*out_path, problem_to_json(default_problem()));
            return st.ok() ? kExitOk : fail(st);
          }};
}

}  // namespace optpipe
