#include "server/chat.h"

#include "chat/template.h"

namespace sustain::server {

Expected<ChatFormatter> ChatFormatter::create(std::string_view source, const std::string& origin,
                                              std::string bos_token, std::string eos_token) {
  auto t = chat::ChatTemplate::parse(source);
  if (!t) return t.status().with_context("chat template (" + origin + ")");
  ChatFormatter f;
  f.template_ = std::make_shared<const chat::ChatTemplate>(std::move(*t));
  f.bos_ = std::move(bos_token);
  f.eos_ = std::move(eos_token);
  f.tool_syntax_ = detect_tool_syntax(source);
  return f;
}

Expected<std::string> ChatFormatter::render(const CompletionRequest& r) const {
  chat::ChatRenderOptions opt;
  opt.add_generation_prompt = true;
  opt.bos_token = bos_;
  opt.eos_token = eos_;
  opt.tools_ordered = r.tools;
  opt.kwargs_ordered =
      r.chat_template_kwargs.is_null() ? nlohmann::ordered_json::object() : r.chat_template_kwargs;
  auto text = chat::render_chat_ordered(*template_, r.messages, opt);
  if (!text) {
    // Whatever the template objects to, it is this request it cannot render.
    return Status(Code::kInvalidArgument,
                  "the chat template cannot render these messages: " + text.status().message());
  }
  return text;
}

}  // namespace sustain::server
