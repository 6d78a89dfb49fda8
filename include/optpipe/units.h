// units.h — reading and writing byte sizes and times the way people write them.
#pragma once

#include <cstdint>
#include <string>

namespace optpipe {

std::string format_bytes(int64_t bytes);  // "52.00 GiB", "512.0 MiB", "-1.50 GiB"
std::string format_us(double us);         // "12.5 ms", "830 us", "1.20 s"

// "60GiB", "60 GiB", "1.5e9", "512MB", "4096" (bytes). False on anything else.
bool parse_bytes(const std::string& text, int64_t* out);

}  // namespace optpipe
