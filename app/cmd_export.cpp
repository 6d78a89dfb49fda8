// optpipe export: a schedule as optpipe JSON, a Chrome trace, PyTorch's CSV, an SVG chart, or its layout
// and partition as Megatron-LM's or torchtitan's settings.
#include <cstdio>

#include "commands.h"
#include "inputs.h"
#include "optpipe/export.h"
#include "optpipe/json_io.h"

namespace optpipe {

namespace {

struct ExportArgs {
  std::string problem_path, schedule_path, family, format = "json", out_path;
  std::string csv_path = "optpipe_schedule.csv";  // torchtitan: where the schedule CSV is
  int chunks = 0;
  bool drop_memory_ops = false;
};

int run_export(const ExportArgs& a) {
  if (a.schedule_path.empty() == a.family.empty()) return usage_error("give either --schedule FILE or --family NAME");
  std::optional<PlannedFor> planned_for;
  Result<FamilySchedule> fs = load_schedule(a.problem_path, a.schedule_path, a.family, a.chunks, &planned_for);
  if (!fs.ok()) return fail(fs.status);
  const std::string what = a.family.empty() ? a.schedule_path : a.family;
  Result<Timeline> t = checked_timeline(fs.value, what, {.op_times = true, .memory_curve = true});
  if (!t.ok()) return fail(t.status);
  const Problem& p = fs.value.problem;
  const Schedule& s = fs.value.schedule;
  std::string text;
  if (a.format == "json") {
    text = plan_file_text(p, s, planned_for);
  } else if (a.format == "trace") {
    text = chrome_trace_json(p, s, t.value);
  } else if (a.format == "svg") {
    text = schedule_svg(p, s, t.value, what);
  } else if (a.format == "megatron" || a.format == "torchtitan" || a.format == "torchtitan-py") {
    const PlannedFor* pf = planned_for ? &*planned_for : nullptr;
    Result<std::string> flags = a.format == "megatron"     ? megatron_flags(p, s, pf)
                                : a.format == "torchtitan" ? torchtitan_toml(p, a.csv_path, pf)
                                                           : torchtitan_config(p, a.csv_path, pf);
    if (!flags.ok()) return fail(Status::Invalid(what + ": " + flags.status.message));
    text = flags.value;
  } else {  // csv
    Result<CsvExport> csv = pytorch_csv(s, a.drop_memory_ops);
    if (!csv.ok())
      return fail(Status::Invalid(what + ": " + csv.status.message +
                                  ". Use optpipe's JSON, optimize with --no-offload --no-recompute, or pass "
                                  "--drop-memory-ops"));
    for (const std::string& note : csv.value.notes) std::fprintf(stderr, "optpipe: note: %s\n", note.c_str());
    text = csv.value.csv;
  }
  Status st = emit(a.out_path, text);
  return st.ok() ? kExitOk : fail(st);
}

}  // namespace

Command add_export_command(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  CLI::App* c = app.add_subcommand("export", "write a schedule as optpipe JSON, Chrome trace, PyTorch CSV or SVG");
  add_problem_option(c, &a->problem_path);
  c->add_option("--schedule,-s", a->schedule_path, "plan file (schedule JSON), e.g. optpipe_schedule.json");
  c->add_option("--family,-f", a->family, "or: the schedule of this family");
  c->add_option("--chunks", a->chunks, "chunks per device, for interleaved families")->check(CLI::Range(1, 64));
  c->add_option("--format", a->format,
                "json | trace (chrome://tracing, Perfetto) | csv (torch.distributed.pipelining) | svg | megatron "
                "(Megatron-LM's flags) | torchtitan (torchtitan 0.2's TOML) | torchtitan-py (torchtitan 0.3's Python "
                "configuration)")
      ->check(CLI::IsMember({"json", "trace", "csv", "svg", "megatron", "torchtitan", "torchtitan-py"}));
  c->add_option("--csv-path", a->csv_path,
                "torchtitan, torchtitan-py: the schedule CSV's path to name (default optpipe_schedule.csv)");
  c->add_option("--out,-o", a->out_path, "output file (default: stdout)");
  c->add_flag("--drop-memory-ops", a->drop_memory_ops,
              "csv: leave out recomputes and offloads, which the CSV cannot express (the result may not fit)");
  return {c, [a] { return run_export(*a); }};
}

}  // namespace optpipe
