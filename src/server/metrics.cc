#include "server/metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <tuple>

#include <fmt/format.h>

namespace sustain::server {
namespace {

// Prometheus floats: shortest round-trip text, +Inf spelled as Prometheus does.
std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  return fmt::format("{}", v);
}

void metric(std::string& out, const std::string& name, const char* type, const std::string& help,
            double value) {
  out +=
      fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, num(value));
}

// This process's memory from /proc/self/statm (pages): {virtual, resident}
// in bytes, {-1, -1} where it cannot be read.
std::pair<double, double> process_memory_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return {-1, -1};
  unsigned long long size = 0, resident = 0;
  const int got = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (got != 2) return {-1, -1};
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  return {static_cast<double>(size) * page, static_cast<double>(resident) * page};
}

// Open file descriptors (sockets included), -1 where /proc is not there.
double process_open_fds() {
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  double n = 0;
  while (const dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  return n - 1;  // the directory stream's own descriptor
}

}  // namespace

ServerCountersSnapshot snapshot(const ServerCounters& c) {
  ServerCountersSnapshot s;
  s.http_requests = c.http_requests.load();
  s.queue_rejections = c.queue_rejections.load();
  s.client_errors = c.client_errors.load();
  s.disconnects = c.disconnects.load();
  s.completions_ok = c.completions_ok.load();
  s.read_timeouts = c.read_timeouts.load();
  s.write_timeouts = c.write_timeouts.load();
  s.write_too_slow = c.write_too_slow.load();
  s.busy_rejections = c.busy_rejections.load();
  return s;
}

std::string render_histogram(const std::string& name, const std::string& help,
                             const engine::Histogram& h) {
  std::string out = fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    if (i < h.counts.size()) cumulative += h.counts[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, num(h.bounds[i]), cumulative);
  }
  // The last count is the +Inf bucket; the total is authoritative for it.
  uint64_t total = 0;
  for (uint64_t c : h.counts) total += c;
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, total);
  out += fmt::format("{}_sum {}\n{}_count {}\n", name, num(h.sum), name, h.count);
  return out;
}

std::string render_metrics(const engine::EngineStats* s, const ServerCountersSnapshot& c) {
  std::string out;
  metric(out, "sustain_model_loaded", "gauge", "1 once the model is loaded and serving",
         s != nullptr ? 1 : 0);
  // The names of Prometheus's own process collector, so that dashboards and
  // `sustain bench soak --url` find them.
  const auto [virt, rss] = process_memory_bytes();
  if (rss >= 0) {
    metric(out, "process_resident_memory_bytes", "gauge", "resident memory of this process",
           rss);
    metric(out, "process_virtual_memory_bytes", "gauge", "virtual memory of this process", virt);
  }
  if (const double fds = process_open_fds(); fds >= 0)
    metric(out, "process_open_fds", "gauge", "open file descriptors, sockets included", fds);
  metric(out, "sustain_http_requests_total", "counter", "HTTP requests received",
         static_cast<double>(c.http_requests));
  metric(out, "sustain_queue_rejections_total", "counter",
         "requests rejected with 429 because the queue was full",
         static_cast<double>(c.queue_rejections));
  metric(out, "sustain_client_errors_total", "counter",
         "requests answered with a 4xx other than 429", static_cast<double>(c.client_errors));
  metric(out, "sustain_client_disconnects_total", "counter",
         "requests whose client went away before the end (cancelled)",
         static_cast<double>(c.disconnects));
  metric(out, "sustain_read_timeouts_total", "counter",
         "requests whose headers or body did not arrive in time (408 or closed)",
         static_cast<double>(c.read_timeouts));
  metric(out, "sustain_write_timeouts_total", "counter",
         "responses cut off because the client stopped reading (--write-timeout) or read "
         "too slowly (--min-write-rate)",
         static_cast<double>(c.write_timeouts));
  metric(out, "sustain_write_too_slow_total", "counter",
         "of those, responses cut off because the client read below --min-write-rate",
         static_cast<double>(c.write_too_slow));
  metric(out, "sustain_busy_rejections_total", "counter",
         "completions answered 503 because every handler thread was busy",
         static_cast<double>(c.busy_rejections));
  if (s == nullptr) return out;
  metric(out, "sustain_requests_running", "gauge", "sequences being prefilled or decoded",
         s->running);
  metric(out, "sustain_requests_waiting", "gauge", "requests queued for admission", s->waiting);
  metric(out, "sustain_kv_pages_total", "gauge", "pages in the KV pool", s->kv_pages_total);
  metric(out, "sustain_kv_pages_used", "gauge",
         "KV pages held by running sequences (cached pages not included)", s->kv_pages_used);
  metric(out, "sustain_kv_pages_cached", "gauge",
         "KV pages held only by the prefix cache (evictable)", s->kv_pages_cached);
  metric(out, "sustain_kv_page_tokens", "gauge", "tokens per KV page", s->page_tokens);
  if (s->split_ranks > 0) {
    metric(out, "sustain_split_ranks", "gauge",
           s->split_tensor ? "ranks of the model (--split tensor)"
                           : "ranks of the model (--split layer)",
           s->split_ranks);
    metric(out, "sustain_split_comm_bytes_total", "counter",
           "payload bytes rank 0 sent to or received from the other ranks",
           static_cast<double>(s->comm_bytes));
    metric(out, "sustain_split_comm_seconds_total", "counter",
           "seconds rank 0 spent inside transport calls, waiting for the other ranks included",
           s->comm_seconds);
    metric(out, "sustain_split_comm_calls_total", "counter", "rank 0's transport calls",
           static_cast<double>(s->comm_calls));
  }
  if (s->kv_window_pages_total > 0) {
    metric(out, "sustain_kv_window_pages_total", "gauge",
           "pages in the sliding-window layers' own pool", s->kv_window_pages_total);
    metric(out, "sustain_kv_window_pages_used", "gauge",
           "sliding-window pages held by running sequences and prefix snapshots",
           s->kv_window_pages_used);
  }
  metric(out, "sustain_requests_submitted_total", "counter", "requests accepted by the engine",
         static_cast<double>(s->requests_submitted));
  metric(out, "sustain_requests_finished_total", "counter", "requests that ended",
         static_cast<double>(s->requests_finished));
  metric(out, "sustain_requests_rejected_total", "counter", "requests the engine refused",
         static_cast<double>(s->requests_rejected));
  metric(out, "sustain_requests_cancelled_total", "counter", "requests cancelled before the end",
         static_cast<double>(s->requests_cancelled));
  metric(out, "sustain_prompt_tokens_total", "counter", "prompt tokens admitted",
         static_cast<double>(s->prompt_tokens));
  metric(out, "sustain_prompt_tokens_computed_total", "counter",
         "prompt tokens computed (the rest came from the prefix cache)",
         static_cast<double>(s->prompt_tokens_computed));
  metric(out, "sustain_generated_tokens_total", "counter", "tokens sent to clients",
         static_cast<double>(s->generated_tokens));
  metric(out, "sustain_pool_sampled_tokens_total", "counter",
         "tokens sampled over the thread pool, several streams at once",
         static_cast<double>(s->pool_sampled_tokens));
  metric(out, "sustain_prefix_cache_hits_total", "counter",
         "requests that reused at least one cached prompt page",
         static_cast<double>(s->prefix_cache_hits));
  metric(out, "sustain_spec_draft_tokens_total", "counter",
         "speculative decoding: drafted tokens verified", static_cast<double>(s->spec_draft_tokens));
  metric(out, "sustain_spec_accepted_tokens_total", "counter",
         "speculative decoding: drafted tokens accepted",
         static_cast<double>(s->spec_accepted_tokens));
  metric(out, "sustain_spec_steps_total", "counter",
         "speculative decoding: verify steps", static_cast<double>(s->spec_steps));
  metric(out, "sustain_spec_gate_skipped_total", "counter",
         "speculative decoding: sequence-steps the gate kept from drafting (it would not pay)",
         static_cast<double>(s->spec_gate_skipped));
  metric(out, "sustain_spec_gate_probes_total", "counter",
         "speculative decoding: one-token drafts the gate let through to re-test acceptance",
         static_cast<double>(s->spec_gate_probes));
  metric(out, "sustain_spec_gate_rechecks_total", "counter",
         "speculative decoding: steps the gate ran without its drafts to re-measure an "
         "undrafted step's cost",
         static_cast<double>(s->spec_gate_rechecks));
  metric(out, "sustain_spec_gate_learning_tokens_total", "counter",
         "speculative decoding: tokens drafted on the steps that teach the gate its price",
         static_cast<double>(s->spec_gate_learning_tokens));
  // Acceptance by draft position: drafts that reached position r, and of
  // those, accepted (a labelled family; positions no draft reached omitted).
  for (const auto& [name, help, v] :
       {std::tuple{"sustain_spec_position_drafted_total",
                   "speculative decoding: drafted tokens at each draft position (0 = first)",
                   &s->spec_drafted_at},
        std::tuple{"sustain_spec_position_accepted_total",
                   "speculative decoding: accepted tokens at each draft position (0 = first)",
                   &s->spec_accepted_at}}) {
    out += fmt::format("# HELP {} {}\n# TYPE {} counter\n", name, help, name);
    for (size_t r = 0; r < v->size() && s->spec_drafted_at[r] > 0; ++r)
      out += fmt::format("{}{{position=\"{}\"}} {}\n", name, r, (*v)[r]);
  }
  metric(out, "sustain_spec_draft_kv_pages_used", "gauge",
         "speculative decoding: pages the draft model's own KV holds",
         s->draft_kv_pages_used);
  metric(out, "sustain_spec_draft_kv_pages_cached", "gauge",
         "speculative decoding: MTP block pages held only by its prefix cache (evictable)",
         s->draft_kv_pages_cached);
  metric(out, "sustain_spec_draft_prefix_tokens_reused_total", "counter",
         "speculative decoding: MTP block entries taken from its prefix cache",
         static_cast<double>(s->draft_prefix_tokens_reused));
  metric(out, "sustain_preemptions_total", "counter",
         "times a running sequence was preempted for KV pages and recomputed later",
         static_cast<double>(s->preemptions));
  metric(out, "sustain_engine_steps_total", "counter", "engine steps run",
         static_cast<double>(s->steps));
  metric(out, "sustain_tpot_target_seconds", "gauge",
         "the TPOT target of the last step that ran under one (--tpot-target)", s->target_s);
  metric(out, "sustain_tpot_target_steps_total", "counter",
         "steps that ran beside decoding streams under a TPOT target",
         static_cast<double>(s->target_steps));
  out += "# HELP sustain_tpot_target_missed_total steps that took longer than their TPOT target, "
         "by why\n# TYPE sustain_tpot_target_missed_total counter\n";
  for (const auto& [why, n] : {std::pair{"decode_alone", s->target_missed_decode_alone},
                               std::pair{"min_chunk", s->target_missed_min_chunk},
                               std::pair{"estimate", s->target_missed_estimate}})
    out += fmt::format("sustain_tpot_target_missed_total{{reason=\"{}\"}} {}\n", why, n);
  metric(out, "sustain_prefill_tokens_deferred_total", "counter",
         "prompt tokens a step left for later to keep the TPOT target",
         static_cast<double>(s->prefill_tokens_deferred));
  metric(out, "sustain_step_cost_seconds", "gauge",
         "the step cost model: seconds every step pays once", s->cost_per_step_s);
  metric(out, "sustain_step_cost_per_token_seconds", "gauge",
         "the step cost model: seconds per token in a step", s->cost_per_row_s);
  metric(out, "sustain_step_cost_per_attended_seconds", "gauge",
         "the step cost model: seconds per (query, key) pair attention reads",
         s->cost_per_attended_s);
  out += render_histogram("sustain_step_seconds",
                          "wall time of each engine step that carried decoding streams", s->step);
  out += render_histogram("sustain_time_to_first_token_seconds",
                          "time from submit to the first generated token", s->ttft);
  out += render_histogram("sustain_time_per_output_token_seconds",
                          "(E2E - TTFT) / (tokens - 1) per request", s->tpot);
  out += render_histogram("sustain_e2e_request_latency_seconds", "time from submit to the end",
                          s->e2e);
  return out;
}

}  // namespace sustain::server
