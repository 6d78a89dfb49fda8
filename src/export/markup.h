// Escaping text for SVG and HTML (private to the exporters).
#pragma once

#include <string>

namespace optpipe {

inline std::string escape_markup(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

}  // namespace optpipe
