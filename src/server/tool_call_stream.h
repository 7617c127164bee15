// Streaming a chat choice whose reply may hold tool calls, as OpenAI does:
// content is sent while it cannot be the start of a call; each call is
// announced by a delta.tool_calls entry with its index, id, type and name
// (arguments ""), and its arguments follow as they are written, in pieces
// that add up to exactly the `arguments` a non-streamed reply returns.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/tool_calls.h"

namespace sustain::server {

class ToolCallStream {
 public:
  // `prefix`: text the reply is known to start with but that the model did
  // not write (Mistral's [TOOL_CALLS], put at the end of the prompt when a
  // call is forced). `parallel` false: only the first call is read.
  ToolCallStream(ToolSyntax syntax, std::string prefix, bool parallel);

  struct Delta {
    std::string content;
    // delta.tool_calls entries, each to be sent in a chunk of its own (so a
    // call's first delta has empty arguments, as OpenAI sends it).
    nlohmann::json calls = nlohmann::json::array();
  };
  // The reply's next text; `end`: the reply ended, so the rest of the
  // content and of the calls comes too.
  Delta push(std::string_view text, bool end);
  // Some call was sent (the choice's finish_reason is then "tool_calls").
  bool has_calls() const { return !sent_.empty(); }

 private:
  void send_calls(const std::vector<PartialCall>& calls, Delta& d);
  void finish(Delta& d);

  ToolSyntax syntax_;
  bool parallel_;
  std::string text_;
  size_t content_sent_ = 0;
  struct Sent {
    std::string id;
    std::string arguments;  // sent so far
  };
  std::vector<Sent> sent_;
};

// The reply as a whole: the content outside the calls and the calls, with at
// most one when `parallel` is false.
ToolReply read_reply(ToolSyntax syntax, const std::string& prefix, const std::string& text,
                     bool parallel);

}  // namespace sustain::server
