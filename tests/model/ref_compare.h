// Comparing logits with llama.cpp's reference outputs (../shared/ref/logits):
// the cases, their tolerances (README of the reference data, with the
// reasons where a bound differs) and the checks. Shared by the tests of the
// scalar reference forward and of the engine's forward.
#pragma once

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace sustain::test {

struct RefCase {
  const char* model;               // file stem in models/
  const char* prompt;              // p1_short, ...
  const char* cfg;                 // kvf16, kvq8fa
  double max_err;                  // bound on max|ours - ref| / std(ref), worst row
  double min_argmax;               // fraction of positions whose argmax must agree
  double max_kl;                   // bound on mean KL(ref || ours) over the stored rows
  bool llamacpp_rounding = false;  // RefOptions: quantized activations + f16 KV, as llama.cpp
};

// Plain mode (the default RefOptions): exact f32 arithmetic on the
// dequantized weights, f32 KV cache.
//  - f32 weights: the README's f16-KV row. Our f32 KV is a smaller
//    perturbation than llama.cpp's own FA / non-FA spread.
inline constexpr double kF32Err = 0.02, kF32Argmax = 0.99, kF32Kl = 1e-5;
//  - stories260K is numerically touchy: llama.cpp's FA and non-FA runs differ
//    by up to 0.027 of std and a mean KL of 1.4e-4 on it, so a loose bound.
inline constexpr double kStoriesErr = 0.1, kStoriesKl = 2e-4;
//  - quantized weights: the README's quantized row, except argmax. llama.cpp
//    rounds activations to 8 bits and we do not, and these random-weight
//    logits are flat: on tiny-qwen3 p2_medium 7 of 32 positions have a top-2
//    gap under 0.013 (0.04 std), and 2 of them flip. The decisive-argmax check
//    in the test still requires agreement wherever the gap is clear.
inline constexpr double kQErr = 0.15, kQArgmax = 0.9, kQKl = 1e-4;
//  - aidreams260K is trained, so its distributions are peaked and KL is more
//    sensitive to the unrounded activations (measured 2.4e-4 for Q8_0); the
//    rounded mode below meets the README's 1e-4 on the same files.
inline constexpr double kTrainedQKl = 5e-4;

// Rounded mode (RefOptions quantize_activations + kv_f16): the same values
// rounded where llama.cpp rounds them. With f32 weights that leaves only
// summation order, so the bound is 10x below the README's (measured: 5e-5 on
// tiny-llama, 3.3e-3 on stories260K). With quantized weights one ulp of
// difference upstream flips an 8-bit rounding and spreads, so the README's
// quantized row applies unchanged.
inline constexpr double kRoundF32Err = 0.01, kRoundF32Argmax = 0.99, kRoundF32Kl = 2e-6;
inline constexpr double kRoundQArgmax = 0.95;

inline const RefCase kPlainCases[] = {
    {"tiny-llama-f32", "p1_short", "kvf16", kF32Err, kF32Argmax, kF32Kl},
    {"tiny-llama-f32", "p2_medium", "kvf16", kF32Err, kF32Argmax, kF32Kl},
    {"tiny-llama-f32", "p3_long", "kvf16", kF32Err, kF32Argmax, kF32Kl},
    {"stories260K-f32", "p1_short", "kvf16", kStoriesErr, kF32Argmax, kStoriesKl},
    {"stories260K-f32", "p2_medium", "kvf16", kStoriesErr, kF32Argmax, kStoriesKl},
    {"stories260K-f32", "p3_long_llama2c", "kvf16", kStoriesErr, kF32Argmax, kStoriesKl},
    {"aidreams260K-f32", "p1_short", "kvf16", kF32Err, kF32Argmax, kF32Kl},
    {"aidreams260K-f32", "p2_medium", "kvf16", kF32Err, kF32Argmax, kF32Kl},
    {"aidreams260K-f32", "p3_long_llama2c", "kvf16", kF32Err, kF32Argmax, kF32Kl},
    {"tiny-qwen2-Q4_K_M", "p1_short", "kvf16", kQErr, kQArgmax, kQKl},
    {"tiny-qwen2-Q4_K_M", "p2_medium", "kvf16", kQErr, kQArgmax, kQKl},
    {"tiny-qwen3-Q4_K_M", "p1_short", "kvf16", kQErr, kQArgmax, kQKl},
    {"tiny-qwen3-Q4_K_M", "p2_medium", "kvf16", kQErr, kQArgmax, kQKl},
    // Other quantized files: these also check every dequantizer they use.
    {"tiny-llama-Q8_0", "p2_medium", "kvf16", kQErr, kQArgmax, kQKl},
    {"tiny-llama-Q4_0", "p2_medium", "kvf16", kQErr, kQArgmax, kQKl},
    {"tiny-llama-Q4_K_M", "p3_long", "kvf16", kQErr, kQArgmax, kQKl},
    {"tiny-llama-Q5_K_M", "p2_medium", "kvf16", kQErr, kQArgmax, kQKl},
    {"tiny-llama-Q6_K", "p2_medium", "kvf16", kQErr, kQArgmax, kQKl},
    {"aidreams260K-Q8_0", "p3_long_llama2c", "kvf16", kQErr, kQArgmax, kTrainedQKl},
    {"aidreams260K-Q4_K_M", "p3_long_llama2c", "kvf16", kQErr, kQArgmax, kTrainedQKl},
};

inline const RefCase kRoundedCases[] = {
    {"tiny-llama-f32", "p1_short", "kvf16", kRoundF32Err, kRoundF32Argmax, kRoundF32Kl, true},
    {"tiny-llama-f32", "p2_medium", "kvf16", kRoundF32Err, kRoundF32Argmax, kRoundF32Kl, true},
    {"tiny-llama-f32", "p3_long", "kvf16", kRoundF32Err, kRoundF32Argmax, kRoundF32Kl, true},
    {"stories260K-f32", "p1_short", "kvf16", kRoundF32Err, kRoundF32Argmax, kRoundF32Kl, true},
    {"stories260K-f32", "p2_medium", "kvf16", kRoundF32Err, kRoundF32Argmax, kRoundF32Kl, true},
    {"stories260K-f32", "p3_long_llama2c", "kvf16", kRoundF32Err, kRoundF32Argmax, kRoundF32Kl,
     true},
    {"aidreams260K-f32", "p1_short", "kvf16", kRoundF32Err, kRoundF32Argmax, kRoundF32Kl, true},
    {"aidreams260K-f32", "p2_medium", "kvf16", kRoundF32Err, kRoundF32Argmax, kRoundF32Kl, true},
    {"aidreams260K-f32", "p3_long_llama2c", "kvf16", kRoundF32Err, kRoundF32Argmax, kRoundF32Kl,
     true},
    {"tiny-qwen2-Q4_K_M", "p1_short", "kvf16", kQErr, kRoundQArgmax, kQKl, true},
    {"tiny-qwen2-Q4_K_M", "p2_medium", "kvf16", kQErr, kRoundQArgmax, kQKl, true},
    {"tiny-qwen3-Q4_K_M", "p1_short", "kvf16", kQErr, kRoundQArgmax, kQKl, true},
    {"tiny-qwen3-Q4_K_M", "p2_medium", "kvf16", kQErr, kRoundQArgmax, kQKl, true},
    {"tiny-llama-Q8_0", "p2_medium", "kvf16", kQErr, kRoundQArgmax, kQKl, true},
    {"tiny-llama-Q4_0", "p2_medium", "kvf16", kQErr, kRoundQArgmax, kQKl, true},
    {"tiny-llama-Q4_K_M", "p3_long", "kvf16", kQErr, kRoundQArgmax, kQKl, true},
    {"tiny-llama-Q5_K_M", "p2_medium", "kvf16", kQErr, kRoundQArgmax, kQKl, true},
    {"tiny-llama-Q6_K", "p2_medium", "kvf16", kQErr, kRoundQArgmax, kQKl, true},
    {"aidreams260K-Q8_0", "p3_long_llama2c", "kvf16", kQErr, kRoundQArgmax, kQKl, true},
    {"aidreams260K-Q4_K_M", "p3_long_llama2c", "kvf16", kQErr, kRoundQArgmax, kQKl, true},
};

struct RefData {
  nlohmann::json meta;
  std::vector<int32_t> tokens;
  std::vector<int> positions;
  int n_vocab = 0;
  std::vector<std::vector<float>> rows;  // [positions.size()][n_vocab]
};

inline RefData read_ref(const std::string& stem) {
  RefData r;
  std::ifstream js(ref_path("logits/" + stem + ".json"));
  EXPECT_TRUE(js.good()) << stem << ".json";
  r.meta = nlohmann::json::parse(js);
  r.tokens = r.meta.at("token_ids").get<std::vector<int32_t>>();
  r.positions = r.meta.at("positions").get<std::vector<int>>();
  r.n_vocab = r.meta.at("n_vocab").get<int>();
  std::ifstream bin(ref_path("logits/" + r.meta.at("logits_file").get<std::string>()),
                    std::ios::binary);
  for (size_t i = 0; i < r.positions.size(); ++i) {
    std::vector<float> row(r.n_vocab);
    bin.read(reinterpret_cast<char*>(row.data()), std::streamsize(row.size() * sizeof(float)));
    EXPECT_TRUE(bin.good()) << stem << ": logits file shorter than " << r.positions.size()
                            << " rows";
    r.rows.push_back(std::move(row));
  }
  return r;
}

inline int argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

inline double stddev(const std::vector<float>& v) {
  double s = 0, ss = 0;
  for (float x : v) s += x;
  const double mean = s / v.size();
  for (float x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / v.size());
}

inline std::vector<double> log_softmax(const std::vector<float>& v) {
  const double mx = *std::max_element(v.begin(), v.end());
  double sum = 0;
  for (float x : v) sum += std::exp(x - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = v[i] - lse;
  return out;
}

inline double kl(const std::vector<float>& ref, const std::vector<float>& ours) {
  const auto lp = log_softmax(ref), lq = log_softmax(ours);
  double s = 0;
  for (size_t i = 0; i < lp.size(); ++i) s += std::exp(lp[i]) * (lp[i] - lq[i]);
  return s;
}

inline std::string case_name(const RefCase& c) {
  std::string s =
      std::string(c.model) + "_" + c.prompt + "_" + c.cfg + (c.llamacpp_rounding ? "_rounded" : "");
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

// Checks `logits` (one row per prompt position) against the reference with
// the case's bounds, printing the measured agreement. `max_abs_act` is
// printed when known (negative: not measured).
inline void check_against_ref(const RefCase& c, const RefData& ref,
                              const std::vector<std::vector<float>>& logits,
                              const std::string& label, double max_abs_act = -1.0) {
  double worst = 0, kl_sum = 0;
  for (size_t i = 0; i < ref.positions.size(); ++i) {
    const auto& want = ref.rows[i];
    const auto& got = logits.at(ref.positions[i]);
    double max_d = 0;
    for (int j = 0; j < ref.n_vocab; ++j)
      max_d = std::max(max_d, double{std::fabs(got[j] - want[j])});
    worst = std::max(worst, max_d / stddev(want));
    kl_sum += kl(want, got);
  }
  const double mean_kl = kl_sum / ref.positions.size();

  // argmax_per_position covers every prompt position, not only the stored rows.
  const auto ref_argmax = ref.meta.at("argmax_per_position").get<std::vector<int>>();
  EXPECT_EQ(ref_argmax.size(), logits.size());
  if (ref_argmax.size() != logits.size()) return;
  int same = 0;
  for (size_t p = 0; p < logits.size(); ++p) same += argmax(logits[p]) == ref_argmax[p];
  const double argmax_frac = double(same) / logits.size();

  // Decisive argmax: where llama.cpp's top-2 gap is well above the error bound,
  // a flip is a real disagreement, not a near-tie.
  double mean_std = 0;
  for (const auto& row : ref.rows) mean_std += stddev(row) / ref.rows.size();
  const auto top5 = ref.meta.at("top5_per_position");
  for (size_t p = 0; p < logits.size(); ++p) {
    const double gap = top5[p][0][1].get<double>() - top5[p][1][1].get<double>();
    if (gap > 2 * c.max_err * mean_std) {
      EXPECT_EQ(argmax(logits[p]), ref_argmax[p]) << "position " << p << ", top-2 gap " << gap;
    }
  }

  std::printf(
      "[ measured ] %-40s max|d|/std %.5f  argmax %d/%zu (%.1f%%)  mean KL %.2e  "
      "max|act| %.1f\n",
      label.c_str(), worst, same, logits.size(),
      100 * argmax_frac, mean_kl, max_abs_act);
  ::testing::Test::RecordProperty("max_err_over_std", std::to_string(worst));
  ::testing::Test::RecordProperty("argmax_agreement", std::to_string(argmax_frac));
  ::testing::Test::RecordProperty("mean_kl", std::to_string(mean_kl));
  EXPECT_LE(worst, c.max_err);
  EXPECT_GE(argmax_frac, c.min_argmax);
  EXPECT_LE(mean_kl, c.max_kl);
}

}  // namespace sustain::test
