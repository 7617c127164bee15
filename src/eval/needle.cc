#include "eval/needle.h"
#include "base/splitmix.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

#include <fmt/format.h>

namespace sustain::eval {
namespace {


bool parse_i64(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (*end != '\0' || errno != 0) return false;
  *out = v;
  return true;
}

}  // namespace

Expected<std::vector<NeedleCase>> parse_needle_cases(const std::string& text,
                                                     const std::string& source) {
  std::vector<NeedleCase> cases;
  std::istringstream in(text);
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    std::istringstream ls(line);
    std::string ans_s, tag;
    ls >> ans_s >> tag;
    NeedleCase c;
    int64_t ans = 0;
    if (!parse_i64(ans_s, &ans) || ans < 0 || ans > std::numeric_limits<int32_t>::max())
      return error(Code::kBadFile, "{}:{}: answer '{}' is not a token id", source, line_no, ans_s);
    c.answer = static_cast<int32_t>(ans);
    c.tag = tag;
    const size_t c1 = tag.find(':'), c2 = c1 == std::string::npos ? c1 : tag.find(':', c1 + 1);
    if (c2 == std::string::npos)
      return error(Code::kBadFile, "{}:{}: tag '{}' is not ctx:depth:needle_position", source,
                   line_no, tag);
    const std::string depth_s = tag.substr(c1 + 1, c2 - c1 - 1);
    char* end = nullptr;
    c.depth = std::strtod(depth_s.c_str(), &end);
    if (!parse_i64(tag.substr(0, c1), &c.ctx) || !parse_i64(tag.substr(c2 + 1), &c.needle_pos) ||
        depth_s.empty() || *end != '\0' || !(c.depth >= 0.0 && c.depth <= 1.0))
      return error(Code::kBadFile,
                   "{}:{}: tag '{}' is not ctx:depth:needle_position (depth in [0, 1])", source,
                   line_no, tag);
    std::string tok;
    while (ls >> tok) {
      int64_t id = 0;
      if (!parse_i64(tok, &id) || id < 0 || id > std::numeric_limits<int32_t>::max())
        return error(Code::kBadFile, "{}:{}: '{}' (id {}) is not a token id", source, line_no, tok,
                     c.ids.size());
      c.ids.push_back(static_cast<int32_t>(id));
    }
    if (c.ids.size() < 2)
      return error(Code::kBadFile, "{}:{}: case {} has {} ids (at least 2 needed)", source, line_no,
                   tag, c.ids.size());
    if (c.ctx != static_cast<int64_t>(c.ids.size()))
      return error(Code::kBadFile, "{}:{}: tag {} says {} tokens but the line has {} ids", source,
                   line_no, tag, c.ctx, c.ids.size());
    if (c.needle_pos < 0 || c.needle_pos >= c.ctx - 1)
      return error(Code::kBadFile, "{}:{}: needle position {} is outside the prompt of {} tokens",
                   source, line_no, c.needle_pos, c.ctx);
    cases.push_back(std::move(c));
  }
  if (cases.empty()) return error(Code::kBadFile, "{}: no cases", source);
  return cases;
}

std::string format_needle_case(const NeedleCase& c) {
  return fmt::format("{} {} {}", c.answer, c.tag, fmt::join(c.ids, " "));
}

Expected<std::vector<NeedleCase>> generate_needle_cases(const NeedleGenSpec& spec) {
  const NeedleVocab& v = spec.vocab;
  if (spec.ctx.empty() || spec.depths.empty())
    return error(Code::kInvalidArgument, "needle cases: give at least one context and one depth");
  if (spec.trials < 1)
    return error(Code::kInvalidArgument, "needle cases: --trials {} must be at least 1", spec.trials);
  if (spec.distractor_pairs < 0 || spec.distractor_pairs > 4096)
    return error(Code::kInvalidArgument, "needle cases: {} distractor pairs is outside [0, 4096]",
                 spec.distractor_pairs);
  if (!(spec.distractor_value_share >= 0.0 && spec.distractor_value_share < 1.0))
    return error(Code::kInvalidArgument, "needle cases: distractor value share {} is outside [0, 1)",
                 spec.distractor_value_share);
  if (v.n_keys < 2 || v.n_values < 1)
    return error(Code::kInvalidArgument, "needle cases: need at least 2 keys and 1 value");
  std::vector<int32_t> fillers;
  for (int32_t t = v.first_filler; t < v.n_vocab; ++t)
    if (!v.is_key(t) && !v.is_value(t)) fillers.push_back(t);
  if (fillers.empty()) return error(Code::kInvalidArgument, "needle cases: the vocabulary has no filler ids");
  const int64_t min_ctx = 4 * (spec.distractor_pairs + 1) + 8;
  for (int64_t L : spec.ctx)
    if (L < min_ctx || L > (int64_t{1} << 24))
      return error(Code::kInvalidArgument,
                   "needle cases: context {} is outside [{}, 16M] (room for the needle and {} "
                   "distractor pairs)",
                   L, min_ctx, spec.distractor_pairs);
  for (double d : spec.depths)
    if (!(d >= 0.0 && d <= 1.0))
      return error(Code::kInvalidArgument, "needle cases: depth {} is outside [0, 1]", d);

  std::vector<NeedleCase> out;
  for (int64_t L : spec.ctx)
    for (size_t di = 0; di < spec.depths.size(); ++di)
      for (int trial = 0; trial < spec.trials; ++trial) {
        const double depth = spec.depths[di];
        // One generator per case: a case does not change when others are added.
        SplitMix64 g{spec.seed ^ (static_cast<uint64_t>(L) * 0x632be59bd9b4e019ull) ^
                     (static_cast<uint64_t>(std::llround(depth * 1e6)) * 0x8cb92ba72f3d8dd7ull) ^
                     (static_cast<uint64_t>(trial) * 0xd6e8feb86659fd93ull)};
        g.next();
        NeedleCase c;
        c.ctx = L;
        c.depth = depth;
        c.needle_pos = 1 + std::llround(depth * static_cast<double>(L - 6));
        c.ids.resize(static_cast<size_t>(L));
        c.ids[0] = v.bos;
        for (int64_t i = 1; i < L - 1; ++i)
          c.ids[static_cast<size_t>(i)] =
              g.uniform() < spec.distractor_value_share
                  ? v.value0 + static_cast<int32_t>(g.below(static_cast<uint64_t>(v.n_values)))
                  : fillers[g.below(fillers.size())];
        const int32_t key = v.key0 + static_cast<int32_t>(g.below(static_cast<uint64_t>(v.n_keys)));
        c.answer = v.value0 + static_cast<int32_t>(g.below(static_cast<uint64_t>(v.n_values)));
        std::vector<uint8_t> used(static_cast<size_t>(L), 0);
        used[0] = used[static_cast<size_t>(L - 1)] = 1;
        c.ids[static_cast<size_t>(c.needle_pos)] = key;
        c.ids[static_cast<size_t>(c.needle_pos + 1)] = c.answer;
        used[static_cast<size_t>(c.needle_pos)] = used[static_cast<size_t>(c.needle_pos + 1)] = 1;
        // Distractor pairs on free slot pairs; L ≥ 4·(pairs+1)+8 leaves at
        // least half of the slots free, so rejection ends quickly.
        for (int p = 0; p < spec.distractor_pairs;) {
          const int64_t at = 1 + static_cast<int64_t>(g.below(static_cast<uint64_t>(L - 3)));
          if (used[static_cast<size_t>(at)] || used[static_cast<size_t>(at + 1)]) continue;
          int32_t dk = key;
          while (dk == key) dk = v.key0 + static_cast<int32_t>(g.below(static_cast<uint64_t>(v.n_keys)));
          c.ids[static_cast<size_t>(at)] = dk;
          c.ids[static_cast<size_t>(at + 1)] =
              v.value0 + static_cast<int32_t>(g.below(static_cast<uint64_t>(v.n_values)));
          used[static_cast<size_t>(at)] = used[static_cast<size_t>(at + 1)] = 1;
          ++p;
        }
        c.ids[static_cast<size_t>(L - 1)] = key;
        c.tag = fmt::format("{}:{}:{}", L, depth, c.needle_pos);
        out.push_back(std::move(c));
      }
  return out;
}

NeedleResult score_needle(const NeedleCase& c, const float* logits, int64_t n_vocab) {
  NeedleResult r;
  int64_t best = 0;
  for (int64_t i = 1; i < n_vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  r.predicted = static_cast<int32_t>(best);
  r.correct = best == c.answer;
  if (c.answer < 0 || c.answer >= n_vocab) return r;
  double m = logits[best], s = 0.0;
  float other = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n_vocab; ++i) {
    s += std::exp(static_cast<double>(logits[i]) - m);
    if (i != c.answer) other = std::max(other, logits[i]);
  }
  r.p_answer = std::exp(static_cast<double>(logits[c.answer]) - m) / s;
  r.logit_margin = static_cast<double>(logits[c.answer]) - other;
  return r;
}

void NeedleTable::add(const NeedleCase& c, bool ok) {
  auto& cell = cells[{c.ctx, c.depth}];
  cell.first += ok;
  cell.second += 1;
  correct += ok;
  total += 1;
}

}  // namespace sustain::eval
