// optpipe families: the schedule families, as a table or JSON.
#include <cstdio>

#include "commands.h"
#include "inputs.h"
#include "optpipe/results_json.h"
#include "tables.h"

namespace optpipe {

Command add_families_command(CLI::App& app) {
  auto as_json = std::make_shared<bool>(false);
  CLI::App* c = app.add_subcommand("families", "list the schedule families");
  add_json_flag(c, as_json.get());
  return {c, [as_json] {
            if (*as_json) {
              print_json({{"families", families_json()}});
              return kExitOk;
            }
            std::vector<std::vector<std::string>> rows = {{"family", "placement", "description"}};
            for (const Family& f : families()) rows.push_back({f.name, placement_label(f), f.description});
            std::fputs(aligned_table(rows).c_str(), stdout);
            return kExitOk;
          }};
}

}  // namespace optpipe
