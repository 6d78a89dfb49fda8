#include <algorithm>

#include "optpipe/export.h"

namespace optpipe {

namespace {

// torch's _PipelineScheduleRuntime keeps the last stage's losses in the order its forwards run
// and reads them back by microbatch index: the last stage's k-th forward must be microbatch k.
// Microbatches are interchangeable, so they are renumbered that way on every rank; by CSV id.
std::vector<int> loss_order(const Schedule& s) {
  int last_stage = -1, num_microbatches = 0;
  for (const DeviceSchedule& ds : s.devices)
    for (const Op& op : ds.compute) {
      last_stage = std::max(last_stage, op.stage);
      num_microbatches = std::max(num_microbatches, op.microbatch + 1);
    }
  std::vector<int> id(num_microbatches, -1);
  int next = 0;
  for (const DeviceSchedule& ds : s.devices)
    for (const Op& op : ds.compute)
      if (op.kind == OpKind::kF && op.stage == last_stage && id[op.microbatch] < 0) id[op.microbatch] = next++;
  for (int& i : id)
    if (i < 0) i = next++;  // not run on the last stage (not a valid schedule; kept as it is)
  return id;
}

}  // namespace

Result<CsvExport> pytorch_csv(const Schedule& s, bool drop_memory_ops) {
  CsvExport out;
  const std::vector<int> id = loss_order(s);
  int renumbered = 0;
  for (size_t i = 0; i < id.size(); i++) renumbered += id[i] != static_cast<int>(i);
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
      row += std::to_string(op.stage) + action + std::to_string(id[op.microbatch]);
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
  if (renumbered > 0) {
    std::string map;
    for (size_t i = 0; i < id.size(); i++)
      if (id[i] != static_cast<int>(i))
        map += (map.empty() ? "" : ", ") + std::to_string(i) + "→" + std::to_string(id[i]);
    out.notes.push_back(
        "microbatches renumbered on every rank so that the last stage's k-th forward is microbatch k "
        "(torch's runtime reads each loss back in that order): " +
        map);
  }
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
