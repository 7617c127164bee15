#include "bench/load.h"

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include <fmt/format.h>

namespace sustain::bench {
namespace {

Status validate(const LoadOptions& o) {
  if (o.concurrency.empty())
    return error(Code::kInvalidArgument, "concurrency ladder: the list of levels is empty");
  for (int n : o.concurrency)
    if (n < 1 || n > 4096)
      return error(Code::kInvalidArgument, "concurrency ladder: level {} is outside [1, 4096]", n);
  if (o.requests_per_client < 1)
    return error(Code::kInvalidArgument, "concurrency ladder: requests per client = {} (need >= 1)",
                 o.requests_per_client);
  for (double r : o.poisson_rates)
    if (!(r > 0)) return error(Code::kInvalidArgument, "poisson rate {} req/s is not > 0", r);
  for (double f : o.poisson_fractions)
    if (!(f > 0)) return error(Code::kInvalidArgument, "poisson load fraction {} is not > 0", f);
  if (o.poisson_requests < 1 && !(o.poisson_rates.empty() && o.poisson_fractions.empty()))
    return error(Code::kInvalidArgument, "poisson requests = {} (need >= 1)", o.poisson_requests);
  return Status::ok();
}

Status finish_level(LoadLevel& lv, const LoadTarget& target) {
  auto m = load_metrics(lv.requests);
  if (!m) return m.status().with_context(fmt::format("{} level {}", lv.mode, lv.concurrency));
  lv.metrics = *m;
  if (lv.metrics.failed > 0) lv.error = target.last_error();
  return Status::ok();
}

}  // namespace

Expected<std::vector<LoadLevel>> run_load(LoadTarget& target, const LoadOptions& opt) {
  SUSTAIN_TRY(validate(opt));
  std::atomic<int64_t> next_index{0};
  const auto report = [&](const std::string& phase, double f, const std::string& d) {
    if (opt.progress) opt.progress(phase, f, d);
  };
  const auto origin = BenchClock::now();
  for (int i = 0; i < opt.warmup_requests; ++i) target.run(next_index++, origin);

  int64_t total = 0;
  for (int n : opt.concurrency) total += static_cast<int64_t>(n) * opt.requests_per_client;
  int64_t done_total = 0;
  std::vector<LoadLevel> out;
  double best_req_s = 0;
  for (int n : opt.concurrency) {
    LoadLevel lv;
    lv.mode = "fixed";
    lv.concurrency = n;
    const int64_t count = static_cast<int64_t>(n) * opt.requests_per_client;
    lv.requests.resize(static_cast<size_t>(count));
    std::atomic<int64_t> slot{0}, finished{0};
    target.level_begin();
    std::vector<std::thread> clients;
    for (int c = 0; c < n; ++c) {
      clients.emplace_back([&] {
        for (int64_t s = slot++; s < count; s = slot++) {
          lv.requests[static_cast<size_t>(s)] = target.run(next_index++, origin);
          ++finished;
        }
      });
    }
    // The caller's thread reports progress while the clients run.
    while (finished.load() < count) {
      report("concurrency", static_cast<double>(done_total + finished.load()) / total,
             fmt::format("N={} request {}/{}", n, finished.load(), count));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (auto& t : clients) t.join();
    lv.target_counters = target.level_counters();
    done_total += count;
    SUSTAIN_TRY(finish_level(lv, target));
    if (lv.metrics.wall_s > 0)
      best_req_s =
          std::max(best_req_s, (lv.metrics.requests - lv.metrics.failed) / lv.metrics.wall_s);
    out.push_back(std::move(lv));
  }

  std::vector<double> rates = opt.poisson_rates;
  if (rates.empty())
    for (double f : opt.poisson_fractions)
      if (best_req_s > 0) rates.push_back(f * best_req_s);
  std::mt19937_64 rng(opt.seed);
  for (size_t ri = 0; ri < rates.size(); ++ri) {
    LoadLevel lv;
    lv.mode = "poisson";
    lv.rate = rates[ri];
    const int count = opt.poisson_requests;
    lv.requests.resize(static_cast<size_t>(count));
    std::exponential_distribution<double> gap(rates[ri]);
    std::atomic<int> in_flight{0}, max_in_flight{0}, finished{0};
    std::vector<std::thread> threads;
    target.level_begin();
    auto t_next = BenchClock::now();
    for (int i = 0; i < count; ++i) {
      std::this_thread::sleep_until(t_next);
      const int64_t idx = next_index++;
      threads.emplace_back([&, i, idx] {
        const int now = ++in_flight;
        int prev = max_in_flight.load();
        while (now > prev && !max_in_flight.compare_exchange_weak(prev, now)) {
        }
        lv.requests[static_cast<size_t>(i)] = target.run(idx, origin);
        --in_flight;
        ++finished;
      });
      report("poisson", static_cast<double>(finished.load()) / count,
             fmt::format("{:.2f} req/s, request {}/{}", rates[ri], i + 1, count));
      t_next +=
          std::chrono::duration_cast<BenchClock::duration>(std::chrono::duration<double>(gap(rng)));
    }
    for (auto& t : threads) t.join();
    lv.target_counters = target.level_counters();
    lv.concurrency = max_in_flight.load();
    SUSTAIN_TRY(finish_level(lv, target));
    out.push_back(std::move(lv));
  }
  return out;
}

}  // namespace sustain::bench
