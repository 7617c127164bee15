#include "server/tool_call_stream.h"

#include <algorithm>

namespace sustain::server {
using nlohmann::json;

ToolReply read_reply(ToolSyntax syntax, const std::string& prefix, const std::string& text,
                     bool parallel) {
  ToolReply r = parse_tool_calls(syntax, prefix + text);
  if (!parallel && r.calls.size() > 1) r.calls.resize(1);
  return r;
}

ToolCallStream::ToolCallStream(ToolSyntax syntax, std::string prefix, bool parallel)
    : syntax_(syntax), parallel_(parallel), text_(std::move(prefix)) {}

void ToolCallStream::send_calls(const std::vector<PartialCall>& calls, Delta& d) {
  const size_t limit = parallel_ ? calls.size() : std::min<size_t>(calls.size(), 1);
  for (size_t i = 0; i < limit; ++i) {
    const PartialCall& c = calls[i];
    if (i == sent_.size()) {
      // Calls are announced in order, each once its name is complete.
      if (!c.named) return;
      sent_.push_back({new_call_id(syntax_), ""});
      d.calls.push_back({{"index", i},
                         {"id", sent_[i].id},
                         {"type", "function"},
                         {"function", {{"name", c.name}, {"arguments", ""}}}});
    }
    std::string& sent = sent_[i].arguments;
    // A piece only while the text so far extends what was sent (it always
    // does for an object value; a string value is sent whole at the end).
    if (c.streamable && c.arguments.size() > sent.size() &&
        c.arguments.compare(0, sent.size(), sent) == 0) {
      d.calls.push_back(
          {{"index", i}, {"function", {{"arguments", c.arguments.substr(sent.size())}}}});
      sent = c.arguments;
    }
  }
}

ToolCallStream::Delta ToolCallStream::push(std::string_view text, bool end) {
  Delta d;
  text_ += text;
  const size_t n = streamable_prefix(syntax_, text_);
  if (n > content_sent_) {
    d.content = text_.substr(content_sent_, n - content_sent_);
    content_sent_ = n;
  }
  send_calls(partial_tool_calls(syntax_, text_), d);
  if (end) finish(d);
  return d;
}

void ToolCallStream::finish(Delta& d) {
  ToolReply r = parse_tool_calls(syntax_, text_);
  if (!parallel_ && r.calls.size() > 1) r.calls.resize(1);
  if (r.content.size() > content_sent_) d.content += r.content.substr(content_sent_);
  std::vector<PartialCall> done;
  for (auto& c : r.calls) done.push_back({c.name, true, c.arguments, true});
  // The last pieces of calls already announced, then any call not yet seen.
  send_calls(done, d);
}

}  // namespace sustain::server
