// libFuzzer target for the stop-string matcher and the SSE framing of what
// it lets through. The input is split at 0x00 bytes: the first parts (up to
// four, as requests allow) are stop strings, the rest is the generated
// text, whose 0x01 bytes mark where one token's piece ends and the next
// begins. Properties, against a reference written here that re-scans the
// whole text after each piece:
//  - the text sent is exactly the text before the first stop string
//    complete after some piece (the earliest starting one of those), or all
//    of it when none completes; the matcher stops after the same piece;
//  - nothing of a stop string is ever sent;
//  - each SSE event is one "data: " line ending in a blank line, and its
//    JSON gives the sent text back (invalid UTF-8 becomes U+FFFD instead);
//    a comment event has no line break inside.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/sse.h"
#include "server/stop_strings.h"

using namespace sustain::server;

namespace {

void require(bool cond, const char* what, const std::string& detail = {}) {
  if (cond) return;
  std::fprintf(stderr, "fuzz_stop_strings: property violated: %s %s\n", what, detail.c_str());
  std::abort();
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (c == sep)
      out.emplace_back();
    else
      out.back() += c;
  }
  return out;
}

void check_event(const std::string& sent) {
  const std::string ev = sse_event(nlohmann::json{{"text", sent}});
  require(ev.rfind("data: ", 0) == 0, "an event not starting with 'data: '");
  require(ev.size() >= 8 && ev.compare(ev.size() - 2, 2, "\n\n") == 0,
          "an event not ending in a blank line");
  const std::string payload = ev.substr(6, ev.size() - 8);
  require(payload.find('\n') == std::string::npos && payload.find('\r') == std::string::npos,
          "a line break inside an event");
  const auto j = nlohmann::json::parse(payload, nullptr, false);
  require(!j.is_discarded() && j.contains("text"), "an event that is not JSON");
  const std::string back = j["text"];
  // Where the text is valid UTF-8 (nlohmann's strict dump accepts it) it
  // comes back unchanged.
  bool valid = true;
  try {
    (void)nlohmann::json(sent).dump();
  } catch (const nlohmann::json::exception&) {
    valid = false;
  }
  if (valid) require(back == sent, "an event changed valid text");
  const std::string c = sse_comment(sent);
  require(c.find_first_of("\r\n") == c.size() - 2, "a line break inside a comment");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts = split(in, '\0');
  std::vector<std::string> stops;
  while (parts.size() > 1 && stops.size() < 4) {
    stops.push_back(parts.front());
    parts.erase(parts.begin());
  }
  std::string text;
  for (size_t i = 0; i < parts.size(); ++i) text += (i ? std::string(1, '\0') : "") + parts[i];
  const std::vector<std::string> pieces = split(text, '\x01');

  StopMatcher m(stops);
  std::string sent, seen, expected;
  bool ref_stopped = false;
  size_t ref_piece = 0, stopped_piece = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const std::string out = m.push(pieces[i]);
    check_event(out);
    sent += out;
    if (m.stopped() && stopped_piece == 0) stopped_piece = i + 1;
    if (!ref_stopped) {
      seen += pieces[i];
      size_t first = std::string::npos;
      for (const auto& s : stops)
        if (!s.empty()) first = std::min(first, seen.find(s));
      if (first != std::string::npos) {
        ref_stopped = true;
        ref_piece = i + 1;
        expected = seen.substr(0, first);
      }
    }
  }
  if (!ref_stopped) expected = seen;
  const std::string rest = m.flush();
  check_event(rest);
  sent += rest;
  require(m.stopped() == ref_stopped, "stopped() differs from the reference");
  require(stopped_piece == ref_piece, "stopped after a different piece");
  require(sent == expected, "the text sent differs from the reference",
          "sent " + std::to_string(sent.size()) + " bytes, expected " +
              std::to_string(expected.size()));
  for (const auto& s : stops)
    if (!s.empty()) require(sent.find(s) == std::string::npos, "a stop string was sent");
  return 0;
}
