#include <nlohmann/json.hpp>

#include "optpipe/export.h"

namespace optpipe {

std::string chrome_trace_json(const Problem& p, const Schedule& s, const Timeline& t) {
  using json = nlohmann::json;
  OPTPIPE_CHECK(!t.start_us.empty(), "chrome trace needs a timeline with op times");
  json events = json::array();
  const char* threads[3] = {"compute", "device→host", "host→device"};
  for (int d = 0; d < p.num_devices; d++) {
    events.push_back(
        {{"ph", "M"}, {"name", "process_name"}, {"pid", d}, {"args", {{"name", "device " + std::to_string(d)}}}});
    events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", d}, {"args", {{"sort_index", d}}}});
    for (int k = 0; k < 3; k++)
      events.push_back(
          {{"ph", "M"}, {"name", "thread_name"}, {"pid", d}, {"tid", k}, {"args", {{"name", threads[k]}}}});
    auto add = [&](const Op& op, int tid) {
      const int i = op_id(p, op);
      events.push_back(
          {{"ph", "X"},
           {"name", op_name(op)},
           {"cat", op_kind_name(op.kind)},
           {"pid", d},
           {"tid", tid},
           {"ts", t.start_us[i]},
           {"dur", t.end_us[i] - t.start_us[i]},
           {"args", {{"stage", op.stage}, {"microbatch", op.microbatch}, {"chunk", op.stage / p.num_devices}}}});
    };
    const DeviceSchedule& ds = s.devices[d];
    for (const Op& op : ds.compute) add(op, 0);
    for (const Op& op : ds.offloads) add(op, 1);
    for (const ReloadEntry& r : ds.reloads) add(r.reload, 2);
    if (d < static_cast<int>(t.memory.size()))
      for (const MemoryPoint& m : t.memory[d])
        events.push_back(
            {{"ph", "C"}, {"name", "memory"}, {"pid", d}, {"ts", m.time_us}, {"args", {{"bytes", m.bytes}}}});
  }
  return json({{"traceEvents", events}, {"displayTimeUnit", "ms"}}).dump() + "\n";
}

}  // namespace optpipe
