// `sustain eval ab`: does configuration B change a model's generated text
// beyond what re-sampling configuration A with another seed changes it?
//
// Per prompt and repeat r, three generations: A with seed s_r, A with seed
// s'_r (A') and B with the same seed s'_r. Then
//   noise  = agreement(A, A')  — the spread from seeds alone,
//   cross  = agreement(A, B)   — configuration and seed both differ,
//   paired = agreement(A', B)  — same random numbers, configuration differs.
// If B samples from the same distribution as A, noise and cross have the same
// distribution, so D_r = noise_r − cross_r has mean 0; and because B shares
// A's seed, D_r is exactly 0 whenever B reproduces A' token for token (the
// common-random-numbers trick that makes small differences testable). The
// test is a two-sided sign-flip permutation test on the D values. The math is
// here as pure functions; the generation loop is in src/cli/cmd_eval_ab.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "eval/report.h"

namespace sustain::eval {

// ---------------------------------------------------------------- input

struct AbPrompt {
  int64_t line = 0;  // 1-based line in the prompts file
  std::string text;
};

// One prompt per non-empty line; or, when the first non-empty line starts
// with '{', JSON Lines with a string field "prompt" on every non-empty line.
// `source` names the file in errors. No prompt at all is an error.
Expected<std::vector<AbPrompt>> parse_ab_prompts(const std::string& text,
                                                 const std::string& source);

// The sampling seed of (prompt, repeat, stream); stream 0 is A's seed s,
// stream 1 the seed s' that A' and B share. A fixed integer hash, so runs
// replay exactly on every platform, and distinct inputs give unrelated seeds.
uint64_t ab_seed(uint64_t seed, int64_t prompt, int64_t repeat, int stream);

// ---------------------------------------------------------------- agreement

// Length of the common prefix of a and b.
int64_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b);

// Token-level prefix agreement: common_prefix / max(|a|, |b|); 1 when both
// are empty. 1 exactly when the sequences are identical.
double prefix_agreement(std::span<const int32_t> a, std::span<const int32_t> b);

// One repeat's three generated sequences (prompt excluded), scored.
struct RepeatScores {
  double noise = 0.0;   // agreement(A, A')
  double cross = 0.0;   // agreement(A, B)
  double paired = 0.0;  // agreement(A', B)
  bool noise_exact = false, cross_exact = false, paired_exact = false;
  int64_t paired_first_divergence = 0;  // common prefix of A' and B (= length when identical)
  double d() const { return noise - cross; }
};
RepeatScores score_repeat(std::span<const int32_t> a, std::span<const int32_t> a2,
                          std::span<const int32_t> b);

// ---------------------------------------------------------------- statistics

struct SignFlipTest {
  double p = 1.0;         // two-sided
  bool exact = true;      // every sign pattern enumerated (else Monte Carlo)
  int64_t n_nonzero = 0;  // values that carry a sign (zeros are fixed points)
};
// H0: each d_i is symmetric about 0 (independent, not necessarily identically
// distributed). Statistic |Σ d_i|; p = share of the 2^n sign patterns whose
// |Σ ±d_i| is at least as large. Enumerated for up to kExactSignFlipMax
// nonzero values, else `mc_draws` random patterns with p = (1 + hits) /
// (1 + draws), which never understates p. All zeros give p = 1.
constexpr int kExactSignFlipMax = 20;
SignFlipTest sign_flip_test(const std::vector<double>& d, int64_t mc_draws = 200000,
                            uint64_t seed = 1);

// Smallest two-sided p the exact test can give with n nonzero values: 2^(1-n)
// (1 for n <= 1). With 4 repeats that is 0.125: no verdict at 0.05 possible.
double min_sign_flip_p(int64_t n);

struct Interval {
  double lo = 0.0, hi = 0.0;
};
// Percentile bootstrap interval of the mean (`level`, e.g. 0.95) from `draws`
// resamples with replacement; deterministic for a given seed. Empty → [0, 0].
Interval bootstrap_mean_ci(const std::vector<double>& v, double level = 0.95, int draws = 10000,
                           uint64_t seed = 1);

// Holm–Bonferroni step-down adjusted p-values (same order as the input), so
// per-prompt verdicts keep the family-wise error rate at the level.
std::vector<double> holm_adjust(const std::vector<double>& p);

// ---------------------------------------------------------------- summary

enum class AbVerdict { kWithinNoise, kBeyondNoise };
const char* verdict_name(AbVerdict v);  // "within_noise", "beyond_noise"

struct AbStats {
  int64_t n = 0;  // repeats (per prompt) or prompt × repeat pairs (overall)
  double noise_mean = 0.0, cross_mean = 0.0, paired_mean = 0.0;
  double noise_sd = 0.0;  // spread of agreement(A, A') across repeats
  double noise_exact = 0.0, cross_exact = 0.0, paired_exact = 0.0;  // exact-match rates
  double paired_first_divergence_mean = 0.0;
  double diff_mean = 0.0;  // mean of D = noise − cross
  Interval diff_ci;        // bootstrap 95% of that mean
  SignFlipTest test;
  std::optional<double> p_holm;  // per prompt, sampled decoding only
  AbVerdict verdict = AbVerdict::kWithinNoise;
  std::string reason;  // why the verdict, in words
};

// Greedy decoding has no seed noise: A and A' are the same text, the test is
// skipped and any difference between A and B is deterministic (beyond noise).
AbStats summarize_repeats(const std::vector<RepeatScores>& r, bool greedy, double alpha);

struct AbPromptResult {
  AbPrompt prompt;
  int64_t prompt_tokens = 0;
  std::vector<RepeatScores> repeats;
  std::string sample_a, sample_b;  // first repeat: A' and B, generated with the same seed
  AbStats stats;
};

struct AbResult {
  std::string label_a, label_b;  // e.g. "m.gguf f16/f16"
  bool greedy = false;
  double alpha = 0.05;
  int64_t repeats = 0, n_predict = 0;
  std::string sampler;  // e.g. "temp 0.8, top-k 40, top-p 0.95, min-p 0.05, seed 1"
  std::vector<AbPromptResult> prompts;
  AbStats overall;  // every (prompt, repeat) D pooled
  double seconds_a = 0.0, seconds_b = 0.0;
};

// Fills every prompt's stats (Holm-adjusted verdicts) and the overall stats.
void finish_ab(AbResult& r);

std::string ab_json(const Conditions& c, const AbResult& r);
std::string ab_markdown(const Conditions& c, const AbResult& r);
// Self-contained page: the verdicts, per-prompt bars of noise / cross /
// paired agreement (with each repeat's D) and the first repeat's texts.
std::string ab_html(const Conditions& c, const AbResult& r);

}  // namespace sustain::eval
