// `sustain tokenize -m M -p TEXT`: token ids as a JSON array on stdout.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_session.h"
#include "gguf/gguf.h"

namespace sustain::cli {
namespace {

struct TokenizeArgs {
  ModelArgs m;
  bool pieces = false;
};

int run_tokenize(const TokenizeArgs& a) {
  // Only the vocabulary is needed: no weights are touched, so this works on
  // vocab-only GGUF files too.
  auto f = gguf::File::open(a.m.model);
  if (!f) return fail(f.status().message());
  auto tok = tokenizer::Tokenizer::from_gguf(*f);
  if (!tok) return fail(tok.status().message());
  auto text = prompt_text(a.m);
  if (!text) return fail(text.status().message());
  auto ids = tok->encode(*text, !a.m.no_bos, a.m.special);
  if (!ids) return fail(ids.status().message());
  nlohmann::json j = nlohmann::json::array();
  for (int32_t id : *ids) {
    if (a.pieces) {
      // Pieces may be partial UTF-8 (byte tokens): give them as hex too.
      const std::string p = tok->token_to_piece(id, true);
      std::string hex;
      for (unsigned char c : p) hex += fmt::format("{:02x}", c);
      j.push_back({{"id", id}, {"piece", p}, {"hex", hex}});
    } else {
      j.push_back(id);
    }
  }
  std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return 0;
}

}  // namespace

Runner add_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  auto* sub = app.add_subcommand("tokenize", "Print the token ids of a text as a JSON array");
  add_model_flags(sub, a->m, /*with_prompt=*/true, /*with_cache=*/false);
  sub->add_flag("--pieces", a->pieces, "print {id, piece, hex} objects instead of bare ids");
  return [a] { return run_tokenize(*a); };
}

}  // namespace sustain::cli
