// /v1/chat/completions prompts: the messages rendered with the model's chat
// template (tokenizer.chat_template, or --chat-template-file) through the
// chat module's bounded Jinja subset. A template that cannot render a request
// (raise_exception, a role it does not know, a limit) is the client's 400.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "server/request.h"
#include "server/tool_calls.h"

namespace sustain::chat {
class ChatTemplate;
}

namespace sustain::server {

class ChatFormatter {
 public:
  // Parses the template once; a syntax error names the line and column and
  // `origin` (the file or GGUF key it came from).
  static Expected<ChatFormatter> create(std::string_view source, const std::string& origin,
                                        std::string bos_token, std::string eos_token);

  // The prompt text for a chat request (generation prompt added, the
  // request's chat_template_kwargs and tools passed to the template).
  Expected<std::string> render(const CompletionRequest& r) const;

  // How this template writes tool calls (kNone: not one sustain reads).
  ToolSyntax tool_syntax() const { return tool_syntax_; }

 private:
  ChatFormatter() = default;
  std::shared_ptr<const chat::ChatTemplate> template_;
  std::string bos_, eos_;
  ToolSyntax tool_syntax_ = ToolSyntax::kNone;
};

}  // namespace sustain::server
