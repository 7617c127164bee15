// `sustain serve -m M`: the OpenAI-compatible HTTP server (docs/server.md).
// The socket is bound first, so /health answers 503 while the model loads;
// SIGINT / SIGTERM drain it (--shutdown-timeout), then stop the server and
// the engine.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/file_io.h"
#include "cli/model_session.h"
#include "cli/ranks.h"
#include "cli/serving_flags.h"
#include "cli/spec_flags.h"

#include "engine/api.h"
#include "server/server.h"

namespace sustain::cli {
namespace {

struct ServeArgs {
  ModelArgs m;
  std::string host = "127.0.0.1";
  int port = 8080;
  int n_parallel = 4;
  std::string api_key;
  int max_queue = 64;
  int timeout_s = 600;
  std::string chat_template_file;
  std::string mmproj, image_dir;
  std::string alias;
  int64_t kv_tokens = 0;
  int page_tokens = 32;
  std::string kv_layout = "tiled";
  bool no_prefix_cache = false;
  bool swa_full = false;
  int32_t state_snapshots = -1;
  SpecArgs spec;
  ServingArgs serving;
  SplitArgs split;
  int32_t state_snapshot_interval = 1024;
  bool deterministic = false;
  int max_n = 8;
  double shutdown_timeout_s = 10.0;
  double header_timeout_s = 10.0, body_timeout_s = 60.0, write_timeout_s = 30.0;
  double min_write_rate = 1024;  // bytes/s
  int http_threads = 0;  // 0: parallel + max-queue + 8
};

std::chrono::milliseconds millis(double s) {
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000.0 + 0.5));
}

std::string file_stem(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t dot = name.rfind(".gguf");
  return dot == std::string::npos ? name : name.substr(0, dot);
}

// SIGINT and SIGTERM, which the server takes in a thread of its own.
sigset_t serve_signals() {
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  return sigs;
}

// Rank 0 of a job over ranks (or the only process): the server. `ranks` is
// null for one process.
int serve_main(const ServeArgs& a, const engine::EngineRanks* ranks) {
  engine::EngineConfig ec;
  ec.ranks = ranks;
  ec.model_path = a.m.model;
  ec.n_threads = a.m.threads;
  ec.n_ctx = a.m.ctx;
  ec.n_parallel = a.n_parallel;
  ec.kv_tokens = a.kv_tokens;
  auto budget = kv_budget_bytes(a.m);
  if (!budget) return fail(budget.status().message());
  ec.kv_budget_bytes = *budget;
  ec.page_tokens = a.page_tokens;
  ec.kv_tiled = kv_tiled(a.kv_layout);
  ec.batch_tokens = a.m.batch;
  ec.ubatch_tokens = a.m.ubatch;
  ec.prefix_cache = !a.no_prefix_cache;
  ec.swa_full = a.swa_full;
  ec.state_snapshots = a.state_snapshots;
  auto spec = spec_config(a.spec);
  if (!spec) return fail("serve: " + spec.status().message());
  ec.spec = std::move(*spec);
  ec.state_snapshot_interval = a.state_snapshot_interval;
  ec.max_queue = a.max_queue;
  ec.deterministic = a.deterministic;
  ec.repack = a.m.repack;
  if (Status st = apply_serving_flags(a.serving, ec); !st) return fail("serve: " + st.message());
  auto kt = kv_type(a.m.cache_type_k, "--cache-type-k");
  if (!kt) return fail(kt.status().message());
  auto vt = kv_type(a.m.cache_type_v, "--cache-type-v");
  if (!vt) return fail(vt.status().message());
  ec.k_type = *kt;
  ec.v_type = *vt;

  server::ServerConfig sc;
  sc.host = a.host;
  sc.port = a.port;
  sc.api_key = a.api_key;
  sc.timeout_s = a.timeout_s;
  sc.model_name = a.alias.empty() ? file_stem(a.m.model) : a.alias;
  sc.limits.max_n = a.max_n;
  // Every request that can be running or queued holds a handler thread while
  // it waits, plus room for /health, /metrics and immediate 429s.
  sc.http_threads =
      a.http_threads > 0 ? a.http_threads : std::min(a.n_parallel + a.max_queue + 8, 1024);
  sc.header_timeout = millis(a.header_timeout_s);
  sc.body_timeout = millis(a.body_timeout_s);
  sc.write_timeout = millis(a.write_timeout_s);
  sc.min_write_rate = static_cast<size_t>(a.min_write_rate);
  if (!a.mmproj.empty()) {
    auto in = engine::ImageInput::open(
        a.mmproj, a.m.threads > 0 ? a.m.threads : ThreadPool::hardware_threads());
    if (!in) return fail("serve: --mmproj " + a.mmproj + ": " + in.status().message());
    sc.images = std::move(*in);
  }
  if (!a.image_dir.empty()) {
    if (a.mmproj.empty()) return fail("serve: --image-dir needs --mmproj");
    std::error_code ec_dir;
    if (!std::filesystem::is_directory(a.image_dir, ec_dir))
      return fail("serve: --image-dir '" + a.image_dir + "' is not a directory");
    sc.image_dir = a.image_dir;
  }
  if (!a.chat_template_file.empty()) {
    auto t = read_text_file(a.chat_template_file, "--chat-template-file");
    if (!t) return fail(t.status().message());
    sc.chat_template = std::move(*t);
    sc.chat_template_origin = a.chat_template_file;
  }

  // Signals go to one thread that stops the server; every other thread
  // inherits the blocked mask (run_serve blocked them before any thread,
  // MPI's included, was created).
  sigset_t sigs = serve_signals();

  server::Server srv(sc);
  auto port = srv.bind();
  if (!port) return fail("serve: " + port.status().message());
  std::printf("sustain serve: listening on http://%s:%d (loading %s)\n", a.host.c_str(), *port,
              a.m.model.c_str());
  std::fflush(stdout);

  std::thread http([&srv] {
    Status st = srv.run();
    if (!st) std::fprintf(stderr, "sustain: error: serve: %s\n", st.message().c_str());
  });
  // SIGTERM / SIGINT: stop taking requests, let running ones finish for up
  // to --shutdown-timeout, cut the rest off with an error, then stop.
  std::atomic<int> cut_off{-1};
  std::atomic<bool> stopped{false};  // the signal thread is done with srv
  const auto grace = std::chrono::milliseconds(static_cast<int64_t>(a.shutdown_timeout_s * 1000));
  const bool split = ranks != nullptr;
  std::thread signals([&srv, &cut_off, &stopped, sigs, grace, split] {
    int sig = 0;
    sigwait(&sigs, &sig);
    if (split && (sig == SIGINT || sig == SIGTERM)) {
      // Over ranks a signal means the job is ending: mpirun sends it when a
      // rank exits (or it was interrupted itself) and follows with SIGKILL
      // within a second, and the step loop may be waiting on a rank that is
      // gone. Running requests get their 503 now, then the process ends.
      std::fprintf(stderr,
                   "sustain serve: %s: the job over ranks is ending (a rank exited or mpirun was "
                   "stopped); ending the running requests with an error\n",
                   sig == SIGINT ? "SIGINT" : "SIGTERM");
      srv.drain(std::chrono::milliseconds(0),
                "the model's ranks stopped before this request finished (a rank of the --split "
                "job exited, or the job was stopped); it was cancelled");
      std::fflush(nullptr);
      std::_Exit(1);
    }
    if (sig == SIGINT || sig == SIGTERM) {
      std::fprintf(stderr, "sustain serve: %s: draining (up to %.1f s)\n",
                   sig == SIGINT ? "SIGINT" : "SIGTERM", grace.count() / 1000.0);
      cut_off = srv.drain(grace);
      srv.stop();
      stopped = true;
    }
  });
  signals.detach();

  auto eng = engine::Engine::create(ec);
  if (!eng) {
    srv.stop();
    http.join();
    return fail("serve: " + eng.status().message());
  }
  if (sc.images && sc.images->out_dim() != (*eng)->model().config().n_embd) {
    srv.stop();
    http.join();
    return fail(fmt::format("serve: --mmproj {}: the projector makes embeddings of width {}, but "
                            "the model's width is {}",
                            a.mmproj, sc.images->out_dim(), (*eng)->model().config().n_embd));
  }
  if (sc.chat_template.empty()) {
    auto t = (*eng)->model().file().get_string("tokenizer.chat_template");
    if (t) srv.set_chat_template(std::move(*t), "tokenizer.chat_template of " + a.m.model);
  }
  if (Status st = srv.attach(eng->get()); !st) {
    srv.stop();
    http.join();
    return fail("serve: " + st.message());
  }
  std::printf("sustain serve: ready (%s, ctx %lld, %d parallel, KV %lld tokens)\n",
              sc.model_name.c_str(), static_cast<long long>(ec.n_ctx), ec.n_parallel,
              static_cast<long long>((*eng)->kv_capacity_tokens()));
  std::fflush(stdout);
  note_repack((*eng)->model(), a.m.repack_asked);
  http.join();
  if (const int n = cut_off.load(); n >= 0) {
    // srv lives on this stack: let the signal thread's stop() return first.
    for (int i = 0; i < 500 && !stopped.load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::fprintf(stderr, "sustain serve: stopped; %d request(s) cut off at the deadline\n", n);
  }
  return 0;
}

int run_serve(const ServeArgs& a) {
  // The server's signals are blocked before anything starts a thread: MPI
  // starts its own, and a signal the kernel hands to one of those would end
  // the process before the server could answer its requests. Followers
  // (ranks > 0) keep the default: mpirun's SIGTERM ends them.
  if (dist::launch_from_env().rank == 0) {
    const sigset_t sigs = serve_signals();
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  }
  return run_engine_command(a.split, a.m.model,
                            [&a](const engine::EngineRanks* r) { return serve_main(a, r); });
}

}  // namespace

Runner add_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  auto* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server (docs/server.md)");
  add_model_flags(sub, a->m, false, true);
  sub->add_option("--host", a->host, "address to listen on")->capture_default_str();
  sub->add_option("--port", a->port, "TCP port (0: any free port, printed when listening)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  sub->add_option("--parallel", a->n_parallel, "sequences decoding at once (alias -np)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  sub->add_option("--api-key", a->api_key,
                  "require 'Authorization: Bearer KEY' on every route but /health");
  sub->add_option("--max-queue", a->max_queue,
                  "requests waiting beyond the running ones; more get 429")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  sub->add_option("--timeout", a->timeout_s,
                  "seconds any one socket read or write may wait, at most (the three below are "
                  "finer)")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  sub->add_option("--header-timeout", a->header_timeout_s,
                  "seconds a request's line and headers may take to arrive from its first byte "
                  "(from the accept for a connection's first request); then 408 and close")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 3600.0));
  sub->add_option("--body-timeout", a->body_timeout_s,
                  "seconds a request's body may take to arrive after its headers; then 408")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 86400.0));
  sub->add_option("--write-timeout", a->write_timeout_s,
                  "seconds a response write may make no progress (the client stopped reading) "
                  "before the response ends and its request is cancelled")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 3600.0));
  sub->add_option("--min-write-rate", a->min_write_rate,
                  "bytes per second a client must take while the response waits on it: over "
                  "each --write-timeout spent waiting, a client that took less is cut off like "
                  "one that stopped reading (0 = no minimum)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e9));
  sub->add_option("--http-threads", a->http_threads,
                  "handler threads, one per open connection; connections past them get 503 "
                  "with Retry-After at once (0: parallel + max-queue + 8, at most 1024)")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  sub->add_option("--mmproj", a->mmproj,
                  "vision projector GGUF (llama.cpp's mmproj): chat messages may then hold "
                  "image_url parts (data: URIs)");
  sub->add_option("--image-dir", a->image_dir,
                  "the one directory whose files image_url parts may name as file:// URLs "
                  "(default: file:// refused)");
  sub->add_option("--chat-template-file", a->chat_template_file,
                  "Jinja chat template to use instead of the GGUF's tokenizer.chat_template");
  sub->add_option("--alias", a->alias, "model name reported by /v1/models (default: file name)");
  sub->add_option("--kv-tokens", a->kv_tokens,
                  "KV pool size in tokens over all sequences (0: ctx x parallel)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 32));
  sub->add_option("--page-tokens", a->page_tokens, "tokens per KV page")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  add_kv_layout_flag(sub, a->kv_layout, "--kv-layout");
  sub->add_flag("--no-prefix-cache", a->no_prefix_cache, "do not share prompt prefixes");
  sub->add_flag("--swa-full", a->swa_full,
                "sliding-window models (Gemma 3): keep the window layers' K/V for the whole "
                "context, as the global layers' (by default they keep only their windows)");
  add_spec_flags(sub, a->spec);
  add_serving_flags(sub, a->serving);
  add_split_flags(sub, a->split);
  sub->add_option("--state-snapshots", a->state_snapshots,
                  "hybrid models (qwen35): recurrent-state snapshots kept for prefix reuse "
                  "(least recently used replaced); -1 = 4 x --parallel, 0 = none")
      ->check(CLI::Range(-1, 4096));
  sub->add_option("--state-snapshot-interval", a->state_snapshot_interval,
                  "hybrid models: tokens between state snapshots during prefill (also one at "
                  "the prompt's last page boundary)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  sub->add_flag("--deterministic", a->deterministic,
                "batch-independent results: at temperature 0 a request's text does not depend "
                "on what else runs");
  sub->add_option("--shutdown-timeout", a->shutdown_timeout_s,
                  "on SIGTERM/SIGINT, seconds running requests may take to finish before they "
                  "are cut off with an error (new ones get 503 at once)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  sub->add_option("--max-n", a->max_n, "most choices (n) per request")
      ->capture_default_str()
      ->check(CLI::Range(1, 128));
  return [a] { return run_serve(*a); };
}

}  // namespace sustain::cli
