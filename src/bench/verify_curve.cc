#include "bench/verify_curve.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "bench/stats.h"
#include "kv/random_fill.h"

namespace sustain::bench {

using nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

// Acceptances the report prices the curve at.
constexpr double kAlphas[] = {0.5, 0.6, 0.7, 0.8, 0.9};

}  // namespace

Expected<std::vector<VerifyCurvePoint>> measure_verify_curve(const Model& m,
                                                             const kv::KvGeometry& engine_geo,
                                                             ThreadPool& pool,
                                                             const VerifyCurveOptions& opt) {
  if (opt.depths.empty() || opt.ks.empty()) return std::vector<VerifyCurvePoint>{};
  // Two state slots for a hybrid: the sequence's, and its state at depth
  // that every step is rewound to (a recurrent state cannot be truncated).
  kv::KvGeometry g = m.kv_geometry(engine_geo.k_type, engine_geo.v_type, engine_geo.page_tokens, 2);
  g.tiled = engine_geo.tiled;
  g.window_layers.clear();
  const int64_t max_k = opt.ks.back();
  const int64_t max_depth = opt.depths.back();
  auto cache = kv::KvCache::create(g, max_depth + max_k + 1 + g.page_tokens);
  if (!cache) return cache.status().with_context("verify-cost curve: its KV cache");
  Workspace ws = m.make_workspace(max_k + 1, pool.size());
  const int64_t n_vocab = m.config().n_vocab;
  std::vector<float> logits(static_cast<size_t>((max_k + 1) * n_vocab));
  uint64_t s = opt.seed;
  auto token = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int32_t>(3 + (s >> 33) % static_cast<uint64_t>(n_vocab - 3));
  };
  kv::PageTable t;
  std::vector<VerifyCurvePoint> out;
  for (int64_t depth : opt.depths) {
    SUSTAIN_TRY(kv::fill_random(*cache, t, depth, opt.seed + static_cast<uint64_t>(depth)));
    int32_t saved = -1;
    if (cache->has_state()) {
      saved = cache->states().alloc();
      if (saved < 0) return error(Code::kInternal, "verify-cost curve: no state slot to save");
      cache->states().copy(t.state, saved);
    }
    VerifyCurvePoint p;
    p.depth = depth;
    p.ms.assign(opt.ks.size(), {});
    SUSTAIN_TRY(cache->reserve(t, max_k + 1));
    Status failed = Status::ok();
    for (int rep = 0; rep < opt.reps && failed.is_ok(); ++rep)
      for (size_t i = 0; i < opt.ks.size() && failed.is_ok(); ++i) {
        const int64_t k = opt.ks[i];
        Batch b;
        b.seqs = {&t};
        for (int64_t j = 0; j <= k; ++j) b.tokens.push_back({token(), 0, depth + j, true});
        const auto t0 = Clock::now();
        for (int st = 0; st < opt.steps; ++st) {
          failed = m.forward(b, *cache, ws, pool, logits.data());
          if (!failed.is_ok()) break;
          if (saved >= 0) cache->states().copy(saved, t.state);
        }
        const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
        p.ms[i].push_back(1e3 * sec / opt.steps);
      }
    cache->truncate(t, depth);
    if (saved >= 0) {
      cache->states().copy(saved, t.state);
      cache->states().free(saved);
    }
    if (!failed.is_ok()) return failed.with_context("verify-cost curve");
    out.push_back(std::move(p));
  }
  cache->release(t);
  return out;
}

double chain_tokens(double alpha, int64_t k) {
  double tokens = 0, a = 1;
  for (int64_t j = 0; j <= k; ++j, a *= alpha) tokens += a;
  return tokens;
}

json verify_curve_json(const std::vector<VerifyCurvePoint>& points, const VerifyCurveOptions& opt) {
  json pts = json::array();
  for (const VerifyCurvePoint& p : points) {
    std::vector<double> p50;
    for (const auto& v : p.ms) p50.push_back(summarize(v).p50);
    std::vector<double> ratio;
    for (double v : p50) ratio.push_back(p50[0] > 0 ? v / p50[0] : 0.0);
    json best = json::array();
    for (double a : kAlphas) {
      size_t bi = 0;
      double bs = 0;
      for (size_t i = 0; i < opt.ks.size(); ++i) {
        const double sp = ratio[i] > 0 ? chain_tokens(a, opt.ks[i]) / ratio[i] : 0.0;
        if (sp > bs) {
          bs = sp;
          bi = i;
        }
      }
      best.push_back({{"alpha", a}, {"k", opt.ks[bi]}, {"speedup", bs}});
    }
    pts.push_back(
        {{"depth", p.depth}, {"ms_p50", p50}, {"ratio", ratio}, {"ms", p.ms}, {"best", best}});
  }
  return {{"ks", opt.ks},
          {"alphas", std::vector<double>(std::begin(kAlphas), std::end(kAlphas))},
          {"steps", opt.steps},
          {"reps", opt.reps},
          {"method",
           "one sequence at each depth over random K/V rows; a verify step is k + 1 tokens "
           "with logits for each; every repetition times each k in turn; ratio = ms P50 over "
           "k = 0's; best = the k with the largest (1 - a^(k+1)) / (1 - a) / ratio at "
           "acceptance a"},
          {"points", pts}};
}

Expected<std::vector<int64_t>> parse_verify_ks(const std::string& list) {
  std::vector<int64_t> ks;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || end != item.c_str() + item.size() || v < 0 || v > VerifyCurveOptions::kMaxK)
      return error(Code::kInvalidArgument,
                   "--verify-curve: '{}' is not a draft length in 0..{} (e.g. 0,1,2,4,8,16)", item,
                   VerifyCurveOptions::kMaxK);
    if (!ks.empty() && v <= ks.back())
      return error(Code::kInvalidArgument, "--verify-curve: the list must ascend ({} after {})", v,
                   ks.back());
    ks.push_back(v);
  }
  if (ks.empty()) return error(Code::kInvalidArgument, "--verify-curve: the list is empty");
  if (ks.front() != 0) ks.insert(ks.begin(), 0);
  return ks;
}

}  // namespace sustain::bench
