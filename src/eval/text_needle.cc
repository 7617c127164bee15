#include "eval/text_needle.h"
#include "base/splitmix.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <unordered_set>

#include <fmt/format.h>

#include "eval/runner.h"
#include "tokenizer/tokenizer.h"

namespace sustain::eval {
namespace {

struct Phrasing {
  const char* intro;     // the first piece of the prompt (no leading space)
  const char* needle;    // {key}, {value}
  const char* question;  // {key}; ends with the answer prefix, so the value is the continuation
};

// Several phrasings so that a score does not hinge on one wording. The first
// follows RULER's niah template; the others change every noun and the order.
constexpr Phrasing kPhrasings[] = {
    {"Some special magic numbers are hidden within the following text. Make sure to memorize "
     "them. I will quiz you about the numbers afterwards.",
     "One of the special magic numbers for {key} is: {value}.",
     "What is the special magic number for {key} mentioned in the provided text? The special "
     "magic number for {key} mentioned in the provided text is"},
    {"A secret code is hidden in the story below. Read it carefully: you will be asked for it at "
     "the end.",
     "The secret code for {key} is {value}.",
     "Question: what is the secret code for {key}? Answer: the secret code for {key} is"},
    {"The following text contains a few pass keys. Find the one you will be asked about.",
     "Remember it: the pass key of {key} is {value}.",
     "Which pass key belongs to {key}? The pass key of {key} is"},
    {"Read the notes below. One of them records a number that you will need later.",
     "Note: {key} has the number {value}.",
     "What number does {key} have according to the notes? According to the notes, {key} has the "
     "number"},
};
constexpr int kNumPhrasings = static_cast<int>(std::size(kPhrasings));

// Keys are adjective-noun pairs, like RULER's word keys: real words, so a
// real tokenizer splits them as it would in text.
constexpr const char* kAdjectives[] = {
    "quiet",  "amber",  "rapid",   "hollow",  "silver", "gentle", "frozen", "bright",
    "narrow", "crisp",  "dusty",   "golden",  "humble", "lively", "marble", "noble",
    "orange", "pale",   "rugged",  "scarlet", "tender", "velvet", "wooden", "yellow",
    "bitter", "clever", "distant", "eager",   "fancy",  "hidden", "jolly",  "lucky"};
constexpr const char* kNouns[] = {
    "harbor", "falcon", "lantern", "meadow", "pebble", "river",  "summit", "thistle",
    "anchor", "beacon", "canyon",  "dragon", "ember",  "forest", "garden", "island",
    "jacket", "kettle", "ladder",  "mirror", "needle", "orchid", "parrot", "quarry",
    "rocket", "saddle", "tunnel",  "violin", "walnut", "window", "zephyr", "willow"};
constexpr int kNumKeys = static_cast<int>(std::size(kAdjectives) * std::size(kNouns));
constexpr int kMaxDistractors = 256;


// Offset of the first byte that is not part of valid UTF-8 (overlongs,
// surrogates and code points above U+10FFFF included), or npos.
size_t invalid_utf8_at(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = p[i];
    size_t len = 0;
    uint32_t cp = 0, min = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, cp = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return i;
    }
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += len;
  }
  return std::string::npos;
}

bool is_space(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v';
}

std::string fill(const char* tmpl, const std::string& key, const std::string& value) {
  std::string out, t = tmpl;
  for (size_t i = 0; i < t.size();) {
    if (t.compare(i, 5, "{key}") == 0) {
      out += key;
      i += 5;
    } else if (t.compare(i, 7, "{value}") == 0) {
      out += value;
      i += 7;
    } else {
      out += t[i++];
    }
  }
  return out;
}

// A piece that continues earlier text. (Not `" " + s`: GCC 12 warns falsely there.)
std::string continued(const std::string& s) {
  std::string r(1, ' ');
  r += s;
  return r;
}

std::string key_name(int k) {
  constexpr int kNounCount = static_cast<int>(std::size(kNouns));
  return fmt::format("{}-{}", kAdjectives[k / kNounCount], kNouns[k % kNounCount]);
}

// Tokenizes haystack sentences on first use: a long file costs only the
// sentences a context needs.
class SentenceTokens {
 public:
  SentenceTokens(const Haystack& h, const PieceTokenizer& t)
      : h_(h), t_(t), cache_(h.sentences.size()) {}
  Expected<const std::vector<int32_t>*> get(size_t i) {
    if (!cache_[i]) {
      auto ids = t_(continued(h_.sentences[i]));
      if (!ids)
        return ids.status().with_context(
            fmt::format("{}: tokenizing sentence {}", h_.source, i + 1));
      if (ids->empty())
        return error(Code::kBadFile, "{}: sentence {} ('{}') has no tokens", h_.source, i + 1,
                     h_.sentences[i].substr(0, 60));
      cache_[i] = std::move(*ids);
    }
    return &*cache_[i];
  }

 private:
  const Haystack& h_;
  const PieceTokenizer& t_;
  std::vector<std::optional<std::vector<int32_t>>> cache_;
};

Expected<std::vector<int32_t>> tokenize_piece(const PieceTokenizer& t, const std::string& piece,
                                              const char* what) {
  auto ids = t(piece);
  if (!ids) return ids.status().with_context(fmt::format("tokenizing the {} '{}'", what, piece));
  if (ids->empty()) return error(Code::kInternal, "the {} '{}' has no tokens", what, piece);
  return ids;
}

}  // namespace

PieceTokenizer piece_tokenizer(const tokenizer::Tokenizer& tok) {
  // A SentencePiece vocabulary that adds a space before the input shows it in
  // the first piece of a bare word.
  bool adds_space = false;
  if (auto a = tok.encode("a", false, false); a && !a->empty()) {
    const std::string p = tok.token_to_piece(a->front(), false);
    adds_space = !p.empty() && p[0] == ' ';
  }
  return [&tok, adds_space](std::string_view piece) -> Expected<std::vector<int32_t>> {
    if (adds_space && !piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
    return tok.encode(piece, false, false);
  };
}

Expected<Haystack> split_haystack(const std::string& text, const std::string& source) {
  Haystack h;
  h.source = source;
  if (size_t bad = invalid_utf8_at(text); bad != std::string::npos)
    return error(Code::kBadFile, "haystack {} is not valid UTF-8: byte 0x{:02X} at offset {}",
                 source, static_cast<unsigned char>(text[bad]), bad);
  std::string norm;
  norm.reserve(text.size());
  for (char ch : text) {
    if (is_space(ch)) {
      if (!norm.empty() && norm.back() != ' ') norm += ' ';
    } else if (ch == '\0') {
      return error(Code::kBadFile, "haystack {} contains a NUL byte", source);
    } else {
      norm += ch;
    }
  }
  while (!norm.empty() && norm.back() == ' ') norm.pop_back();
  if (norm.empty()) return error(Code::kBadFile, "haystack {} has no text", source);
  bool any_end = false;
  size_t start = 0;
  for (size_t i = 0; i < norm.size(); ++i) {
    const char ch = norm[i];
    if (ch != '.' && ch != '!' && ch != '?') continue;
    size_t j = i + 1;
    while (j < norm.size() &&
           (norm[j] == '"' || norm[j] == '\'' || norm[j] == ')' || norm[j] == ']'))
      ++j;
    if (j < norm.size() && norm[j] != ' ') continue;  // "3.5", "e.g.x": not an end
    any_end = true;
    h.sentences.push_back(norm.substr(start, j - start));
    start = j + 1;
    i = j;
  }
  if (!any_end)
    return error(Code::kBadFile,
                 "haystack {} has no sentence end ('.', '!' or '?' before a space or the end of "
                 "the text), so a needle has nowhere to go",
                 source);
  if (start < norm.size()) h.sentences.push_back(norm.substr(start));
  return h;
}

int text_needle_phrasing_count() {
  return kNumPhrasings;
}

Expected<std::vector<TextNeedleCase>> generate_text_needle_cases(const TextNeedleSpec& spec,
                                                                 const Haystack& hay,
                                                                 const PieceTokenizer& tokenize) {
  if (spec.ctx.empty() || spec.depths.empty())
    return error(Code::kInvalidArgument, "text needle: give at least one context and one depth");
  if (spec.trials < 1)
    return error(Code::kInvalidArgument, "text needle: --trials {} must be at least 1",
                 spec.trials);
  const int n_phr = spec.phrasings == 0 ? kNumPhrasings : spec.phrasings;
  if (n_phr < 1 || n_phr > kNumPhrasings)
    return error(Code::kInvalidArgument, "text needle: --phrasings {} is outside [1, {}]",
                 spec.phrasings, kNumPhrasings);
  if (spec.distractors < 0 || spec.distractors > kMaxDistractors)
    return error(Code::kInvalidArgument, "text needle: --distractors {} is outside [0, {}]",
                 spec.distractors, kMaxDistractors);
  for (int64_t L : spec.ctx)
    if (L < 1 || L > (int64_t{1} << 24))
      return error(Code::kInvalidArgument, "text needle: context {} is outside [1, 16M]", L);
  for (double d : spec.depths)
    if (!(d >= 0.0 && d <= 1.0))
      return error(Code::kInvalidArgument, "text needle: depth {} is outside [0, 1]", d);
  if (hay.sentences.empty())
    return error(Code::kInvalidArgument, "text needle: haystack {} has no sentences", hay.source);

  SentenceTokens sent(hay, tokenize);
  // Every 7-digit window of the haystack's digit runs, found once: a value
  // must not occur in the haystack, and a book-sized file is scanned only here.
  std::unordered_set<std::string> hay_numbers;
  for (const std::string& s : hay.sentences)
    for (size_t i = 0; i < s.size();) {
      size_t j = i;
      while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
      for (size_t k = i; k + 7 <= j; ++k) hay_numbers.insert(s.substr(k, 7));
      i = j == i ? i + 1 : j;
    }
  std::vector<TextNeedleCase> out;
  for (int64_t L : spec.ctx)
    for (double depth : spec.depths)
      for (int trial = 0; trial < spec.trials; ++trial) {
        // One generator per case: a case does not change when others are added.
        SplitMix64 g{spec.seed ^ 0x7e57ull ^ (static_cast<uint64_t>(L) * 0x632be59bd9b4e019ull) ^
                     (static_cast<uint64_t>(std::llround(depth * 1e6)) * 0x8cb92ba72f3d8dd7ull) ^
                     (static_cast<uint64_t>(trial) * 0xd6e8feb86659fd93ull)};
        g.next();
        TextNeedleCase tc;
        tc.phrasing = trial % n_phr;
        const Phrasing& ph = kPhrasings[tc.phrasing];

        // Keys: distinct; values: distinct 7-digit numbers absent from the haystack.
        std::set<int> keys;
        std::set<std::string> values;
        auto new_value = [&]() {
          for (;;) {
            std::string v = fmt::format("{}", 1000000 + g.below(9000000));
            if (values.count(v) || hay_numbers.count(v)) continue;
            values.insert(v);
            return v;
          }
        };
        const int key = static_cast<int>(g.below(kNumKeys));
        keys.insert(key);
        tc.key = key_name(key);
        tc.value = new_value();
        for (int i = 0; i < spec.distractors; ++i) {
          int k = key;
          while (keys.count(k)) k = static_cast<int>(g.below(kNumKeys));
          keys.insert(k);
          tc.distractor_keys.push_back(key_name(k));
          tc.distractor_values.push_back(new_value());
        }

        SUSTAIN_ASSIGN_OR_RETURN(auto intro, tokenize_piece(tokenize, ph.intro, "intro"));
        const std::string needle_text = continued(fill(ph.needle, tc.key, tc.value));
        const std::string question_text = continued(fill(ph.question, tc.key, ""));
        SUSTAIN_ASSIGN_OR_RETURN(auto needle, tokenize_piece(tokenize, needle_text, "needle"));
        SUSTAIN_ASSIGN_OR_RETURN(auto question,
                                 tokenize_piece(tokenize, question_text, "question"));
        std::vector<std::vector<int32_t>> dis;
        int64_t dis_len = 0;
        for (int i = 0; i < spec.distractors; ++i) {
          const size_t di = static_cast<size_t>(i);
          const std::string text =
              continued(fill(ph.needle, tc.distractor_keys[di], tc.distractor_values[di]));
          SUSTAIN_ASSIGN_OR_RETURN(auto d, tokenize_piece(tokenize, text, "distractor"));
          dis_len += static_cast<int64_t>(d.size());
          dis.push_back(std::move(d));
        }
        const int64_t fixed = (spec.bos >= 0 ? 1 : 0) + static_cast<int64_t>(intro.size()) +
                              static_cast<int64_t>(question.size());
        const int64_t n_needle = static_cast<int64_t>(needle.size());
        const int64_t hay_len = L - fixed - n_needle - dis_len;
        if (hay_len < 0)
          return error(Code::kInvalidArgument,
                       "text needle: context {} is too small: the intro and question take {} "
                       "tokens, the needle {} and {} distractors {} (phrasing {})",
                       L, fixed, n_needle, spec.distractors, dis_len, tc.phrasing + 1);

        // Haystack sentences from a random start, cyclically. The excess is cut
        // from the front, so every place a needle can go follows a sentence end.
        std::vector<std::vector<int32_t>> units;
        int64_t have = 0;
        size_t si = static_cast<size_t>(g.below(hay.sentences.size()));
        while (have < hay_len) {
          SUSTAIN_ASSIGN_OR_RETURN(const std::vector<int32_t>* s, sent.get(si));
          units.push_back(*s);
          have += static_cast<int64_t>(s->size());
          si = (si + 1) % hay.sentences.size();
        }
        size_t first = 0;
        for (int64_t excess = have - hay_len; excess > 0;) {
          std::vector<int32_t>& u = units[first];
          if (excess >= static_cast<int64_t>(u.size())) {
            excess -= static_cast<int64_t>(u.size());
            ++first;
          } else {
            u.erase(u.begin(), u.begin() + excess);
            excess = 0;
          }
        }
        units.erase(units.begin(), units.begin() + static_cast<std::ptrdiff_t>(first));
        // Distractors at random sentence boundaries (0 .. units.size()).
        std::vector<std::pair<size_t, size_t>> at;  // (boundary, distractor)
        for (size_t i = 0; i < dis.size(); ++i) at.push_back({g.below(units.size() + 1), i});
        std::sort(at.begin(), at.end());
        std::vector<std::vector<int32_t>> body;  // the units with the distractors in place
        std::vector<int> dis_index;              // per body unit: distractor index or -1
        size_t ai = 0;
        for (size_t b = 0; b <= units.size(); ++b) {
          for (; ai < at.size() && at[ai].first == b; ++ai) {
            body.push_back(dis[at[ai].second]);
            dis_index.push_back(static_cast<int>(at[ai].second));
          }
          if (b < units.size()) {
            body.push_back(std::move(units[b]));
            dis_index.push_back(-1);
          }
        }
        // The needle goes to the boundary nearest to depth × (body − needle).
        const double target = depth * static_cast<double>(hay_len + dis_len);
        size_t best_b = 0;
        double best_dist = std::numeric_limits<double>::infinity();
        int64_t off = 0;
        for (size_t b = 0; b <= body.size(); ++b) {
          const double dist = std::abs(static_cast<double>(off) - target);
          if (dist < best_dist) best_dist = dist, best_b = b;
          if (b < body.size()) off += static_cast<int64_t>(body[b].size());
        }

        NeedleCase& c = tc.c;
        c.answer = -1;
        c.ctx = L;
        c.depth = depth;
        c.ids.reserve(static_cast<size_t>(L));
        if (spec.bos >= 0) c.ids.push_back(spec.bos);
        c.ids.insert(c.ids.end(), intro.begin(), intro.end());
        tc.body_begin = static_cast<int64_t>(c.ids.size());
        tc.distractor_pos.assign(dis.size(), 0);
        for (size_t b = 0; b <= body.size(); ++b) {
          if (b == best_b) {
            c.needle_pos = static_cast<int64_t>(c.ids.size());
            c.ids.insert(c.ids.end(), needle.begin(), needle.end());
          }
          if (b == body.size()) break;
          tc.max_unit_len = std::max(tc.max_unit_len, static_cast<int64_t>(body[b].size()));
          if (dis_index[b] >= 0)
            tc.distractor_pos[static_cast<size_t>(dis_index[b])] =
                static_cast<int64_t>(c.ids.size());
          c.ids.insert(c.ids.end(), body[b].begin(), body[b].end());
        }
        tc.body_end = static_cast<int64_t>(c.ids.size());
        c.ids.insert(c.ids.end(), question.begin(), question.end());
        if (static_cast<int64_t>(c.ids.size()) != L)
          return error(Code::kInternal, "text needle: built {} tokens for a context of {}",
                       c.ids.size(), L);
        tc.needle_len = n_needle;
        c.tag = fmt::format("{}:{}:{}", L, depth, c.needle_pos);
        out.push_back(std::move(tc));
      }
  return out;
}

Expected<TextNeedleAnswer> answer_text_needle(ModelRunner& runner, const tokenizer::Tokenizer& tok,
                                              const TextNeedleCase& c, int max_new) {
  if (max_new < 1)
    return error(Code::kInvalidArgument, "text needle: {} tokens to generate (at least 1)",
                 max_new);
  TextNeedleAnswer a;
  runner.reset();
  std::vector<float> logits;
  SUSTAIN_TRY(runner.feed(c.c.ids.data(), c.c.ctx, false, &logits));
  const int64_t nv = runner.n_vocab();
  for (int i = 0; i < max_new; ++i) {
    int32_t best = 0;
    for (int64_t t = 1; t < nv; ++t)
      if (logits[static_cast<size_t>(t)] > logits[static_cast<size_t>(best)])
        best = static_cast<int32_t>(t);
    if (tok.is_eog(best)) break;
    a.tokens.push_back(best);
    a.text = tok.decode(a.tokens, false);
    if (a.text.find(c.value) != std::string::npos) break;
    if (i + 1 < max_new) SUSTAIN_TRY(runner.feed(&best, 1, false, &logits));
  }
  a.correct = a.text.find(c.value) != std::string::npos;
  return a;
}

}  // namespace sustain::eval
