#include <algorithm>
#include <cmath>
#include <cstdio>

#include "export/markup.h"
#include "optpipe/export.h"
#include "optpipe/units.h"

namespace optpipe {

const char* op_colour(OpKind k) {
  static const char* const kColours[kNumOpKinds] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                                    "#b07aa1", "#76b7b2", "#edc948", "#000000"};
  return kColours[static_cast<int>(k)];
}

namespace {

std::string fmt(const char* format, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, a);
  return buf;
}

// A tick step of 1, 2 or 5 × 10^k giving about `target` ticks over `span`.
double nice_step(double span, int target) {
  const double raw = span / target;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0, 10.0})
    if (f * mag >= raw) return f * mag;
  return 10 * mag;
}

// Where everything goes: one lane and two channels per device, the time axis and legend, then one
// memory chart per device, all on the same time scale.
struct Layout {
  const Problem& p;
  const Timeline& t;
  double width = 1200, left = 118, right = 16;
  double lane_h = 22, chan_h = 9, device_gap = 8, mem_h = 64, mem_gap = 14;
  double gantt_top = 34;
  double span, scale, device_h, axis_y, mem_top, height;

  Layout(const Problem& p_, const Timeline& t_) : p(p_), t(t_) {
    span = std::max(t.makespan_us, 1e-9);
    scale = (width - left - right) / span;
    device_h = lane_h + 2 * chan_h + 2 + device_gap;
    axis_y = gantt_top + p.num_devices * device_h + 4;
    mem_top = axis_y + 44;
    height = mem_top + p.num_devices * (mem_h + mem_gap) + 8;
  }
  double x_of(double us) const { return left + us * scale; }
};

void draw_box(const Layout& l, const Op& op, double y, double h, bool label, std::string& o) {
  const Problem& p = l.p;
  const Timeline& t = l.t;
  const int i = op_id(p, op);
  const double x0 = l.x_of(t.start_us[i]), w = std::max(0.5, (t.end_us[i] - t.start_us[i]) * l.scale);
  // Later chunks of a device are drawn lighter, so V-shape and interleaved chunks read apart.
  const int chunk = op.stage / p.num_devices;
  const double opacity = p.chunks_per_device > 1 ? 1.0 - 0.45 * chunk / (p.chunks_per_device - 1) : 1.0;
  o += "<rect x=\"" + fmt("%.2f", x0) + "\" y=\"" + fmt("%.1f", y) + "\" width=\"" + fmt("%.2f", w) + "\" height=\"" +
       fmt("%.1f", h) + "\" fill=\"" + op_colour(op.kind) + "\" fill-opacity=\"" + fmt("%.2f", opacity) +
       "\" stroke=\"#ffffff\" stroke-width=\"0.5\"><title>" + op_name(op) + " " +
       escape_markup(format_us(t.start_us[i])) + " – " + escape_markup(format_us(t.end_us[i])) + "</title></rect>\n";
  if (label && w >= 12)
    o += "<text x=\"" + fmt("%.2f", x0 + w / 2) + "\" y=\"" + fmt("%.1f", y + h / 2 + 4) +
         "\" text-anchor=\"middle\" fill=\"#ffffff\" font-size=\"10\">" + std::to_string(op.microbatch) + "</text>\n";
}

void draw_gantt(const Layout& l, const Schedule& s, std::string& o) {
  for (int d = 0; d < l.p.num_devices; d++) {
    const double y = l.gantt_top + d * l.device_h;
    // The lane background stays visible wherever the device idles.
    o += "<rect x=\"" + fmt("%.0f", l.left) + "\" y=\"" + fmt("%.1f", y) + "\" width=\"" +
         fmt("%.1f", l.width - l.left - l.right) + "\" height=\"" + fmt("%.0f", l.lane_h) + "\" fill=\"#eeeeee\"/>\n";
    o += "<text x=\"8\" y=\"" + fmt("%.1f", y + 15) + "\">device " + std::to_string(d) + "</text>\n";
    o += "<text x=\"8\" y=\"" + fmt("%.1f", y + l.lane_h + l.chan_h) +
         "\" font-size=\"8\" fill=\"#666666\">to host / from host</text>\n";
    for (const Op& op : s.devices[d].compute) draw_box(l, op, y, l.lane_h, true, o);
    for (const Op& op : s.devices[d].offloads) draw_box(l, op, y + l.lane_h + 1, l.chan_h, false, o);
    for (const ReloadEntry& r : s.devices[d].reloads)
      draw_box(l, r.reload, y + l.lane_h + l.chan_h + 2, l.chan_h, false, o);
  }
}

// The time axis in ms, and the legend of op kinds.
void draw_axis(const Layout& l, std::string& o) {
  const double axis_y = l.axis_y, left = l.left, right_x = l.width - l.right;
  const double step = nice_step(l.span, 10);
  o += "<line x1=\"" + fmt("%.0f", left) + "\" y1=\"" + fmt("%.1f", axis_y) + "\" x2=\"" + fmt("%.1f", right_x) +
       "\" y2=\"" + fmt("%.1f", axis_y) + "\" stroke=\"#333333\"/>\n";
  // Counted, not stepped: a step too small for the span's precision (or a zero span) must not
  // loop for ever.
  const int ticks =
      step > 0 && std::isfinite(l.span) ? static_cast<int>(std::min(100.0, std::floor(l.span / step + 1e-9))) : 0;
  for (int k = 0; k <= ticks; k++) {
    const double tick = k * step;
    const double x = l.x_of(tick);
    o += "<line x1=\"" + fmt("%.2f", x) + "\" y1=\"" + fmt("%.1f", axis_y) + "\" x2=\"" + fmt("%.2f", x) + "\" y2=\"" +
         fmt("%.1f", axis_y + 4) + "\" stroke=\"#333333\"/>\n";
    o += "<text x=\"" + fmt("%.2f", x) + "\" y=\"" + fmt("%.1f", axis_y + 16) + "\" text-anchor=\"middle\">" +
         fmt("%g", tick / 1000) + "</text>\n";
  }
  o += "<text x=\"" + fmt("%.1f", right_x) + "\" y=\"" + fmt("%.1f", axis_y + 30) +
       "\" text-anchor=\"end\">time (ms)</text>\n";
  double lx = left;
  for (int k = 0; k < kNumOpKinds; k++) {
    o += "<rect x=\"" + fmt("%.0f", lx) + "\" y=\"" + fmt("%.1f", axis_y + 22) +
         "\" width=\"10\" height=\"10\" fill=\"" + op_colour(static_cast<OpKind>(k)) + "\"/>";
    o += "<text x=\"" + fmt("%.0f", lx + 14) + "\" y=\"" + fmt("%.1f", axis_y + 31) + "\">" +
         op_kind_name(static_cast<OpKind>(k)) + "</text>\n";
    lx += 78;
  }
}

// Device d's memory curve against its budget, on the chart's time axis.
void draw_memory(const Layout& l, int d, std::string& o) {
  const Problem& p = l.p;
  const Timeline& t = l.t;
  const double left = l.left, right_x = l.width - l.right, mem_h = l.mem_h;
  const double y0 = l.mem_top + d * (mem_h + l.mem_gap);
  const double budget = static_cast<double>(p.devices[d].mem_budget_bytes);
  // The axis runs from just below static memory to just above the budget or the peak, so the
  // activations' rise and fall fill the chart.
  const double base = static_cast<double>(p.devices[d].static_bytes);
  const double high = std::max(budget, static_cast<double>(t.devices[d].peak_bytes));
  const double bottom = base - 0.08 * (high - base), top = high + 0.08 * (high - base);
  auto y_of = [&](double bytes) { return y0 + mem_h - (bytes - bottom) / std::max(top - bottom, 1.0) * mem_h; };
  o += "<rect x=\"" + fmt("%.0f", left) + "\" y=\"" + fmt("%.1f", y0) + "\" width=\"" + fmt("%.1f", right_x - left) +
       "\" height=\"" + fmt("%.0f", mem_h) + "\" fill=\"#fafafa\" stroke=\"#dddddd\"/>\n";
  o += "<text x=\"8\" y=\"" + fmt("%.1f", y0 + 14) + "\">memory " + std::to_string(d) + "</text>\n";
  std::string pts;
  double prev_y = y_of(static_cast<double>(p.devices[d].static_bytes));
  pts += fmt("%.2f", l.x_of(0)) + "," + fmt("%.2f", prev_y);
  for (const MemoryPoint& m : t.memory[d]) {
    const double x = l.x_of(m.time_us), y = y_of(static_cast<double>(m.bytes));
    pts += ' ';
    pts += fmt("%.2f", x) + "," + fmt("%.2f", prev_y) + " " + fmt("%.2f", x) + "," + fmt("%.2f", y);
    prev_y = y;
  }
  pts += ' ';
  pts += fmt("%.2f", l.x_of(l.span)) + "," + fmt("%.2f", prev_y);
  o += "<polyline points=\"" + pts + "\" fill=\"none\" stroke=\"#4e79a7\" stroke-width=\"1.5\"/>\n";
  const double by = y_of(budget);
  o += "<line x1=\"" + fmt("%.0f", left) + "\" y1=\"" + fmt("%.2f", by) + "\" x2=\"" + fmt("%.1f", right_x) +
       "\" y2=\"" + fmt("%.2f", by) + "\" stroke=\"#d62728\" stroke-dasharray=\"5,3\"/>\n";
  o += "<text x=\"" + fmt("%.1f", right_x - 2) + "\" y=\"" + fmt("%.2f", by - 3) +
       "\" text-anchor=\"end\" fill=\"#d62728\" font-size=\"10\">budget " +
       escape_markup(format_bytes(p.devices[d].mem_budget_bytes)) + "</text>\n";
  const double px = l.x_of(t.devices[d].peak_time_us), py = y_of(static_cast<double>(t.devices[d].peak_bytes));
  o += "<circle cx=\"" + fmt("%.2f", px) + "\" cy=\"" + fmt("%.2f", py) + "\" r=\"3.5\" fill=\"#d62728\"/>\n";
  o += "<text x=\"" + fmt("%.2f", px + 6) + "\" y=\"" + fmt("%.2f", py + 12) + "\" font-size=\"10\">peak " +
       escape_markup(format_bytes(t.devices[d].peak_bytes)) + "</text>\n";
}

}  // namespace

std::string schedule_svg(const Problem& p, const Schedule& s, const Timeline& t, const std::string& title) {
  OPTPIPE_CHECK(!t.start_us.empty(), "the chart needs a timeline with op times");
  const Layout l(p, t);
  std::string o;
  o += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt("%.0f", l.width) + "\" height=\"" +
       fmt("%.0f", l.height) + "\" viewBox=\"0 0 " + fmt("%.0f", l.width) + " " + fmt("%.0f", l.height) +
       "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  o += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  o += "<text x=\"8\" y=\"20\" font-size=\"14\" font-weight=\"bold\">" + escape_markup(title) + "</text>\n";
  o += "<text x=\"" + fmt("%.0f", l.width - l.right) + "\" y=\"20\" text-anchor=\"end\">makespan " +
       escape_markup(format_us(t.makespan_us)) + ", bubble " + fmt("%.1f%%", 100 * t.bubble_ratio) + "</text>\n";
  draw_gantt(l, s, o);
  draw_axis(l, o);
  if (t.memory.size() == static_cast<size_t>(p.num_devices))
    for (int d = 0; d < p.num_devices; d++) draw_memory(l, d, o);
  o += "</svg>\n";
  return o;
}

}  // namespace optpipe
