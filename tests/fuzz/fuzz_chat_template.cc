// libFuzzer target for the chat-template engine: the input is a template
// source, parsed with tight limits and rendered against a small conversation
// with tools. Parsing and rendering may fail, but only with kInvalidArgument
// (a message naming the problem), and never crash, hang or allocate without
// bound: ASan/UBSan and libFuzzer's timeout and RSS limit watch for that.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "chat/template.h"

using namespace sustain;

namespace {

void require(bool cond, const char* what, const std::string& detail = {}) {
  if (cond) return;
  std::fprintf(stderr, "fuzz_chat_template: property violated: %s %s\n", what, detail.c_str());
  std::abort();
}

const nlohmann::ordered_json& conversation() {
  static const nlohmann::ordered_json m = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi \u00e9\u4e2d <b>"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
      "function": {"name": "get", "arguments": {"city": "Paris", "n": [1, 2.5, null, true]}}}]},
    {"role": "tool", "content": "{\"t\": 21}"},
    {"role": "user", "content": [{"type": "text", "text": "and now?"}]}
  ])");
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  chat::ChatTemplateLimits limits;
  limits.max_output_bytes = 1u << 20;
  limits.max_depth = 32;
  limits.max_steps = 200'000;  // keeps each input well under libFuzzer's timeout
  auto t = chat::ChatTemplate::parse(source, limits);
  if (!t) {
    require(t.status().code() == Code::kInvalidArgument, "parse failed with an unexpected code",
            t.status().message());
    return 0;
  }
  chat::ChatRenderOptions opt;
  opt.bos_token = "<s>";
  opt.eos_token = "</s>";
  opt.tools_ordered = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "get", "description": "d",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  for (bool gen : {true, false}) {
    opt.add_generation_prompt = gen;
    auto out = chat::render_chat_ordered(*t, conversation(), opt);
    if (!out)
      require(out.status().code() == Code::kInvalidArgument,
              "render failed with an unexpected code", out.status().message());
    else
      require(out->size() <= limits.max_output_bytes, "output past the limit");
  }
  auto plain = t->render(nlohmann::json{{"messages", nlohmann::json::array()}, {"x", 1}});
  if (!plain)
    require(plain.status().code() == Code::kInvalidArgument, "render failed with an unexpected code",
            plain.status().message());
  return 0;
}
