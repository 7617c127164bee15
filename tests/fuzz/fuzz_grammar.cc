// libFuzzer target for the grammar module: the first byte picks GBNF or a
// JSON schema, the text up to the first NUL is compiled, and the bytes after
// it are fed to a matcher. Compiling may fail, but only with
// kInvalidArgument and a message; a compiled grammar must run on any bytes
// within the matcher's bounds, and the token mask of every state reached must
// agree with trying each token on its own.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "grammar/gbnf.h"
#include "grammar/matcher.h"
#include "grammar/schema.h"
#include "grammar/token_masks.h"

using namespace sustain;
using namespace sustain::grammar;

namespace {

void require(bool cond, const char* what, const std::string& detail = {}) {
  if (cond) return;
  std::fprintf(stderr, "fuzz_grammar: property violated: %s %s\n", what, detail.c_str());
  std::abort();
}

std::shared_ptr<const TokenVocab> small_vocab() {
  static const auto v = std::make_shared<const TokenVocab>(
      std::vector<std::string>{"a", "b", "ab",   "{",    "}",    "\"",   ":", ",", " ",   "1",
                               "-", "é", "\xC3", "\xA9", "null", "true", "[", "]", "x\"", ""},
      std::vector<int32_t>{19});
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool schema = (data[0] & 1) != 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t nul = rest.find('\0');
  const std::string_view text = rest.substr(0, nul);
  const std::string_view input = nul == std::string_view::npos ? "" : rest.substr(nul + 1);

  Expected<Grammar> g = Status(Code::kInternal, "unset");
  if (schema) {
    auto j = nlohmann::ordered_json::parse(text, nullptr, false);
    if (j.is_discarded()) return 0;
    g = compile_json_schema(j);
  } else {
    g = parse_gbnf(text);
  }
  if (!g) {
    require(g.status().code() == Code::kInvalidArgument, "unexpected error code",
            g.status().message());
    require(!g.status().message().empty(), "an error without a message");
    return 0;
  }
  auto shared = std::make_shared<const Grammar>(std::move(*g));
  Matcher m(shared);
  TokenMasker masker(small_vocab());
  const auto& v = *small_vocab();
  for (size_t i = 0; i <= input.size() && i < 64; ++i) {
    require(m.state().tops.size() <= Matcher::kMaxStacks, "too many stacks");
    const TokenMask& mask = masker.mask(m);
    for (int32_t id = 0; id < v.n_vocab(); ++id) {
      if (v.piece(id).empty()) continue;
      Matcher probe = m;
      require(probe.advance(v.piece(id)) == mask_has(mask, id), "mask disagrees with the matcher");
    }
    if (i == input.size()) break;
    m.advance(input.substr(i, 1));
  }
  return 0;
}
