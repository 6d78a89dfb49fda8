#include "optpipe/units.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace optpipe {

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes), a = std::fabs(b);
  char buf[64];
  if (a >= double(1ll << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1ll << 30));
  else if (a >= double(1 << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / double(1 << 20));
  else if (a >= 1024)
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024);
  else
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  return buf;
}

std::string format_us(double us) {
  char buf[64];
  const double a = std::fabs(us);
  if (a >= 1e6)
    std::snprintf(buf, sizeof buf, "%.3g s", us / 1e6);
  else if (a >= 1e3)
    std::snprintf(buf, sizeof buf, "%.4g ms", us / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.4g us", us);
  return buf;
}

bool parse_bytes(const std::string& text, int64_t* out) {
  const char* s = text.c_str();
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (end == s || !std::isfinite(v) || v < 0) return false;
  while (*end == ' ') end++;
  const std::string unit = end;
  static const struct {
    const char* name;
    double factor;
  } kUnits[] = {{"", 1},      {"B", 1},        {"KB", 1e3},        {"MB", 1e6},           {"GB", 1e9},
                {"TB", 1e12}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  for (const auto& u : kUnits) {
    if (unit == u.name) {
      const double bytes = v * u.factor;
      if (bytes > 9e18) return false;
      *out = static_cast<int64_t>(std::llround(bytes));
      return true;
    }
  }
  return false;
}

}  // namespace optpipe
