#include <cstdio>

#include "export/markup.h"
#include "optpipe/export.h"
#include "optpipe/units.h"

namespace optpipe {

std::string html_report(const std::string& title, const std::string& problem_summary,
                        const std::vector<ReportRow>& rows, const std::vector<ReportChart>& charts) {
  std::string o = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>" + escape_markup(title) +
                  "</title>\n<style>\n"
                  "body{font-family:sans-serif;margin:24px;color:#222}\n"
                  "table{border-collapse:collapse;margin:12px 0 24px}\n"
                  "th,td{padding:4px 12px;border-bottom:1px solid #ddd;text-align:right}\n"
                  "th:first-child,td:first-child,td.text{text-align:left}\n"
                  "tr.nofit td{color:#999}\n"
                  "section{margin-bottom:28px}\n"
                  "</style></head><body>\n";
  o += "<h1>" + escape_markup(title) + "</h1>\n<p>" + escape_markup(problem_summary) + "</p>\n";
  o += "<table><tr><th>family</th><th>placement</th><th>fits</th><th>makespan</th><th>bubble</th><th>peak "
       "memory</th></tr>\n";
  for (const ReportRow& r : rows) {
    if (!r.applicable) {
      o += "<tr class=\"nofit\"><td>" + escape_markup(r.name) + "</td><td class=\"text\">" +
           escape_markup(r.placement) +
           "</td><td class=\"text\" colspan=\"4\">not applicable: " + escape_markup(r.reason) + "</td></tr>\n";
      continue;
    }
    char bubble[32];
    std::snprintf(bubble, sizeof bubble, "%.1f%%", 100 * r.bubble_ratio);
    o += std::string("<tr") + (r.fits ? "" : " class=\"nofit\"") + "><td>" + escape_markup(r.name) +
         "</td><td class=\"text\">" + escape_markup(r.placement) + "</td><td class=\"text\">" +
         (r.fits ? "yes" : "no") + "</td><td>" + escape_markup(format_us(r.makespan_us)) + "</td><td>" + bubble +
         "</td><td>" + escape_markup(format_bytes(r.peak_bytes)) + "</td></tr>\n";
  }
  o += "</table>\n";
  for (const ReportChart& c : charts)
    o += "<section><h2>" + escape_markup(c.heading) + "</h2>\n" + c.svg + "</section>\n";
  o += "</body></html>\n";
  return o;
}

}  // namespace optpipe
