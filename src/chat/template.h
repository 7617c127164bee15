// Chat templates: a bounded subset of Jinja2, enough to render the templates
// models ship in `tokenizer.chat_template` byte for byte as Python's Jinja2
// (and llama.cpp's server) does. Parsing and rendering are bounded — nesting
// depth, loop iterations, output size and recursion all have limits — so a
// hostile template or message list gets an error, never a hang or a crash.
// Whitespace follows Hugging Face's environment (trim_blocks, lstrip_blocks);
// docs/chat_templates.md lists the supported subset and the limits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace sustain::chat {

inline constexpr int kMaxChatTemplateDepth = 256;  // the largest max_depth parse() accepts

struct ChatTemplateLimits {
  size_t max_output_bytes = 16u << 20;  // rendered text, and any one string value
  int max_depth = 64;                   // nested blocks / expressions / macro calls
  int64_t max_steps = 10'000'000;       // evaluation steps (loop bodies, expressions)
};

struct ChatRenderOptions;

// A parsed template is immutable: render it from several threads at once.
class ChatTemplate {
 public:
  // Parses `source`; kInvalidArgument naming the line and column of a syntax
  // error or an unsupported construct.
  static Expected<ChatTemplate> parse(std::string_view source, ChatTemplateLimits limits = {});

  // Renders with `context` as the global variables, e.g.
  //   {"messages": [...], "add_generation_prompt": true, "bos_token": "<s>",
  //    "eos_token": "</s>", "tools": [...], "enable_thinking": false}
  // `raise_exception(msg)` in the template, an undefined variable used where a
  // value is required, a type error, or a limit hit → kInvalidArgument with
  // the message. strftime_now() uses the current local date.
  Expected<std::string> render(const nlohmann::json& context) const;
  // The same with the context's key order kept: dicts iterate (`items`,
  // `tojson`) in insertion order as in Python, where nlohmann::json sorts
  // keys. A separate name so that `render({...})` stays unambiguous.
  Expected<std::string> render_ordered(const nlohmann::ordered_json& context) const;

  // Whether a system message shows up in the output (probed once with a
  // test conversation; false for templates that reject the system role).
  bool supports_system_role() const;

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

 private:
  friend Expected<std::string> render_chat(const ChatTemplate&, const nlohmann::json&,
                                           const ChatRenderOptions&);
  friend Expected<std::string> render_chat_ordered(const ChatTemplate&,
                                                   const nlohmann::ordered_json&,
                                                   const ChatRenderOptions&);
  struct Impl;
  ChatTemplate();
  std::unique_ptr<Impl> impl_;
};

// What a server renders for an OpenAI-style chat request.
struct ChatRenderOptions {
  bool add_generation_prompt = true;
  std::string bos_token, eos_token;  // from the model's vocabulary
  nlohmann::json tools;              // null when the request has none
  nlohmann::json kwargs;             // chat_template_kwargs, merged into the globals
  // Key-order-keeping alternatives (nlohmann::json sorts object keys; Python
  // and llama.cpp keep the request's order, which shows in tool schemas
  // printed with tojson): used instead of the two above when not null.
  nlohmann::ordered_json tools_ordered, kwargs_ordered;
};

// Renders `messages` (OpenAI message objects) as llama.cpp's server does:
// the same globals, a template that rejects the system role gets the system
// message merged into the first user message, and a leading bos_token is
// stripped from the result (the tokenizer adds BOS itself).
//
// Globals: messages, add_generation_prompt, bos_token, eos_token, tools (only
// when not null; templates test `tools is defined`), enable_thinking = true
// and date_string = today ("%d %b %Y", read by Llama 3.x), then every key of
// options.kwargs, which may override any of them.
Expected<std::string> render_chat(const ChatTemplate& t, const nlohmann::json& messages,
                                  const ChatRenderOptions& options);
// The same with message key order kept (see render_ordered); use it when the
// request was parsed as ordered_json so tool schemas print in request order.
Expected<std::string> render_chat_ordered(const ChatTemplate& t,
                                          const nlohmann::ordered_json& messages,
                                          const ChatRenderOptions& options);

}  // namespace sustain::chat
