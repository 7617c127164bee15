// The engine over a real (synthetic) GGUF model: one request against a
// direct forward loop, many concurrent requests, prefix reuse, preemption
// under a small KV pool, cancellation, queue limits and request validation.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

#include "bench/plan_input.h"
#include "plan/plan.h"
#include "engine/api.h"
#include "test_util.h"
#include "tools/presets.h"
#include "tools/synth.h"

namespace sustain::engine {
namespace {

using test::tmp_path;

// tiny-llama shaped model (3 layers, d=256, GQA 8/2, vocab 512), F32 weights
// so that results do not depend on how a batch is tiled.
const std::string& model_path(tools::FileType type = tools::FileType::kF32) {
  static std::mutex mu;
  static std::map<tools::FileType, std::string> paths;
  std::lock_guard<std::mutex> l(mu);
  auto it = paths.find(type);
  if (it != paths.end()) return it->second;
  const std::string path = tmp_path("engine_tiny_" + std::to_string(int(type)) + ".gguf");
  ThreadPool pool(2);
  tools::SynthOptions opt;
  opt.type = type;
  auto r = tools::synth_model(*tools::find_preset("tiny-llama"), path, opt, pool);
  EXPECT_TRUE(r.has_value()) << r.status().message();
  return paths[type] = path;
}

EngineConfig base_config() {
  EngineConfig c;
  c.model_path = model_path();
  c.n_threads = 2;
  c.n_ctx = 1024;
  return c;
}

std::unique_ptr<Engine> make(const EngineConfig& c) {
  auto e = Engine::create(c);
  EXPECT_TRUE(e.has_value()) << e.status().message();
  return e ? std::move(*e) : nullptr;
}

std::vector<int32_t> prompt_of(int n, uint32_t seed) {
  std::vector<int32_t> p;
  uint32_t x = seed * 2654435761u + 1;
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    p.push_back(static_cast<int32_t>(3 + (x >> 8) % 500));  // skip BOS/EOS/UNK ids
  }
  return p;
}

Request greedy(std::vector<int32_t> prompt, int n) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = n;
  r.sampling.temperature = 0.0f;
  r.ignore_eos = true;
  return r;
}

std::vector<int32_t> ids(const Event& e) {
  std::vector<int32_t> v;
  for (const auto& t : e.tokens) v.push_back(t.id);
  return v;
}

// Decoding with Model::forward directly: the prompt in one call, then one
// token per call, the shapes an engine with one request uses; pick(k,
// logits) chooses the k-th token.
std::vector<int32_t> direct_decode(
    const std::string& path, const std::vector<int32_t>& prompt, int n, int64_t chunk,
    const std::function<int32_t(int, const std::vector<float>&)>& pick) {
  auto model = Model::load(path);
  EXPECT_TRUE(model.has_value());
  auto cache = kv::KvCache::create((*model)->kv_geometry(), 1024);
  EXPECT_TRUE(cache.has_value());
  ThreadPool pool(2);
  Workspace ws = (*model)->make_workspace(chunk, 2);  // the prompt goes in chunks of `chunk`
  const int n_vocab = static_cast<int>((*model)->config().n_vocab);
  std::vector<float> logits(n_vocab);
  kv::PageTable t;
  std::vector<int32_t> out, feed = prompt;
  for (int i = 0; i < n; ++i) {
    const int64_t start = t.n_tokens;
    EXPECT_TRUE(cache->reserve(t, static_cast<int64_t>(feed.size())).is_ok());
    Batch b;
    b.seqs = {&t};
    for (size_t j = 0; j < feed.size(); ++j)
      b.tokens.push_back({feed[j], 0, start + static_cast<int64_t>(j), j + 1 == feed.size()});
    EXPECT_TRUE((*model)->forward(b, *cache, ws, pool, logits.data()).is_ok());
    const int32_t next = pick(i, logits);
    out.push_back(next);
    feed = {next};
  }
  return out;
}

std::vector<int32_t> direct_greedy(const std::string& path, const std::vector<int32_t>& prompt,
                                   int n, int64_t chunk = 512) {
  return direct_decode(path, prompt, n, chunk, [](int, const std::vector<float>& logits) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  });
}

TEST(Engine, OneRequestMatchesDirectForward) {
  auto e = make(base_config());
  ASSERT_TRUE(e);
  const auto prompt = prompt_of(40, 1);
  auto s = e->submit(greedy(prompt, 12));
  ASSERT_TRUE(s.has_value()) << s.status().message();
  Event ev = s->wait();
  EXPECT_EQ(ev.finish, Finish::kLength);
  EXPECT_EQ(ev.usage.prompt_tokens, 40);
  EXPECT_EQ(ev.usage.completion_tokens, 12);
  EXPECT_EQ(ids(ev), direct_greedy(model_path(), prompt, 12));
  // Timestamps are ordered: submit <= first token <= each token <= end.
  EXPECT_LE(ev.t_submit, ev.t_first_token);
  for (size_t i = 1; i < ev.tokens.size(); ++i) EXPECT_LE(ev.tokens[i - 1].t, ev.tokens[i].t);
  EXPECT_LE(ev.tokens.back().t, ev.t_end);
}

TEST(Engine, ConcurrentRequestsFromManyThreadsEachMatchTheirSoloRun) {
  EngineConfig c = base_config();
  c.n_parallel = 4;
  c.batch_tokens = 64;  // long prompts are prefilled in chunks beside decoding streams
  c.deterministic = true;
  // Quantized weights: a token's logits depend on the batch's shape unless
  // --deterministic keeps each sequence's shapes its own.
  c.model_path = model_path(tools::FileType::kQ4_K_M);
  auto e = make(c);
  ASSERT_TRUE(e);
  constexpr int kClients = 8;
  std::vector<std::vector<int32_t>> prompts, got(kClients);
  for (int i = 0; i < kClients; ++i) prompts.push_back(prompt_of(i % 2 ? 150 : 9, 100 + i));
  std::vector<std::thread> th;
  for (int i = 0; i < kClients; ++i) {
    th.emplace_back([&, i] {
      auto s = e->submit(greedy(prompts[i], 10));
      ASSERT_TRUE(s.has_value());
      // Read incrementally, as a streaming client does.
      while (true) {
        auto ev = s->next(std::chrono::milliseconds(5000));
        ASSERT_TRUE(ev.has_value()) << "no event in 5 s";
        for (auto& t : ev->tokens) got[i].push_back(t.id);
        if (ev->done) {
          EXPECT_EQ(ev->finish, Finish::kLength);
          break;
        }
      }
    });
  }
  for (auto& t : th) t.join();
  for (int i = 0; i < kClients; ++i) {
    EXPECT_EQ(got[i].size(), 10u);
    EXPECT_EQ(got[i], direct_greedy(c.model_path, prompts[i], 10, 64)) << "client " << i;
  }
  const EngineStats st = e->stats();
  EXPECT_EQ(st.requests_finished, uint64_t(kClients));
  EXPECT_EQ(st.generated_tokens, uint64_t(kClients * 10));
  EXPECT_EQ(st.ttft.count, uint64_t(kClients));
}

// Eight streams sampling at a temperature, each with its own seed and
// chain, decode the same tokens whether a step samples them over the pool
// or one after another (F32 weights: a row's logits do not depend on the
// batch around it), and the pooled run did sample several at once.
TEST(Engine, PoolSamplingDrawsWhatSerialSamplingDraws) {
  constexpr int kClients = 8;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kClients; ++i) prompts.push_back(prompt_of(12 + 5 * i, 300 + i));
  auto run = [&](bool pooled, uint64_t* pooled_tokens) {
    EngineConfig c = base_config();
    c.n_parallel = kClients;
    c.pool_sampling = pooled;
    auto e = make(c);
    std::vector<std::vector<int32_t>> got(kClients);
    if (!e) return got;
    std::vector<std::thread> th;
    for (int i = 0; i < kClients; ++i)
      th.emplace_back([&, i] {
        Request r = greedy(prompts[i], 24);
        r.sampling.temperature = 0.7f + 0.1f * static_cast<float>(i % 3);
        r.sampling.seed = 1000 + static_cast<uint64_t>(i);
        // The chains clients send: a temperature alone, with top_p, and
        // the default chain (top_k 40).
        if (i % 3 != 2) r.sampling.top_k = 0, r.sampling.min_p = 0.0f;
        if (i % 3 == 0) r.sampling.top_p = 1.0f;
        auto s = e->submit(r);
        ASSERT_TRUE(s.has_value()) << s.status().message();
        const Event ev = s->wait();
        EXPECT_EQ(ev.finish, Finish::kLength) << ev.error.message();
        got[i] = ids(ev);
      });
    for (auto& t : th) t.join();
    *pooled_tokens = e->stats().pool_sampled_tokens;
    return got;
  };
  uint64_t pooled = 0, serial = 0;
  const auto a = run(true, &pooled), b = run(false, &serial);
  for (int i = 0; i < kClients; ++i) {
    EXPECT_EQ(a[i].size(), 24u);
    EXPECT_EQ(a[i], b[i]) << "client " << i;
  }
  EXPECT_GT(pooled, 0u) << "no step sampled several streams at once";
  EXPECT_EQ(serial, 0u);
}

// Three greedy streams at once asking for logprobs (so a step describes
// their tokens over the pool): each token's logprob and its 20 best
// alternatives are the log-softmax of the logits a direct forward computes,
// in double precision here, ranked by logit with ties to the lower id.
TEST(Engine, LogprobsAreTheLogSoftmaxOfTheLogits) {
  constexpr int kClients = 3, kTokens = 6, kTop = 20;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kClients; ++i) prompts.push_back(prompt_of(10 + 7 * i, 500 + i));
  EngineConfig c = base_config();
  c.n_parallel = kClients;
  auto e = make(c);
  ASSERT_TRUE(e);
  std::vector<Event> got(kClients);
  std::vector<std::thread> th;
  for (int i = 0; i < kClients; ++i)
    th.emplace_back([&, i] {
      Request r = greedy(prompts[i], kTokens);
      r.logprobs = true;
      r.top_logprobs = kTop;
      auto s = e->submit(r);
      ASSERT_TRUE(s.has_value()) << s.status().message();
      got[i] = s->wait();
    });
  for (auto& t : th) t.join();
  EXPECT_GT(e->stats().pool_sampled_tokens, 0u);
  for (int i = 0; i < kClients; ++i) {
    ASSERT_EQ(got[i].tokens.size(), size_t{kTokens}) << got[i].error.message();
    direct_decode(
        model_path(), prompts[i], kTokens, 512, [&](int k, const std::vector<float>& logits) {
          double mx = logits[0], sum = 0.0;
          for (float v : logits) mx = std::max(mx, static_cast<double>(v));
          for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
          const double lse = mx + std::log(sum);
          std::vector<int32_t> order(logits.size());
          for (size_t j = 0; j < order.size(); ++j) order[j] = static_cast<int32_t>(j);
          std::partial_sort(order.begin(), order.begin() + kTop, order.end(),
                            [&](int32_t a, int32_t b) {
                              return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
                            });
          const TokenEvent& ev = got[i].tokens[static_cast<size_t>(k)];
          const auto where = testing::Message() << "client " << i << " token " << k;
          EXPECT_EQ(ev.id, order[0]) << where;
          EXPECT_NEAR(ev.logprob, logits[ev.id] - lse, 1e-4) << where;
          EXPECT_EQ(ev.top.size(), size_t{kTop}) << where;
          for (size_t r = 0; r < ev.top.size() && r < size_t{kTop}; ++r) {
            EXPECT_EQ(ev.top[r].id, order[r]) << where << " rank " << r;
            EXPECT_NEAR(ev.top[r].logprob, logits[order[r]] - lse, 1e-4) << where << " rank " << r;
          }
          return ev.id;
        });
  }
}

// A second request sharing a 4096-token prefix computes only its 50-token
// tail and returns what a cold run returns: the same tokens, and the same
// logprobs of the top 20 candidates (log-softmax of the raw logits) at every
// step, to `tol` (0: bit for bit).
void check_prefix_reuse(const std::string& path, float tol) {
  EngineConfig c = base_config();
  c.model_path = path;
  c.n_ctx = 8192;
  const auto shared = prompt_of(4096, 7);
  auto with_tail = [&](uint32_t seed) {
    auto p = shared;
    auto t = prompt_of(50, seed);
    p.insert(p.end(), t.begin(), t.end());
    return p;
  };
  auto run = [](Engine& e, std::vector<int32_t> p) {
    Request r = greedy(std::move(p), 4);
    r.logprobs = true;
    r.top_logprobs = 20;
    auto s = e.submit(r);
    EXPECT_TRUE(s.has_value());
    return s->wait();
  };
  // Cold: no prefix cache.
  c.prefix_cache = false;
  auto cold = make(c);
  ASSERT_TRUE(cold);
  const Event cold_b = run(*cold, with_tail(2));
  cold.reset();

  c.prefix_cache = true;
  auto warm = make(c);
  ASSERT_TRUE(warm);
  const Event a = run(*warm, with_tail(1));
  EXPECT_EQ(a.usage.cached_prompt_tokens, 0);
  const uint64_t computed_before = warm->stats().prompt_tokens_computed;
  const Event b = run(*warm, with_tail(2));
  const EngineStats st = warm->stats();
  EXPECT_EQ(b.usage.cached_prompt_tokens, 4096);
  EXPECT_EQ(st.prompt_tokens_computed - computed_before, 50u) << "only the new tail is computed";
  EXPECT_EQ(st.prefix_cache_hits, 1u);
  ASSERT_EQ(ids(b), ids(cold_b));
  for (size_t i = 0; i < b.tokens.size(); ++i) {
    ASSERT_EQ(b.tokens[i].top.size(), cold_b.tokens[i].top.size());
    for (size_t k = 0; k < b.tokens[i].top.size(); ++k) {
      EXPECT_EQ(b.tokens[i].top[k].id, cold_b.tokens[i].top[k].id);
      EXPECT_NEAR(b.tokens[i].top[k].logprob, cold_b.tokens[i].top[k].logprob, tol);
    }
  }
}

TEST(Engine, PrefixReuseComputesOnlyTheNewTailWithIdenticalLogits) {
  check_prefix_reuse(model_path(), 0.0f);
}

// The 2026 architectures on the reference files: gemma3's local blocks see
// only the last 16 of the 4146 tokens, and keep only those pages; the
// prefix resumes from the window snapshot at the prompt's last page (4096).
// qwen3moe routes every token to 2 of 8 experts and keeps a KV cache on
// every block, so a cached prefix is all it needs. Their two query heads per KV head make the
// attention kernel group rows differently for a 50-token tail than for the
// cold run's chunks (an ulp, grown by the layers; see ForwardBatching), so
// the logprobs agree to 1e-4, not bit for bit.
TEST(Engine, PrefixReuseOnGemma3AndQwen3Moe) {
  SUSTAIN_REQUIRE_REF();
  for (const char* m : {"tiny-gemma3-f32", "tiny-qwen3moe-f32"}) {
    SCOPED_TRACE(m);
    check_prefix_reuse(test::ref_path(std::string("models/") + m + ".gguf"), 1e-4f);
  }
}

// gemma3's sliding-window blocks keep their K/V in a pool of their own,
// sized for the sequences' windows and steps, not the context: over a
// 3000-token prompt and 40 decoded tokens on each of 2 sequences at once
// the greedy tokens equal those of a run that keeps every window page
// (--swa-full), and once the requests end
// only the prefix cache's snapshots hold window pages. With --swa-full the
// window layers keep every page in the main pool.
TEST(Engine, Gemma3WindowPagesGoBackAsSequencesMoveOn) {
  SUSTAIN_REQUIRE_REF();
  EngineConfig c = base_config();
  c.model_path = test::ref_path("models/tiny-gemma3-f32.gguf");
  c.n_ctx = 4096;
  c.n_parallel = 2;
  c.page_tokens = 16;
  c.batch_tokens = c.ubatch_tokens = 256;
  auto run = [&](const EngineConfig& cfg, EngineStats* st) {
    auto e = make(cfg);
    std::vector<std::vector<int32_t>> out;
    if (!e) return out;
    std::vector<Stream> streams;
    for (uint32_t seed : {5u, 6u}) {
      auto s = e->submit(greedy(prompt_of(3000, seed), 40));
      EXPECT_TRUE(s.has_value());
      streams.push_back(std::move(*s));
    }
    for (auto& s : streams) {
      const Event ev = s.wait();
      EXPECT_EQ(ev.finish, Finish::kLength) << ev.error.message();
      out.push_back(ids(ev));
    }
    *st = e->stats();
    return out;
  };
  EngineStats st;
  const auto got = run(c, &st);
  // Window 16 before a step of up to 256 tokens: (15 + 256) / 16 → 18 pages
  // a sequence; 8 snapshots (4 a sequence) of one page each.
  EXPECT_EQ(st.kv_window_pages_total, 2 * 18 + 8);
  EXPECT_EQ(st.kv_pages_total, 4096 * 2 / 16);
  EXPECT_LE(st.kv_window_pages_used, 8);
  EXPECT_GT(st.state_snapshots_saved, 0u);
  // plan sizes both pools as the engine allocates them.
  {
    auto e = make(c);
    ASSERT_TRUE(e);
    plan::PlanInput in;
    ASSERT_TRUE(bench::read_plan_file(c.model_path, in).is_ok());
    in.n_ctx = c.n_ctx;
    in.n_parallel = c.n_parallel;
    in.page_tokens = c.page_tokens;
    in.batch = std::max(c.batch_tokens, c.ubatch_tokens);
    in.state_snapshots = prefix_snapshots(c);
    in.host_capacity = uint64_t{1} << 40;
    auto p = plan::make_plan(in);
    ASSERT_TRUE(p) << p.status().message();
    EXPECT_EQ(p->window_pages, st.kv_window_pages_total);
    EXPECT_EQ(static_cast<int64_t>(p->kv_bytes), e->kv_bytes());
  }
  EngineConfig full = c;
  full.swa_full = true;
  EngineStats st2;
  const auto want = run(full, &st2);
  EXPECT_EQ(st2.kv_window_pages_total, 0);
  EXPECT_EQ(got, want);
}

// qwen35 (3 Gated DeltaNet blocks, 1 full attention): the pages alone cannot
// resume a prefix, the recurrent state must be at the same position. The
// engine saves it every 1024 prompt tokens (and at the prompt's last page);
// the second request resumes from the snapshot at 4096, where its prompt
// leaves the first one's, and computes only its 50-token tail.
TEST(Engine, PrefixReuseOnQwen35ResumesFromAStateSnapshot) {
  SUSTAIN_REQUIRE_REF();
  const std::string path = test::ref_path("models/tiny-qwen35-f32.gguf");
  check_prefix_reuse(path, 1e-4f);
  // Snapshots are counted, and none is kept without a prefix cache.
  EngineConfig c = base_config();
  c.model_path = path;
  c.n_ctx = 4096;
  auto e = make(c);
  ASSERT_TRUE(e);
  auto s = e->submit(greedy(prompt_of(2100, 3), 2));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->wait().finish, Finish::kLength);
  EXPECT_EQ(e->stats().state_snapshots_saved, 3u);  // at 1024, 2048 and 2080
}

// Preemption of a hybrid model frees its state slot; the sequence resumes
// from its saved snapshot (or from scratch) and its tokens do not change:
// the same requests with room for all of them give the same tokens
// (deterministic mode fixes the chunking, so the delta rule sees the same
// chunks either way).
TEST(Engine, Qwen35PreemptionKeepsEveryRequestCorrect) {
  SUSTAIN_REQUIRE_REF();
  EngineConfig c = base_config();
  c.model_path = test::ref_path("models/tiny-qwen35-f32.gguf");
  c.n_ctx = 256;
  c.n_parallel = 4;
  c.deterministic = true;
  c.state_snapshot_interval = 32;
  auto run_all = [&](int64_t kv_tokens, int* preempted) {
    c.kv_tokens = kv_tokens;
    auto e = make(c);
    EXPECT_TRUE(e);
    std::vector<Stream> streams;
    for (int i = 0; i < 4; ++i) {
      auto s = e->submit(greedy(prompt_of(60, 300 + i), 120));
      EXPECT_TRUE(s.has_value());
      streams.push_back(std::move(*s));
    }
    std::vector<std::vector<int32_t>> out;
    for (auto& s : streams) {
      Event ev = s.wait();
      EXPECT_EQ(ev.finish, Finish::kLength);
      out.push_back(ids(ev));
      *preempted += ev.usage.preemptions;
    }
    EXPECT_EQ(e->stats().kv_pages_used, 0);
    return out;
  };
  int none = 0, preempted = 0;
  const auto roomy = run_all(4 * 256, &none);
  const auto tight = run_all(320, &preempted);  // 10 pages: four ~180-token sequences do not fit
  EXPECT_EQ(none, 0);
  EXPECT_GT(preempted, 0);
  EXPECT_EQ(tight, roomy);
}

TEST(Engine, PreemptsUnderASmallKvPoolAndEveryRequestStillCompletesCorrectly) {
  EngineConfig c = base_config();
  c.n_ctx = 256;
  c.n_parallel = 4;
  c.kv_tokens = 320;  // 10 pages: four sequences growing to ~200 tokens cannot all fit
  c.deterministic = true;
  c.model_path = model_path(tools::FileType::kQ4_K_M);
  c.prefix_cache = false;
  auto e = make(c);
  ASSERT_TRUE(e);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<Stream> streams;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(prompt_of(60, 300 + i));
    auto s = e->submit(greedy(prompts.back(), 120));
    ASSERT_TRUE(s.has_value());
    streams.push_back(std::move(*s));
  }
  int preempted = 0;
  for (int i = 0; i < 4; ++i) {
    Event ev = streams[i].wait();
    EXPECT_EQ(ev.finish, Finish::kLength);
    EXPECT_EQ(ids(ev), direct_greedy(c.model_path, prompts[i], 120)) << "request " << i;
    preempted += ev.usage.preemptions;
  }
  EXPECT_GT(preempted, 0);
  EXPECT_EQ(e->stats().preemptions, uint64_t(preempted));
  EXPECT_EQ(e->stats().kv_pages_used, 0);
}

TEST(Engine, CancelAndDroppedStreamsFreeTheirPages) {
  EngineConfig c = base_config();
  c.prefix_cache = false;
  auto e = make(c);
  ASSERT_TRUE(e);
  auto s = e->submit(greedy(prompt_of(100, 5), 900));
  ASSERT_TRUE(s.has_value());
  auto first = s->next(std::chrono::milliseconds(10000));
  ASSERT_TRUE(first.has_value());
  e->cancel(s->id());
  Event rest = s->wait();
  EXPECT_EQ(rest.finish, Finish::kCancelled);
  EXPECT_LT(rest.usage.completion_tokens, 900);
  {
    auto d = e->submit(greedy(prompt_of(100, 6), 900));
    ASSERT_TRUE(d.has_value());
    ASSERT_TRUE(d->next(std::chrono::milliseconds(10000)).has_value());
  }  // dropped mid-stream
  for (int i = 0; i < 200 && (e->stats().running > 0 || e->stats().kv_pages_used > 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(e->stats().running, 0);
  EXPECT_EQ(e->stats().kv_pages_used, 0);
  EXPECT_EQ(e->stats().requests_cancelled, 2u);
}

TEST(Engine, FullQueueIsRejectedAtOnce) {
  EngineConfig c = base_config();
  c.max_queue = 2;
  auto e = make(c);
  ASSERT_TRUE(e);
  std::vector<Stream> keep;
  int rejected = 0;
  for (int i = 0; i < 8; ++i) {
    auto s = e->submit(greedy(prompt_of(20, 40 + i), 500));
    if (s) {
      keep.push_back(std::move(*s));
    } else {
      EXPECT_EQ(s.status().code(), Code::kUnavailable);
      EXPECT_NE(s.status().message().find("queue is full"), std::string::npos);
      ++rejected;
    }
  }
  EXPECT_GE(rejected, 5);  // one may already run, two wait
  EXPECT_EQ(e->stats().requests_rejected, uint64_t(rejected));
}

// --max-queue 0: what finds a free sequence slot is taken, nothing waits.
// (It used to refuse every request: the queue bound counted the requests
// the free slots were about to take.)
TEST(Engine, MaxQueueZeroTakesWhatCanStartNow) {
  EngineConfig c = base_config();
  c.n_parallel = 2;
  c.max_queue = 0;
  auto e = make(c);
  ASSERT_TRUE(e);
  std::vector<Stream> keep;
  for (int i = 0; i < 2; ++i) {
    auto s = e->submit(greedy(prompt_of(20, 70 + i), 800));
    ASSERT_TRUE(s) << s.status().message();
    keep.push_back(std::move(*s));
  }
  for (int i = 0; i < 500 && e->stats().running < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(e->stats().running, 2);
  auto third = e->submit(greedy(prompt_of(20, 80), 4));
  ASSERT_FALSE(third);
  EXPECT_EQ(third.status().code(), Code::kUnavailable);
  EXPECT_NE(third.status().message().find("--max-queue 0"), std::string::npos)
      << third.status().message();
  // One slot frees: the next request is taken and runs to its end.
  e->cancel(keep[0].id());
  for (int i = 0; i < 500 && e->stats().running > 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  auto fourth = e->submit(greedy(prompt_of(20, 90), 4));
  ASSERT_TRUE(fourth) << fourth.status().message();
  int tokens = 0;
  for (;;) {
    auto ev = fourth->next(std::chrono::milliseconds(60000));
    ASSERT_TRUE(ev);
    tokens += static_cast<int>(ev->tokens.size());
    if (ev->done) break;
  }
  EXPECT_EQ(tokens, 4);
}

// Request::synthetic_prefix (bench --fill random): the prompt's K/V but the
// last token's are random, written without a forward. Only one prompt
// token is computed, the same prompt decodes the same tokens again (an
// oracle's recorded path holds), the random pages never reach the prefix
// cache (the real request after them computes its whole prompt), every
// page comes back, and sequences preempted under a small pool come back
// with the same fill and the same tokens.
Request random_filled(std::vector<int32_t> prompt, int n) {
  Request r = greedy(std::move(prompt), n);
  r.synthetic_prefix = true;
  return r;
}

TEST(Engine, RandomFilledPromptsDecodeWithoutAPrefill) {
  auto e = make(base_config());
  ASSERT_TRUE(e);
  const std::vector<int32_t> p = prompt_of(700, 21);
  auto run = [&](Request r) {
    auto s = e->submit(std::move(r));
    EXPECT_TRUE(s.has_value()) << s.status().message();
    return s ? s->wait() : Event{};
  };
  const uint64_t computed0 = e->stats().prompt_tokens_computed;
  const Event a = run(random_filled(p, 12));
  EXPECT_EQ(a.finish, Finish::kLength);
  EXPECT_EQ(a.usage.completion_tokens, 12);
  EXPECT_EQ(e->stats().prompt_tokens_computed - computed0, 1u);
  const Event b = run(random_filled(p, 12));
  EXPECT_EQ(ids(b), ids(a));
  EXPECT_EQ(b.usage.cached_prompt_tokens, 0);
  // Not what the model computes from the prompt itself.
  const Event real = run(greedy(p, 12));
  EXPECT_EQ(real.usage.cached_prompt_tokens, 0);
  EXPECT_EQ(ids(real), direct_greedy(model_path(), p, 12));
  EXPECT_NE(ids(real), ids(a));
  EXPECT_EQ(e->stats().prompt_tokens_computed - computed0, 702u);
  EXPECT_EQ(e->stats().kv_pages_used, 0);
}

TEST(Engine, RandomFilledPromptsSurvivePreemption) {
  EngineConfig c = base_config();
  c.n_ctx = 256;
  c.n_parallel = 4;
  c.kv_tokens = 320;  // as the preemption test above: four cannot all fit
  c.deterministic = true;
  c.prefix_cache = false;
  auto small = make(c);
  c.kv_tokens = 0;
  auto roomy = make(c);
  ASSERT_TRUE(small && roomy);
  std::vector<Stream> streams;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(prompt_of(60, 400 + i));
    auto s = small->submit(random_filled(prompts.back(), 120));
    ASSERT_TRUE(s.has_value()) << s.status().message();
    streams.push_back(std::move(*s));
  }
  int preempted = 0;
  for (int i = 0; i < 4; ++i) {
    const Event ev = streams[i].wait();
    EXPECT_EQ(ev.finish, Finish::kLength);
    preempted += ev.usage.preemptions;
    auto alone = roomy->submit(random_filled(prompts[i], 120));
    ASSERT_TRUE(alone.has_value());
    EXPECT_EQ(ids(ev), ids(alone->wait())) << "request " << i;
  }
  EXPECT_GT(preempted, 0);
  EXPECT_EQ(small->stats().kv_pages_used, 0);
}

// A random fill is admitted where the free pages and the prefix cache's
// evictable ones cover it, and the fill writes without the reservation
// that evicts: so the cached prefixes it needs room from are evicted
// first. (Before, the fill's reservation failed and the request ended in
// an error, naming the pool.)
TEST(Engine, RandomFillTakesItsRoomFromCachedPrefixes) {
  EngineConfig c = base_config();
  c.kv_tokens = 640;  // 20 pages of 32
  c.n_ctx = 640;
  auto e = make(c);
  ASSERT_TRUE(e);
  auto run = [&](Request r) {
    auto s = e->submit(std::move(r));
    EXPECT_TRUE(s.has_value()) << s.status().message();
    return s ? s->wait() : Event{};
  };
  // A real request leaves its 13 full pages in the prefix cache.
  const Event cached = run(greedy(prompt_of(420, 31), 4));
  ASSERT_EQ(cached.finish, Finish::kLength) << cached.error.message();
  const EngineStats before = e->stats();
  ASSERT_GE(before.kv_pages_cached, 13);
  ASSERT_EQ(before.kv_pages_total, 20);
  // A random fill of 500 tokens (16 pages) fits only with some evicted.
  const Event filled = run(random_filled(prompt_of(500, 32), 4));
  EXPECT_EQ(filled.finish, Finish::kLength) << filled.error.message();
  EXPECT_EQ(filled.usage.completion_tokens, 4);
  // And the fill was written where the evicted prefix was: the same prompt
  // alone on a fresh engine decodes the same tokens.
  auto fresh = make(c);
  ASSERT_TRUE(fresh);
  auto again = fresh->submit(random_filled(prompt_of(500, 32), 4));
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(ids(filled), ids(again->wait()));
}

// A hybrid model's recurrent state is filled too; the configurations a
// random fill cannot serve are refused, naming why.
TEST(Engine, RandomFilledPromptsOnAHybridAndWhereRefused) {
  {
    EngineConfig c = base_config();
    c.spec.types = {"draft"};
    c.spec.draft_model = model_path();
    auto e = make(c);
    ASSERT_TRUE(e);
    auto s = e->submit(random_filled(prompt_of(50, 1), 4));
    ASSERT_FALSE(s.has_value());
    EXPECT_EQ(s.status().code(), Code::kUnsupported);
    EXPECT_NE(s.status().message().find("draft or mtp"), std::string::npos) << s.status().message();
    Request opted_out = random_filled(prompt_of(50, 1), 4);
    opted_out.speculative = false;  // no proposer runs for it: allowed
    auto ok = e->submit(std::move(opted_out));
    ASSERT_TRUE(ok.has_value()) << ok.status().message();
    EXPECT_EQ(ok->wait().finish, Finish::kLength);
  }
  SUSTAIN_REQUIRE_REF();
  {
    EngineConfig c = base_config();
    c.model_path = test::ref_path("models/tiny-gemma3-f32.gguf");
    auto e = make(c);
    ASSERT_TRUE(e);
    auto s = e->submit(random_filled(prompt_of(50, 1), 4));
    ASSERT_FALSE(s.has_value());
    EXPECT_NE(s.status().message().find("sliding-window"), std::string::npos)
        << s.status().message();
  }
  EngineConfig c = base_config();
  c.model_path = test::ref_path("models/tiny-qwen35-f32.gguf");
  c.n_ctx = 4096;
  auto e = make(c);
  ASSERT_TRUE(e);
  const std::vector<int32_t> p = prompt_of(3000, 8);
  auto a = e->submit(random_filled(p, 8));
  ASSERT_TRUE(a.has_value()) << a.status().message();
  const Event ea = a->wait();
  EXPECT_EQ(ea.finish, Finish::kLength);
  auto b = e->submit(random_filled(p, 8));
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(ids(b->wait()), ids(ea));
  EXPECT_EQ(e->stats().state_snapshots_saved, 0u);
  EXPECT_EQ(e->stats().kv_pages_used, 0);
}

TEST(Engine, BadRequestsNameTheProblem) {
  auto e = make(base_config());
  ASSERT_TRUE(e);
  auto msg = [&](Request r) {
    auto s = e->submit(std::move(r));
    EXPECT_FALSE(s.has_value());
    return s ? std::string() : s.status().message();
  };
  EXPECT_NE(msg(greedy({}, 4)).find("empty"), std::string::npos);
  EXPECT_NE(msg(greedy({1, 512}, 4)).find("token 512 at index 1 is outside the vocabulary"),
            std::string::npos);
  const std::string over = msg(greedy(prompt_of(1024, 1), 4));
  EXPECT_NE(over.find("1024 tokens"), std::string::npos) << over;
  EXPECT_NE(over.find("context is 1024"), std::string::npos) << over;
  EXPECT_NE(msg(greedy({1, 2}, 0)).find("max_tokens"), std::string::npos);
  Request r = greedy({1, 2}, 4);
  r.sampling.top_p = 1.5f;
  EXPECT_NE(msg(r).find("top_p"), std::string::npos);
  r = greedy({1, 2}, 4);
  r.top_logprobs = 99;
  EXPECT_NE(msg(r).find("top_logprobs"), std::string::npos);
}

TEST(Engine, KvBudgetTooSmallGivesBytesAndLargestContext) {
  EngineConfig c = base_config();
  c.n_ctx = 4096;
  // tiny-llama f16 KV: 3 layers × 2 heads × (32 + 32) × 2 bytes = 768 bytes per token.
  c.kv_budget_bytes = 768 * 1000;
  auto e = Engine::create(c);
  ASSERT_FALSE(e.has_value());
  const std::string m = e.status().message();
  EXPECT_NE(m.find("largest context that fits is 992 tokens"), std::string::npos) << m;
  EXPECT_NE(m.find(std::to_string(768 * 4096)), std::string::npos) << m;
  c.kv_budget_bytes = 768 * 4096;
  auto ok = Engine::create(c);
  ASSERT_TRUE(ok.has_value()) << ok.status().message();
  EXPECT_EQ((*ok)->kv_bytes(), 768 * 4096);
  EXPECT_EQ((*ok)->kv_capacity_tokens(), 4096);
}

TEST(Engine, QuantizedKvAndWeightsRun) {
  EngineConfig c = base_config();
  c.model_path = model_path(tools::FileType::kQ4_K_M);
  c.k_type = QType::Q8_0;
  c.v_type = QType::Q4_0;
  c.n_parallel = 2;
  auto e = make(c);
  ASSERT_TRUE(e);
  auto a = e->submit(greedy(prompt_of(30, 1), 8));
  auto b = e->submit(greedy(prompt_of(70, 2), 8));
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->wait().usage.completion_tokens, 8);
  EXPECT_EQ(b->wait().usage.completion_tokens, 8);
}

}  // namespace
}  // namespace sustain::engine
