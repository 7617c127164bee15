// Needle-in-a-haystack with text cases for real models, in the style of
// RULER's niah_single: a needle sentence ("... magic number for {key} is
// {value}.") hidden among the sentences of any text file (repeated to fill
// the context), optional distractor sentences with other keys and values, and
// a question whose answer prefix makes the value the continuation. The model
// is scored by greedy generation: correct when the value string appears.
//
// Prompts are built from separately tokenized pieces (intro, each sentence,
// needle, question) with the model's own tokenizer, so their length is exact
// in tokens. Every piece after the first starts with a space; the tokenizer
// callback turns that into the tokens the piece has when it continues a text.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "eval/needle.h"

namespace sustain::tokenizer {
class Tokenizer;
}

namespace sustain::eval {

class ModelRunner;

// Tokens of a prompt piece (no BOS/EOS). A piece starting with ' ' continues
// earlier text.
using PieceTokenizer = std::function<Expected<std::vector<int32_t>>(std::string_view piece)>;

// The callback for a real tokenizer: SentencePiece vocabularies that add a
// space before the input already give a continuation's tokens for the piece
// without its leading space.
PieceTokenizer piece_tokenizer(const tokenizer::Tokenizer& tok);

// The haystack: a text file's sentences, whitespace runs collapsed to one
// space. A sentence ends at '.', '!' or '?' (closing quotes or brackets
// included) followed by whitespace or the end of the text.
struct Haystack {
  std::string source;                  // names the file in errors
  std::vector<std::string> sentences;  // without leading or trailing spaces
};
// Errors: empty text, invalid UTF-8 (with the byte offset), no sentence end.
Expected<Haystack> split_haystack(const std::string& text, const std::string& source);

// The number of built-in phrasings (intro, needle, question + answer prefix).
int text_needle_phrasing_count();

struct TextNeedleSpec {
  std::vector<int64_t> ctx;    // prompt lengths in tokens (BOS included)
  std::vector<double> depths;  // each in [0, 1]
  int trials = 4;              // cases per (ctx, depth); trial t uses phrasing t mod `phrasings`
  int phrasings = 0;           // 1..text_needle_phrasing_count(); 0 = all of them
  int distractors = 0;         // sentences of the needle's form with other keys and values
  uint64_t seed = 1;
  int32_t bos = -1;  // prepended when ≥ 0
};

struct TextNeedleCase {
  // ids (ctx of them), ctx, depth, needle_pos (first needle token), tag
  // "ctx:depth:needle_pos"; answer is -1 (the answer is `value`, a string).
  NeedleCase c;
  int64_t needle_len = 0;                // tokens of the needle sentence
  int64_t body_begin = 0, body_end = 0;  // token range of haystack + needle + distractors
  int64_t max_unit_len = 0;              // longest sentence of the body in tokens (depth tolerance)
  int phrasing = 0;
  std::string key, value;  // value: 7 digits
  std::vector<std::string> distractor_keys, distractor_values;
  std::vector<int64_t> distractor_pos;  // first token of each distractor sentence
};

// Cases for every (ctx, depth, trial), deterministic in `seed`. The needle
// sentence starts at the sentence boundary of the body nearest to
// depth × (body tokens − needle tokens) tokens into it; the body (haystack
// sentences taken cyclically from a random start, the first one cut at its
// front to make the length exact, so every needle or distractor follows a
// sentence end; the distractors at random sentence boundaries) fills what
// the intro and question leave of ctx. Keys are distinct word pairs, values
// distinct 7-digit numbers that occur nowhere in the haystack. Errors name the
// field and value (a context too small for the needle and question, a bad
// depth, too many distractors, a failing tokenizer).
Expected<std::vector<TextNeedleCase>> generate_text_needle_cases(const TextNeedleSpec& spec,
                                                                 const Haystack& hay,
                                                                 const PieceTokenizer& tokenize);

// The model's greedy continuation of one case.
struct TextNeedleAnswer {
  std::vector<int32_t> tokens;
  std::string text;      // detokenized
  bool correct = false;  // text contains the value
};
// Feeds the prompt to `runner` (after reset()) and generates up to `max_new`
// tokens by argmax, stopping early at end of generation or once the value has
// appeared. The runner's context must hold ctx + max_new − 1 tokens.
Expected<TextNeedleAnswer> answer_text_needle(ModelRunner& runner, const tokenizer::Tokenizer& tok,
                                              const TextNeedleCase& c, int max_new);

}  // namespace sustain::eval
