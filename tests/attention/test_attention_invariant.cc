// Attention under batch invariance (base/batch_invariant.h): a query's
// output is a function of its own keys only, bit for bit: not of the other
// queries in the call, nor of the thread count. The chunks a long context's
// keys are split into (and the order their partial states merge in) are
// fixed by the query's own length, so 1, 2 and 3 threads give the same bits;
// a verify step's consecutive queries share a block (each K/V tile read once
// for all of them) and each still equals its one-query call, which needs
// every kernel to give a row the same bits whatever the tile's length (the
// score kernels' last keys, the integer V kernels' weight bound).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attn_test_util.h"
#include "base/batch_invariant.h"
#include "hwy/targets.h"

namespace sustain::attention::test {
namespace {

struct InvariantMode {
  InvariantMode() { set_batch_invariant(true); }
  ~InvariantMode() { set_batch_invariant(false); }
};

kv::KvGeometry geometry(QType t, bool tiled, int group_dim) {
  kv::KvGeometry g;
  g.n_layer = 2;
  g.n_head_kv = 3;
  g.head_dim_k = g.head_dim_v = group_dim;
  g.k_type = g.v_type = t;
  g.page_tokens = 32;
  g.tiled = tiled;
  return g;
}

std::vector<float> run(const kv::KvCache& cache, const AttnParams& p,
                       const std::vector<QueryInfo>& queries, const float* q, int threads) {
  std::vector<float> out(queries.size() * p.n_head * p.head_dim_v, NAN);
  auto scratch = aligned_scratch(attention_scratch_bytes(p, int64_t(queries.size()), threads));
  attend(cache, 1, p, queries, q, out.data(), pool(threads), scratch.get());
  return out;
}

// Every KV format, rows and tiled pages; a verify step's 5 consecutive
// queries (ending at n) beside another sequence's decode query, against each
// query alone, at contexts below one page, past eight pages (chunks of two)
// and in eight chunks of several pages, on 1, 2 and 3 threads.
TEST(AttentionInvariant, AVerifyBlockEqualsOneCallPerQueryOnAnyThreadCount) {
  const InvariantMode mode;
  for (QType t : {QType::F32, QType::F16, QType::BF16, QType::Q8_0, QType::Q4_0, QType::Q4_1,
                  QType::Q5_0, QType::Q5_1, QType::FP8_E4M3})
    for (bool tiled : {false, true}) {
      if (tiled && !kv::tileable(t)) continue;
      SCOPED_TRACE(std::string(qtype_name(t)) + (tiled ? " tiled" : " rows"));
      const kv::KvGeometry g = geometry(t, tiled, 64);
      const AttnParams p = params_for(g, 3, SplitKv::kAuto);
      for (int64_t n : {20, 263, 1100, 4100}) {
        SCOPED_TRACE(n);
        Filled f = make_filled(g, {n, 300}, uint32_t(n));
        std::vector<QueryInfo> block;
        for (int64_t j = 4; j >= 0; --j) block.push_back({&f.seqs[0], n - j});
        block.push_back({&f.seqs[1], 300});
        const size_t row = size_t(p.n_head) * p.head_dim_k,
                     out_row = size_t(p.n_head) * p.head_dim_v;
        const std::vector<float> q = random_q(block.size() * row, uint32_t(n + 1));
        std::vector<float> first;
        for (int threads : {1, 2, 3}) {
          SCOPED_TRACE(threads);
          const std::vector<float> together = run(*f.cache, p, block, q.data(), threads);
          for (size_t b = 0; b < block.size(); ++b) {
            const std::vector<float> alone =
                run(*f.cache, p, {block[b]}, q.data() + b * row, threads);
            ASSERT_EQ(0, std::memcmp(alone.data(), together.data() + b * out_row,
                                     out_row * sizeof(float)))
                << "query " << b << " (" << block[b].n_visible << " keys)";
          }
          if (first.empty()) {
            first = together;
          } else {
            ASSERT_EQ(0, std::memcmp(first.data(), together.data(), first.size() * sizeof(float)))
                << "another thread count, other bits";
          }
        }
        // Still attention: close to the double reference.
        std::vector<double> ref(first.size());
        attend_ref(*f.cache, 1, p, block, q.data(), ref.data());
        EXPECT_LE(max_rel_error(first, ref, p.head_dim_v), 0.05);
      }
    }
}

// The same on every SIMD target this CPU runs (AVX2, SSE4, scalar, ...
// beside the best one): each has its own score and V kernels.
TEST(AttentionInvariant, EveryCompiledTarget) {
  const InvariantMode mode;
  struct Case {
    QType t;
    bool tiled;
  };
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    std::printf("[ target   ] %s\n", hwy::TargetName(target));
    for (const Case c :
         {Case{QType::F16, false}, Case{QType::Q8_0, false}, Case{QType::Q8_0, true},
          Case{QType::Q4_1, false}, Case{QType::Q5_0, true}, Case{QType::FP8_E4M3, false}}) {
      SCOPED_TRACE(std::string(qtype_name(c.t)) + (c.tiled ? " tiled" : " rows"));
      const kv::KvGeometry g = geometry(c.t, c.tiled, 64);
      const AttnParams p = params_for(g, 3, SplitKv::kAuto);
      const int64_t n = 263;
      Filled f = make_filled(g, {n}, 9);
      std::vector<QueryInfo> block;
      for (int64_t j = 4; j >= 0; --j) block.push_back({&f.seqs[0], n - j});
      const size_t row = size_t(p.n_head) * p.head_dim_k, out_row = size_t(p.n_head) * p.head_dim_v;
      const std::vector<float> q = random_q(block.size() * row, 10);
      const std::vector<float> together = run(*f.cache, p, block, q.data(), 2);
      for (size_t b = 0; b < block.size(); ++b) {
        const std::vector<float> alone = run(*f.cache, p, {block[b]}, q.data() + b * row, 2);
        EXPECT_EQ(0,
                  std::memcmp(alone.data(), together.data() + b * out_row, out_row * sizeof(float)))
            << "query " << b;
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
}  // namespace sustain::attention::test
