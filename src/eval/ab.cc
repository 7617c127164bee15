#include "eval/ab.h"
#include "base/html.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "eval/kl.h"

namespace sustain::eval {
namespace {

using Json = nlohmann::ordered_json;

// splitmix64: a full-period integer mixer; fixed, so seeds replay everywhere.
uint64_t mix(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform double in [0, 1) from the top 53 bits.
double unit(uint64_t& x) {
  return static_cast<double>(mix(x) >> 11) * 0x1.0p-53;
}

double mean(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// |Σ ±d| counts as "at least as large" within a relative tolerance, so the
// observed pattern always counts itself despite summation-order rounding.
double tolerance(const std::vector<double>& d) {
  double s = 0.0;
  for (double x : d) s += std::fabs(x);
  return 1e-9 * s;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return s.substr(b, e - b);
}

void decide(AbStats& s, bool greedy, double alpha, double p) {
  const int64_t differing = static_cast<int64_t>(std::lround((1.0 - s.cross_exact) * s.n));
  if (greedy) {
    const bool any = s.test.n_nonzero > 0 || s.cross_exact < 1.0;
    s.verdict = any ? AbVerdict::kBeyondNoise : AbVerdict::kWithinNoise;
    s.reason = any ? fmt::format(
                         "greedy decoding has no seed noise: B's text differs from A's in "
                         "{} of {} (a deterministic difference)",
                         differing, s.n)
                   : "greedy decoding has no seed noise and B's text equals A's";
    if (s.noise_exact < 1.0)
      s.reason += fmt::format(
          "; note: A and A' differ in {:.0f}% under greedy decoding, so the "
          "forward pass is not deterministic",
          100.0 * (1.0 - s.noise_exact));
    return;
  }
  if (s.test.n_nonzero == 0) {
    s.verdict = AbVerdict::kWithinNoise;
    if (s.paired_exact == 1.0) {
      s.reason = "B reproduced A' (same seed) token for token in every repeat";
    } else if (s.noise_mean == 0.0 && s.cross_mean == 0.0) {
      // No power, not evidence of equality: say so rather than imply a match.
      s.reason = fmt::format(
          "texts from different seeds share no prefix (agreement 0 for A' and "
          "B alike), so prefix agreement cannot separate B from seed noise "
          "here; with the same seed B followed A' for {:.1f} tokens on average",
          s.paired_first_divergence_mean);
    } else {
      s.reason = "agreement(A, A') equals agreement(A, B) in every repeat";
    }
    return;
  }
  s.verdict = p < alpha ? AbVerdict::kBeyondNoise : AbVerdict::kWithinNoise;
  s.reason = fmt::format("mean D {:+.4f}, sign-flip p = {:.4g}{} {} {}", s.diff_mean, p,
                         s.p_holm ? " (Holm-adjusted)" : "", p < alpha ? "<" : ">=", alpha);
  const double floor = min_sign_flip_p(s.test.n_nonzero);
  if (floor >= alpha)
    s.reason += fmt::format(
        "; with {} nonzero differences p cannot go below {:.4g}: more repeats "
        "are needed to detect a difference",
        s.test.n_nonzero, floor);
}

// Greedy runs have no test: p is null rather than a p-value of 1.
Json stats_json(const AbStats& s, bool greedy) {
  Json j;
  j["n"] = s.n;
  j["agreement_noise"] = s.noise_mean;
  j["agreement_noise_sd"] = s.noise_sd;
  j["agreement_cross"] = s.cross_mean;
  j["agreement_paired"] = s.paired_mean;
  j["exact_noise"] = s.noise_exact;
  j["exact_cross"] = s.cross_exact;
  j["exact_paired"] = s.paired_exact;
  j["paired_first_divergence_mean"] = s.paired_first_divergence_mean;
  j["diff_mean"] = s.diff_mean;
  j["diff_ci95"] = {s.diff_ci.lo, s.diff_ci.hi};
  j["p"] = greedy ? Json() : Json(s.test.p);
  j["p_exact"] = s.test.exact;
  j["n_nonzero"] = s.test.n_nonzero;
  if (s.p_holm) j["p_holm"] = *s.p_holm;
  j["verdict"] = verdict_name(s.verdict);
  j["reason"] = s.reason;
  return j;
}

// One line of Markdown table text: no newlines, no column breaks, bounded.
std::string md_cell(const std::string& s, size_t max_bytes) {
  std::string o;
  for (char ch : s) {
    // Cut only before a character's first byte, never inside one.
    if (o.size() >= max_bytes && (static_cast<unsigned char>(ch) & 0xC0) != 0x80) {
      o += "…";
      break;
    }
    if (ch == '\n')
      o += "⏎";
    else if (ch == '|')
      o += "\\|";
    else if (ch == '`')
      o += "'";
    else if (ch == '\r' || ch == '\t')
      o += ' ';
    else
      o += ch;
  }
  return o;
}


// A horizontal bar of width v ∈ [0, 1] with the value printed beside it.
std::string html_bar(double v, const char* color) {
  return fmt::format(
      "<div class=\"b\"><div style=\"width:{:.1f}%;background:{}\"></div></div>"
      "<span>{:.3f}</span>",
      100.0 * std::clamp(v, 0.0, 1.0), color, v);
}

}  // namespace

Expected<std::vector<AbPrompt>> parse_ab_prompts(const std::string& text,
                                                 const std::string& source) {
  std::vector<AbPrompt> out;
  bool jsonl = false, first = true;
  int64_t line_no = 0;
  size_t i = 0;
  while (i < text.size()) {
    const size_t j = std::min(text.find('\n', i), text.size());
    const std::string line = text.substr(i, j - i);
    i = j + 1;
    ++line_no;
    const std::string t = trim(line);
    if (t.empty()) continue;
    if (first) {
      jsonl = t[0] == '{';
      first = false;
    }
    if (!jsonl) {
      std::string p = line;
      if (!p.empty() && p.back() == '\r') p.pop_back();
      out.push_back({line_no, std::move(p)});
      continue;
    }
    Json obj;
    std::string why = "not an object";
    try {
      obj = Json::parse(t);
    } catch (const Json::parse_error& e) {
      why = e.what();  // names the offending byte, e.g. ill-formed UTF-8
    }
    if (!obj.is_object())
      return error(Code::kBadFile,
                   "{} line {}: not a JSON object ({}); the file is read as JSON Lines because "
                   "its first prompt line starts with '{{'",
                   source, line_no, why);
    auto it = obj.find("prompt");
    if (it == obj.end() || !it->is_string())
      return error(Code::kBadFile, "{} line {}: no string field \"prompt\"", source, line_no);
    out.push_back({line_no, it->get<std::string>()});
    if (out.back().text.empty())
      return error(Code::kBadFile, "{} line {}: \"prompt\" is empty", source, line_no);
  }
  if (out.empty())
    return error(Code::kBadFile, "{} has no prompts (one per line, or JSON Lines with \"prompt\")",
                 source);
  return out;
}

uint64_t ab_seed(uint64_t seed, int64_t prompt, int64_t repeat, int stream) {
  uint64_t x = seed;
  uint64_t h = mix(x);
  x = h ^ static_cast<uint64_t>(prompt);
  h = mix(x);
  x = h ^ static_cast<uint64_t>(repeat);
  h = mix(x);
  x = h ^ static_cast<uint64_t>(stream);
  return mix(x);
}

int64_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int64_t>(i);
}

double prefix_agreement(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::max(a.size(), b.size());
  if (n == 0) return 1.0;
  return static_cast<double>(common_prefix(a, b)) / static_cast<double>(n);
}

RepeatScores score_repeat(std::span<const int32_t> a, std::span<const int32_t> a2,
                          std::span<const int32_t> b) {
  RepeatScores s;
  s.noise = prefix_agreement(a, a2);
  s.cross = prefix_agreement(a, b);
  s.paired = prefix_agreement(a2, b);
  s.noise_exact = s.noise == 1.0;
  s.cross_exact = s.cross == 1.0;
  s.paired_exact = s.paired == 1.0;
  s.paired_first_divergence = common_prefix(a2, b);
  return s;
}

SignFlipTest sign_flip_test(const std::vector<double>& d, int64_t mc_draws, uint64_t seed) {
  SignFlipTest t;
  std::vector<double> nz;
  for (double x : d)
    if (x != 0.0) nz.push_back(x);
  t.n_nonzero = static_cast<int64_t>(nz.size());
  if (nz.empty()) return t;
  const double observed = std::fabs(std::accumulate(nz.begin(), nz.end(), 0.0));
  const double tol = tolerance(nz);
  const size_t n = nz.size();
  if (n <= static_cast<size_t>(kExactSignFlipMax)) {
    int64_t hits = 0;
    const uint64_t patterns = uint64_t{1} << n;
    for (uint64_t m = 0; m < patterns; ++m) {
      double s = 0.0;
      for (size_t i = 0; i < n; ++i) s += (m >> i & 1) ? -nz[i] : nz[i];
      if (std::fabs(s) >= observed - tol) ++hits;
    }
    t.p = static_cast<double>(hits) / static_cast<double>(patterns);
    t.exact = true;
    return t;
  }
  uint64_t x = seed;
  int64_t hits = 0;
  const int64_t draws = std::max<int64_t>(mc_draws, 1);
  for (int64_t k = 0; k < draws; ++k) {
    double s = 0.0;
    for (size_t i = 0; i < n; i += 64) {
      const uint64_t bits = mix(x);
      for (size_t b = 0; b < 64 && i + b < n; ++b) s += (bits >> b & 1) ? -nz[i + b] : nz[i + b];
    }
    if (std::fabs(s) >= observed - tol) ++hits;
  }
  t.p = static_cast<double>(1 + hits) / static_cast<double>(1 + draws);
  t.exact = false;
  return t;
}

double min_sign_flip_p(int64_t n) {
  if (n <= 1) return 1.0;
  return std::ldexp(1.0, 1 - static_cast<int>(std::min<int64_t>(n, 2000)));
}

Interval bootstrap_mean_ci(const std::vector<double>& v, double level, int draws, uint64_t seed) {
  if (v.empty()) return {};
  const size_t n = v.size();
  std::vector<double> means;
  means.reserve(static_cast<size_t>(std::max(draws, 1)));
  uint64_t x = seed;
  for (int k = 0; k < std::max(draws, 1); ++k) {
    double s = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const size_t idx = std::min(n - 1, static_cast<size_t>(unit(x) * static_cast<double>(n)));
      s += v[idx];
    }
    means.push_back(s / static_cast<double>(n));
  }
  const double tail = (1.0 - level) / 2.0;
  std::vector<double> m2 = means;
  Interval ci;
  ci.lo = percentile(means, tail);
  ci.hi = percentile(m2, 1.0 - tail);
  return ci;
}

std::vector<double> holm_adjust(const std::vector<double>& p) {
  const size_t m = p.size();
  std::vector<size_t> order(m);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
  std::vector<double> adj(m);
  double running = 0.0;
  for (size_t k = 0; k < m; ++k) {
    const double v = std::min(1.0, static_cast<double>(m - k) * p[order[k]]);
    running = std::max(running, v);  // step-down: adjusted p never decreases
    adj[order[k]] = running;
  }
  return adj;
}

const char* verdict_name(AbVerdict v) {
  return v == AbVerdict::kBeyondNoise ? "beyond_noise" : "within_noise";
}

AbStats summarize_repeats(const std::vector<RepeatScores>& r, bool greedy, double alpha) {
  AbStats s;
  s.n = static_cast<int64_t>(r.size());
  if (r.empty()) {
    s.reason = "no repeats";
    return s;
  }
  std::vector<double> noise, d;
  double fd = 0.0;
  for (const auto& x : r) {
    noise.push_back(x.noise);
    d.push_back(x.d());
    s.cross_mean += x.cross;
    s.paired_mean += x.paired;
    s.noise_exact += x.noise_exact;
    s.cross_exact += x.cross_exact;
    s.paired_exact += x.paired_exact;
    fd += static_cast<double>(x.paired_first_divergence);
  }
  const double n = static_cast<double>(r.size());
  s.noise_mean = mean(noise);
  double var = 0.0;
  for (double x : noise) var += (x - s.noise_mean) * (x - s.noise_mean);
  s.noise_sd = r.size() > 1 ? std::sqrt(var / (n - 1.0)) : 0.0;
  s.cross_mean /= n;
  s.paired_mean /= n;
  s.noise_exact /= n;
  s.cross_exact /= n;
  s.paired_exact /= n;
  s.paired_first_divergence_mean = fd / n;
  s.diff_mean = mean(d);
  s.diff_ci = bootstrap_mean_ci(d);
  if (greedy) {
    // Repeats of greedy decoding are copies, not samples: no test.
    for (double x : d) s.test.n_nonzero += x != 0.0;
    s.test.p = 1.0;
  } else {
    s.test = sign_flip_test(d);
  }
  decide(s, greedy, alpha, s.test.p);
  return s;
}

void finish_ab(AbResult& r) {
  std::vector<RepeatScores> all;
  std::vector<double> ps;
  for (auto& p : r.prompts) {
    p.stats = summarize_repeats(p.repeats, r.greedy, r.alpha);
    all.insert(all.end(), p.repeats.begin(), p.repeats.end());
    ps.push_back(p.stats.test.p);
  }
  if (!r.greedy) {
    const std::vector<double> adj = holm_adjust(ps);
    for (size_t i = 0; i < r.prompts.size(); ++i) {
      AbStats& s = r.prompts[i].stats;
      s.p_holm = adj[i];
      decide(s, false, r.alpha, adj[i]);
    }
  }
  // D values of different prompts are independent (distinct seeds), so the
  // pooled sign-flip test stays valid though prompts differ in spread.
  r.overall = summarize_repeats(all, r.greedy, r.alpha);
}

std::string ab_json(const Conditions& c, const AbResult& r) {
  Json j;
  j["kind"] = "ab";
  Json cond;
  cond["model"] = c.model;
  if (!c.base_model.empty()) cond["model_b"] = c.base_model;
  cond["input"] = c.input;
  cond["threads"] = c.threads;
  cond["batch"] = c.batch;
  cond["commit"] = c.commit;
  j["conditions"] = std::move(cond);
  j["a"] = r.label_a;
  j["b"] = r.label_b;
  j["greedy"] = r.greedy;
  j["sampler"] = r.sampler;
  j["repeats"] = r.repeats;
  j["n_predict"] = r.n_predict;
  j["alpha"] = r.alpha;
  j["test"] = r.greedy ? "none (greedy: no seed noise)"
                       : "two-sided sign-flip permutation test on D = agreement(A,A') - "
                         "agreement(A,B); per prompt Holm-adjusted";
  j["seconds_a"] = r.seconds_a;
  j["seconds_b"] = r.seconds_b;
  j["overall"] = stats_json(r.overall, r.greedy);
  Json ps = Json::array();
  for (const auto& p : r.prompts) {
    Json x;
    x["line"] = p.prompt.line;
    x["prompt"] = p.prompt.text;
    x["prompt_tokens"] = p.prompt_tokens;
    Json st = stats_json(p.stats, r.greedy);
    for (auto it = st.begin(); it != st.end(); ++it) x[it.key()] = it.value();
    Json reps = Json::array();
    for (const auto& q : p.repeats)
      reps.push_back({{"noise", q.noise},
                      {"cross", q.cross},
                      {"paired", q.paired},
                      {"paired_first_divergence", q.paired_first_divergence}});
    x["repeat_scores"] = std::move(reps);
    x["sample_a"] = p.sample_a;
    x["sample_b"] = p.sample_b;
    ps.push_back(std::move(x));
  }
  j["prompts"] = std::move(ps);
  // Generated text may hold invalid UTF-8 (byte tokens cut mid-character):
  // replace it rather than throw.
  return j.dump(1, ' ', false, Json::error_handler_t::replace);
}

std::string ab_markdown(const Conditions& c, const AbResult& r) {
  std::string o = fmt::format(
      "# A/B with repeats\n\nA = `{}`, B = `{}`; {}; {} repeats × {} tokens, input {}, {} "
      "threads\n\n",
      r.label_a, r.label_b, r.sampler, r.repeats, r.n_predict, c.input, c.threads);
  o += fmt::format("**Overall: {}** — {}\n\n", verdict_name(r.overall.verdict), r.overall.reason);
  if (r.greedy)
    o += "Greedy decoding: the seed changes nothing, so the seed noise is zero by construction; "
         "repeats would be copies and are not run.\n\n";
  o += "Agreement = shared prefix of the generated tokens ÷ the longer length. noise = A vs A' "
       "(other seed), cross = A vs B (other seed, as A'), paired = A' vs B (same seed). "
       "D = noise − cross.\n\n";
  o += "| line | noise (sd) | cross | paired | exact cross | paired 1st div | D mean [95% CI] | p "
       "| p Holm | verdict |\n|---|---|---|---|---|---|---|---|---|---|\n";
  auto row = [&](const std::string& name, const AbStats& s) {
    o += fmt::format(
        "| {} | {:.3f} ({:.3f}) | {:.3f} | {:.3f} | {:.0f}% | {:.1f} | {:+.3f} "
        "[{:+.3f}, {:+.3f}] | {} | {} | {} |\n",
        name, s.noise_mean, s.noise_sd, s.cross_mean, s.paired_mean, 100.0 * s.cross_exact,
        s.paired_first_divergence_mean, s.diff_mean, s.diff_ci.lo, s.diff_ci.hi,
        r.greedy ? "-" : fmt::format("{:.3g}", s.test.p),
        s.p_holm ? fmt::format("{:.3g}", *s.p_holm) : "-", verdict_name(s.verdict));
  };
  for (const auto& p : r.prompts) row(fmt::format("{}", p.prompt.line), p.stats);
  row("**all**", r.overall);
  o += "\n| line | prompt | A' (first repeat, seed s') | B (same seed) |\n|---|---|---|---|\n";
  for (const auto& p : r.prompts)
    o += fmt::format("| {} | {} | {} | {} |\n", p.prompt.line, md_cell(p.prompt.text, 60),
                     md_cell(p.sample_a, 80), md_cell(p.sample_b, 80));
  return o;
}

std::string ab_html(const Conditions& c, const AbResult& r) {
  std::string o =
      "<!doctype html><html><head><meta charset=\"utf-8\"><title>sustain eval ab</title>"
      "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
      "td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px;vertical-align:top}"
      "th{background:#f4f4f4}.b{display:inline-block;width:120px;height:10px;background:#eee;"
      "margin-right:6px}.b div{height:10px}.k{font-size:11px;color:#555}"
      ".beyond_noise{background:#f8d0d0}.within_noise{background:#d8f0d8}"
      "pre{white-space:pre-wrap;max-width:40em;margin:0}</style></head><body>";
  o += fmt::format(
      "<h1>A/B with repeats</h1><p>A <code>{}</code>, B <code>{}</code>; {}; {} "
      "repeats × {} tokens; input {}; {} threads; build {}</p>",
      html_escape(r.label_a), html_escape(r.label_b), html_escape(r.sampler), r.repeats,
      r.n_predict, html_escape(c.input), c.threads, html_escape(c.commit));
  o += fmt::format("<p class=\"{}\"><b>Overall: {}</b> — {}</p>", verdict_name(r.overall.verdict),
                   verdict_name(r.overall.verdict), html_escape(r.overall.reason));
  o += "<p class=\"k\">Agreement = shared prefix of the generated tokens ÷ the longer length. "
       "noise = A vs A' (other seed, grey), cross = A vs B (B uses A''s seed, blue), paired = A' "
       "vs B (same seed, green). D = noise − cross; B differs beyond seed noise when the "
       "sign-flip test on D rejects.</p>";
  o += "<table><tr><th>line</th><th>prompt</th><th>agreement</th><th>D per repeat</th>"
       "<th>mean D [95% CI]</th><th>p (Holm)</th><th>verdict</th></tr>";
  auto row = [&](const std::string& line, const std::string& prompt, const AbStats& s,
                 const std::vector<RepeatScores>* reps) {
    std::string ds;
    if (reps)
      for (const auto& q : *reps) ds += fmt::format("{:+.2f} ", q.d());
    o += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}<br>{}<br>{}</td><td>{}</td><td>{:+.3f} [{:+.3f}, "
        "{:+.3f}]</td><td>{}</td><td class=\"{}\">{}</td></tr>",
        line, html_escape(prompt), html_bar(s.noise_mean, "#999"), html_bar(s.cross_mean, "#48c"),
        html_bar(s.paired_mean, "#4a4"), ds, s.diff_mean, s.diff_ci.lo, s.diff_ci.hi,
        r.greedy ? std::string("-")
                 : fmt::format("{:.3g}{}", s.test.p,
                               s.p_holm ? fmt::format(" ({:.3g})", *s.p_holm) : ""),
        verdict_name(s.verdict), verdict_name(s.verdict));
  };
  for (const auto& p : r.prompts)
    row(fmt::format("{}", p.prompt.line), p.prompt.text, p.stats, &p.repeats);
  row("all", "", r.overall, nullptr);
  o += "</table><h2>First repeat: A' and B with the same seed</h2><table><tr><th>line</th>"
       "<th>A'</th><th>B</th></tr>";
  for (const auto& p : r.prompts)
    o += fmt::format("<tr><td>{}</td><td><pre>{}</pre></td><td><pre>{}</pre></td></tr>",
                     p.prompt.line, html_escape(p.sample_a), html_escape(p.sample_b));
  o += "</table></body></html>\n";
  return o;
}

}  // namespace sustain::eval
