// Escaping text for HTML element content and double-quoted attributes: the
// self-contained reports of bench and eval put user-supplied strings (model
// paths, prompts, generated text) into their pages.
#pragma once

#include <string>
#include <string_view>

namespace sustain {

inline std::string html_escape(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += ch;
    }
  }
  return o;
}

}  // namespace sustain
