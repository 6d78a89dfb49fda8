#include "optpipe/export.h"

namespace optpipe {

CsvExport pytorch_csv(const Schedule& s) {
  CsvExport out;
  int recomputes = 0, offloads = 0;
  auto drop = [&](const Op& op) {
    if (out.dropped.size() < 3) out.dropped.push_back(op_name(op));
  };
  for (const DeviceSchedule& ds : s.devices) {
    std::string row;
    for (const Op& op : ds.compute) {
      const char* action = nullptr;
      switch (op.kind) {
        case OpKind::kF: action = "F"; break;
        case OpKind::kB: action = "I"; break;  // torch ≥ 2.6: I = backward for the input
        case OpKind::kW: action = "W"; break;
        case OpKind::kBW: action = "B"; break;  // torch ≥ 2.6: B = full backward
        case OpKind::kWait: continue;           // goes with its offload, left out below
        default:
          recomputes++;
          drop(op);
          continue;
      }
      if (!row.empty()) row += ",";
      row += std::to_string(op.stage) + action + std::to_string(op.microbatch);
    }
    offloads += static_cast<int>(ds.offloads.size());
    for (const Op& op : ds.offloads) drop(op);
    out.csv += row + "\n";
  }
  out.memory_ops_dropped = recomputes + offloads;
  if (recomputes > 0)
    out.notes.push_back(std::to_string(recomputes) +
                        " recompute op(s) left out: PyTorch's CSV has no recompute action (use activation "
                        "checkpointing on those stages, or optpipe's own JSON)");
  if (offloads > 0)
    out.notes.push_back(std::to_string(offloads) +
                        " offload/reload pair(s) left out: PyTorch's CSV has no offload action (keep optpipe's "
                        "own JSON for them)");
  return out;
}

}  // namespace optpipe
