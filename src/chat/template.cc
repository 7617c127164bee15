// Public API of the chat-template renderer and the llama.cpp-compatible
// render_chat (globals, system-message merge, BOS stripping).
#include "chat/template.h"

#include <ctime>
#include <mutex>

#include "chat/jinja.h"

namespace sustain::chat {

struct ChatTemplate::Impl {
  jinja::Template tmpl;
  // Whether the template renders a system message (probed once, lazily):
  // Gemma 2's raises on one, so render_chat merges it into the first user turn.
  mutable std::once_flag probe_once;
  mutable bool supports_system = true;
};

ChatTemplate::ChatTemplate() : impl_(std::make_unique<Impl>()) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

Expected<ChatTemplate> ChatTemplate::parse(std::string_view source, ChatTemplateLimits limits) {
  // max_depth also bounds the parser's and the evaluator's native recursion,
  // so it has a ceiling as well as a floor.
  if (limits.max_depth < 1 || limits.max_depth > kMaxChatTemplateDepth || limits.max_steps < 1 ||
      limits.max_output_bytes < 1)
    return error(Code::kInvalidArgument,
                 "chat template limits out of range (max_depth {} must be 1..{}, max_steps {} "
                 "and max_output_bytes {} must be positive)",
                 limits.max_depth, kMaxChatTemplateDepth, limits.max_steps,
                 limits.max_output_bytes);
  auto t = jinja::parse_template(source, limits);
  if (!t) return t.status().with_context("chat template");
  ChatTemplate ct;
  ct.impl_->tmpl = std::move(*t);
  return ct;
}

namespace {

template <typename J>
Expected<std::string> render_json(const jinja::Template& t, const J& context) {
  if (!context.is_object() && !context.is_null())
    return error(Code::kInvalidArgument, "chat template context must be a JSON object, got {}",
                 context.type_name());
  auto v = jinja::from_json(context);
  if (!v) return v.status().with_context("chat template context");
  auto out = jinja::render_template(t, *v);
  if (!out) return out.status().with_context("chat template");
  return out;
}

std::string today(const char* fmt) {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[64];
  size_t n = std::strftime(buf, sizeof(buf), fmt, &tm);
  return std::string(buf, n);
}

// llama.cpp's polyfill for templates without a system role: the system
// text goes before the next user message, separated by "\n"; a system
// message with no user message after it becomes a user message.
template <typename J>
J merge_system(const J& messages) {
  J out = J::array();
  std::string pending;
  bool have_pending = false;
  for (const auto& m : messages) {
    const bool is_system = m.is_object() && m.contains("role") && m["role"] == "system";
    if (is_system) {
      std::string text = m.contains("content") && m["content"].is_string()
                             ? m["content"].template get<std::string>()
                             : std::string();
      pending += (have_pending ? "\n" : "") + text;
      have_pending = true;
      continue;
    }
    J msg = m;
    if (have_pending && m.is_object() && m.contains("role") && m["role"] == "user") {
      std::string user = m.contains("content") && m["content"].is_string()
                             ? m["content"].template get<std::string>()
                             : std::string();
      msg["content"] = user.empty() ? pending : pending + "\n" + user;
      have_pending = false;
      pending.clear();
    }
    out.push_back(std::move(msg));
  }
  if (have_pending) {
    J msg = J::object();
    msg["role"] = "user";
    msg["content"] = pending;
    out.push_back(std::move(msg));
  }
  return out;
}

// The globals are assembled as template values, not as JSON: no dump/parse
// round trip (which would throw on strings that are not UTF-8) and no
// mixing of the sorted and the ordered JSON types.
template <typename J>
Expected<std::string> render_chat_impl(const jinja::Template& tmpl, bool supports_system,
                                       const J& messages, const ChatRenderOptions& o) {
  if (!messages.is_array())
    return error(Code::kInvalidArgument, "chat messages must be a JSON array, got {}",
                 messages.type_name());
  jinja::Dict ctx;
  auto set_json = [&](const char* key, const auto& j) -> Status {
    auto v = jinja::from_json(j);
    if (!v) return v.status().with_context(fmt::format("chat request field '{}'", key));
    ctx.set(key, std::move(*v));
    return Status::ok();
  };
  SUSTAIN_TRY(set_json("messages", supports_system ? messages : merge_system(messages)));
  ctx.set("add_generation_prompt", jinja::Value::boolean(o.add_generation_prompt));
  ctx.set("bos_token", jinja::Value::string(o.bos_token));
  ctx.set("eos_token", jinja::Value::string(o.eos_token));
  // llama.cpp leaves `tools` undefined when the request has none (templates
  // test `tools is defined` / iterate it), and passes enable_thinking=true
  // and Llama 3's date_string unless chat_template_kwargs say otherwise.
  if (!o.tools_ordered.is_null()) {
    SUSTAIN_TRY(set_json("tools", o.tools_ordered));
  } else if (!o.tools.is_null()) {
    SUSTAIN_TRY(set_json("tools", o.tools));
  }
  ctx.set("enable_thinking", jinja::Value::boolean(true));
  ctx.set("date_string", jinja::Value::string(today("%d %b %Y")));
  auto merge_kwargs = [&](const auto& kw) -> Status {
    if (!kw.is_object())
      return error(Code::kInvalidArgument, "chat_template_kwargs must be a JSON object, got {}",
                   kw.type_name());
    for (auto it = kw.begin(); it != kw.end(); ++it)
      SUSTAIN_TRY(set_json(it.key().c_str(), it.value()));
    return Status::ok();
  };
  if (!o.kwargs_ordered.is_null()) {
    SUSTAIN_TRY(merge_kwargs(o.kwargs_ordered));
  } else if (!o.kwargs.is_null()) {
    SUSTAIN_TRY(merge_kwargs(o.kwargs));
  }
  jinja::Value context = jinja::Value::make_dict(std::move(ctx));
  auto out = jinja::render_template(tmpl, context);
  if (!out) return out.status().with_context("chat template");
  if (!o.bos_token.empty() && out->compare(0, o.bos_token.size(), o.bos_token) == 0)
    out->erase(0, o.bos_token.size());
  return out;
}

}  // namespace

Expected<std::string> ChatTemplate::render(const nlohmann::json& context) const {
  return render_json(impl_->tmpl, context);
}

Expected<std::string> ChatTemplate::render_ordered(const nlohmann::ordered_json& context) const {
  return render_json(impl_->tmpl, context);
}

bool ChatTemplate::supports_system_role() const {
  std::call_once(impl_->probe_once, [this] {
    const char* kNeedle = "<<sustain system probe>>";
    nlohmann::json ctx = {
        {"messages",
         {{{"role", "system"}, {"content", kNeedle}}, {{"role", "user"}, {"content", "hi"}}}},
        {"add_generation_prompt", true},
        {"bos_token", ""},
        {"eos_token", ""}};
    auto out = render_json(impl_->tmpl, ctx);
    impl_->supports_system = out && out->find(kNeedle) != std::string::npos;
  });
  return impl_->supports_system;
}

Expected<std::string> render_chat(const ChatTemplate& t, const nlohmann::json& messages,
                                  const ChatRenderOptions& options) {
  return render_chat_impl(t.impl_->tmpl, t.supports_system_role(), messages, options);
}

Expected<std::string> render_chat_ordered(const ChatTemplate& t,
                                          const nlohmann::ordered_json& messages,
                                          const ChatRenderOptions& options) {
  return render_chat_impl(t.impl_->tmpl, t.supports_system_role(), messages, options);
}

}  // namespace sustain::chat
