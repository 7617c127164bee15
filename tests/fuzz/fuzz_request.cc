// libFuzzer target for the server's request validation: the first byte picks
// the route, the rest is the body. parse_request and the checks against the
// model (token ids, logit_bias, max_tokens) may reject it, but only with
// kInvalidArgument naming the field, and never crash or allocate without
// bound; whatever they accept must be within the documented ranges.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/request.h"

using namespace sustain;
using namespace sustain::server;

namespace {

void require(bool cond, const char* what, const std::string& detail = {}) {
  if (cond) return;
  std::fprintf(stderr, "fuzz_request: property violated: %s %s\n", what, detail.c_str());
  std::abort();
}

void require_400(const Status& st, const char* what) {
  require(st.code() == Code::kInvalidArgument, what, st.message());
  require(!st.message().empty(), "an error without a message");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Endpoint ep = (data[0] & 1) ? Endpoint::kChat : Endpoint::kCompletions;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  (void)json_depth(body);
  RequestLimits limits;
  auto r = parse_request(body, ep, limits);
  if (!r) {
    require_400(r.status(), "parse_request failed with an unexpected code");
    return 0;
  }
  const auto& s = r->sampling;
  require(s.temperature >= 0.0f && s.temperature <= 2.0f, "temperature out of range");
  require(s.top_p > 0.0f && s.top_p <= 1.0f, "top_p out of range");
  require(r->n >= 1 && r->n <= limits.max_n, "n out of range");
  require(static_cast<int>(r->stop.size()) <= limits.max_stop, "too many stop strings");
  for (const auto& b : s.logit_bias)
    require(b.id >= 0 && std::fabs(b.bias) <= sampling::kMaxLogitBias, "logit_bias out of range");
  for (int32_t n_vocab : {1, 50257}) {
    if (Status st = check_logit_bias(s, n_vocab); !st) require_400(st, "check_logit_bias");
    if (r->prompt_is_ids)
      if (Status st = check_token_ids(r->prompt_ids, n_vocab); !st) require_400(st, "check_token_ids");
  }
  for (int64_t n_prompt : {int64_t{1}, int64_t{4000}}) {
    auto m = resolve_max_tokens(*r, n_prompt, 4096, 16);
    if (!m)
      require_400(m.status(), "resolve_max_tokens");
    else
      require(*m >= 1 && n_prompt + *m <= 4096, "max_tokens past the context");
  }
  return 0;
}
