#include "bench/verify_curve.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "bench/stats.h"

namespace sustain::bench {

using nlohmann::json;

namespace {

// Acceptances the report prices the curve at.
constexpr double kAlphas[] = {0.5, 0.6, 0.7, 0.8, 0.9};

}  // namespace

Expected<std::vector<VerifyCurvePoint>> measure_verify_curve(const engine::Engine& e,
                                                             ThreadPool& pool,
                                                             const VerifyCurveOptions& opt) {
  SUSTAIN_ASSIGN_OR_RETURN(auto ms,
                           engine::time_verify_steps(e.model(), e.kv_geometry(), pool, opt));
  std::vector<VerifyCurvePoint> out;
  for (size_t d = 0; d < ms.size(); ++d) out.push_back({opt.depths[d], std::move(ms[d])});
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
