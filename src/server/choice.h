// One choice of a completion as it streams: engine tokens → UTF-8-safe text
// (the tokenizer's StreamDecoder never splits a character) → stop strings
// (held back, never sent) → text deltas, plus the logprob entries of the
// tokens consumed, in the JSON shapes of both OpenAI endpoints.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/api.h"
#include "server/stop_strings.h"
#include "tokenizer/tokenizer.h"

namespace sustain::server {

struct TokenLogprobEntry {
  std::string piece;  // the token's bytes (may be part of a UTF-8 character)
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;  // alternatives, most probable first
};

class ChoiceText {
 public:
  // `keep_token`: a control token whose text is kept in the reply (-1: none).
  ChoiceText(const tokenizer::Tokenizer& tok, std::vector<std::string> stops, bool logprobs,
             int32_t keep_token = -1);

  // Consumes one generated token and returns the text now safe to send.
  // After a stop string completes, stopped() is true and the rest is ignored.
  std::string push(const engine::TokenEvent& t);
  // No more tokens: the decoder's and the stop matcher's held-back text.
  std::string finish();
  bool stopped() const { return stop_.stopped(); }
  int64_t tokens() const { return tokens_; }  // tokens consumed (up to the stop)

  // Logprob entries of the tokens consumed since the last call.
  std::vector<TokenLogprobEntry> take_logprobs();

 private:
  const tokenizer::Tokenizer* tok_;
  tokenizer::StreamDecoder dec_;
  StopMatcher stop_;
  bool logprobs_;
  int32_t keep_token_;
  int64_t tokens_ = 0;
  std::vector<TokenLogprobEntry> pending_;
};

// {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}, ...]}
nlohmann::json chat_logprobs_json(const std::vector<TokenLogprobEntry>& entries);
// {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; `offset` is the
// byte offset of the first token in the choice's text and is advanced.
nlohmann::json completion_logprobs_json(const std::vector<TokenLogprobEntry>& entries,
                                        int64_t& offset);

}  // namespace sustain::server
