#include "optpipe/export.h"

namespace optpipe {

Result<CsvExport> pytorch_csv(const Schedule& s, bool drop_memory_ops) {
  CsvExport out;
  int recomputes = 0, offloads = 0;
  std::string named;  // the first three left out
  auto drop = [&](const Op& op) {
    if (recomputes + offloads <= 3) named += (named.empty() ? "" : ", ") + op_name(op);
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
    for (const Op& op : ds.offloads) {
      offloads++;
      drop(op);
    }
    out.csv += row + "\n";
  }
  const int dropped = recomputes + offloads;
  if (dropped > 0 && !drop_memory_ops)
    return Result<CsvExport>::Error(Status::Invalid(
        "PyTorch's CSV cannot express the schedule's " + std::to_string(dropped) + " recompute/offload op(s) (" +
        named + (dropped > 3 ? " and " + std::to_string(dropped - 3) + " more" : "") +
        "), and without them it may not fit its budget"));
  const std::string unfit = "; without them the schedule may not fit its budget";
  if (recomputes > 0)
    out.notes.push_back(std::to_string(recomputes) +
                        " recompute op(s) left out: PyTorch's CSV has no recompute action (use activation "
                        "checkpointing on those stages, or optpipe's own JSON)" +
                        unfit);
  if (offloads > 0)
    out.notes.push_back(std::to_string(offloads) +
                        " offload/reload pair(s) left out: PyTorch's CSV has no offload action (keep optpipe's "
                        "own JSON for them)" +
                        unfit);
  return Result<CsvExport>::Of(std::move(out));
}

}  // namespace optpipe
