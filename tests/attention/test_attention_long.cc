// Decode attention at 32K tokens (smollm2-135m's head geometry): f16 K/V
// against the exact result over the f32 values they were made from, and
// split-KV against the unsplit kernel on the same cache; then every KV
// format against the same f32 result, with the error printed per format.
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attn_test_util.h"

namespace sustain::attention::test {
namespace {

TEST(AttentionLong, Context32KF16AgainstF32Reference) {
  constexpr int64_t kCtx = 32768;
  kv::KvGeometry g;
  g.n_layer = 1;
  g.n_head_kv = 3;
  g.head_dim_k = g.head_dim_v = 64;
  g.page_tokens = 32;
  g.k_type = g.v_type = QType::F32;
  Filled exact = make_filled(g, {kCtx}, 99);
  g.k_type = g.v_type = QType::F16;
  Filled half = make_filled(g, {kCtx}, 99);  // the same values, stored as f16

  const AttnParams p = params_for(g, 3, SplitKv::kAuto);
  // A query late in the sequence and one in the middle.
  const std::vector<QueryInfo> q_half = {{&half.seqs[0], kCtx}, {&half.seqs[0], kCtx / 2 + 7}};
  const std::vector<QueryInfo> q_exact = {{&exact.seqs[0], kCtx}, {&exact.seqs[0], kCtx / 2 + 7}};
  const std::vector<float> q = random_q(2 * p.n_head * p.head_dim_k, 1234);

  std::vector<double> ref_f32(2 * p.n_head * p.head_dim_v), ref_f16(ref_f32.size());
  attend_ref(*exact.cache, 0, p, q_exact, q.data(), ref_f32.data());
  attend_ref(*half.cache, 0, p, q_half, q.data(), ref_f16.data());

  for (SplitKv split : {SplitKv::kOff, SplitKv::kAuto}) {
    AttnParams ps = p;
    ps.split_kv = split;
    ThreadPool& tp = pool(2);
    auto scratch = aligned_scratch(attention_scratch_bytes(ps, 2, tp.size()));
    std::vector<float> out(ref_f32.size());
    attend(*half.cache, 0, ps, q_half, q.data(), out.data(), tp, scratch.get());
    const double vs_f32 = max_rel_error(out, ref_f32, p.head_dim_v);
    const double vs_f16 = max_rel_error(out, ref_f16, p.head_dim_v);
    const double f16_storage =
        max_rel_error(std::vector<float>(ref_f16.begin(), ref_f16.end()), ref_f32, p.head_dim_v);
    std::printf(
        "32K f16 K/V (split %s): max rel error vs f32 reference %.3g (f16 storage alone "
        "%.3g); vs f16 reference %.3g\n",
        split == SplitKv::kOff ? "off" : "auto", vs_f32, f16_storage, vs_f16);
    RecordProperty(split == SplitKv::kOff ? "rel_err_vs_f32_nosplit" : "rel_err_vs_f32_split",
                   std::to_string(vs_f32));
    // The kernel adds (almost) nothing to what f16 storage costs.
    EXPECT_LE(vs_f16, 2e-5);
    EXPECT_LE(vs_f32, 2 * f16_storage + 1e-5);
  }
}

// Every KV format at 32K: the same random K/V (stored in that format) and
// queries; the kernel's output against the double reference over the f32
// values (what the format's storage and the kernel together cost) and
// against the double reference over the format's own stored values (what
// the kernel alone costs). Prints one table row per format.
TEST(AttentionLong, Context32KEveryFormatAgainstF32Reference) {
  constexpr int64_t kCtx = 32768;
  kv::KvGeometry g;
  g.n_layer = 1;
  g.n_head_kv = 3;
  g.head_dim_k = g.head_dim_v = 64;
  g.page_tokens = 32;
  g.k_type = g.v_type = QType::F32;
  Filled exact = make_filled(g, {kCtx}, 77);
  const AttnParams p = params_for(g, 3, SplitKv::kAuto);
  const std::vector<float> q = random_q(2 * p.n_head * p.head_dim_k, 4321);
  const std::vector<QueryInfo> q_exact = {{&exact.seqs[0], kCtx},
                                          {&exact.seqs[0], kCtx / 3 + 5}};
  std::vector<double> ref_f32(2 * p.n_head * p.head_dim_v);
  attend_ref(*exact.cache, 0, p, q_exact, q.data(), ref_f32.data());

  std::printf("32K decode, K/V format | max rel err vs f32 | kernel vs own-format ref\n");
  for (QType type : {QType::F32, QType::F16, QType::BF16, QType::FP8_E4M3, QType::Q8_0,
                     QType::Q5_1, QType::Q5_0, QType::Q4_1, QType::Q4_0}) {
    SCOPED_TRACE(std::string(qtype_name(type)));
    g.k_type = g.v_type = type;
    Filled f = make_filled(g, {kCtx}, 77);
    const std::vector<QueryInfo> qs = {{&f.seqs[0], kCtx}, {&f.seqs[0], kCtx / 3 + 5}};
    std::vector<double> ref_own(ref_f32.size());
    attend_ref(*f.cache, 0, p, qs, q.data(), ref_own.data());
    ThreadPool& tp = pool(2);
    auto scratch = aligned_scratch(attention_scratch_bytes(p, 2, tp.size()));
    std::vector<float> out(ref_f32.size());
    attend(*f.cache, 0, p, qs, q.data(), out.data(), tp, scratch.get());
    const double vs_f32 = max_rel_error(out, ref_f32, p.head_dim_v);
    const double vs_own = max_rel_error(out, ref_own, p.head_dim_v);
    const double storage =
        max_rel_error(std::vector<float>(ref_own.begin(), ref_own.end()), ref_f32, p.head_dim_v);
    std::printf("%-22s | %18.3g | %24.3g\n", std::string(qtype_name(type)).c_str(), vs_f32,
                vs_own);
    RecordProperty("rel_err_vs_f32_" + std::string(qtype_name(type)), std::to_string(vs_f32));
    // Float formats: the kernel computes in f32 (2e-5 at 32K, as above).
    // Block formats' K may be dotted with an int8 copy of q (VNNI targets),
    // tiled FP8's with a bf16 copy (AVX512_BF16; a smaller error):
    // measured 0.7% of max |o| here, as at 1000 keys (test_attention.cc
    // kTolQ8K); 2e-2 leaves room for other data while a wrong scale, offset
    // or block (errors of order 1) still fails.
    const bool int_q = type == QType::Q8_0 || type == QType::Q4_0 || type == QType::Q4_1 ||
                       type == QType::Q5_0 || type == QType::Q5_1 ||
                       (type == QType::FP8_E4M3 && g.k_tiled());
    const double tol = int_q ? 2e-2 : 2e-5;
    EXPECT_LE(vs_own, tol);
    EXPECT_LE(vs_f32, storage + tol);
  }
}

}  // namespace
}  // namespace sustain::attention::test
