#include "server/choice.h"

namespace sustain::server {

using nlohmann::json;

ChoiceText::ChoiceText(const tokenizer::Tokenizer& tok, std::vector<std::string> stops,
                       bool logprobs, int32_t keep_token)
    : tok_(&tok),
      dec_(tok),
      stop_(std::move(stops)),
      logprobs_(logprobs),
      keep_token_(keep_token) {}

std::string ChoiceText::push(const engine::TokenEvent& t) {
  if (stop_.stopped()) return {};
  ++tokens_;
  if (logprobs_) {
    TokenLogprobEntry e;
    e.piece = tok_->token_to_piece(t.id, false);
    e.logprob = t.logprob;
    for (const auto& alt : t.top)
      e.top.emplace_back(tok_->token_to_piece(alt.id, false), alt.logprob);
    pending_.push_back(std::move(e));
  }
  if (t.id == keep_token_) return stop_.push(dec_.flush() + tok_->token_to_piece(t.id, true));
  return stop_.push(dec_.push(t.id));
}

std::string ChoiceText::finish() {
  if (stop_.stopped()) return {};
  std::string out = stop_.push(dec_.flush());
  if (stop_.stopped()) return out;
  return out + stop_.flush();
}

std::vector<TokenLogprobEntry> ChoiceText::take_logprobs() {
  std::vector<TokenLogprobEntry> out;
  out.swap(pending_);
  return out;
}

namespace {

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace

json chat_logprobs_json(const std::vector<TokenLogprobEntry>& entries) {
  json content = json::array();
  for (const auto& e : entries) {
    json top = json::array();
    for (const auto& [piece, lp] : e.top)
      top.push_back({{"token", piece}, {"logprob", lp}, {"bytes", bytes_of(piece)}});
    content.push_back({{"token", e.piece},
                       {"logprob", e.logprob},
                       {"bytes", bytes_of(e.piece)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}, {"refusal", nullptr}};
}

json completion_logprobs_json(const std::vector<TokenLogprobEntry>& entries, int64_t& offset) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  for (const auto& e : entries) {
    tokens.push_back(e.piece);
    lps.push_back(e.logprob);
    json top = json::object();
    for (const auto& [piece, lp] : e.top) top[piece] = lp;
    tops.push_back(top);
    offs.push_back(offset);
    offset += static_cast<int64_t>(e.piece.size());
  }
  return {
      {"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

}  // namespace sustain::server
