// The scheduler's admission: requests from the inbox into the waiting
// queue, from there into the running set as KV pages allow (shortest prompt
// first, with an age bound; a prefix-cache hit attached; a random-filled
// prompt written), and out of it again by cancellation or by preemption
// when pages run out. The step loop is scheduler.cc.
#include <algorithm>
#include <chrono>

#include "base/fnv1a.h"
#include "engine/scheduler.h"
#include "kv/random_fill.h"

namespace sustain::engine {
namespace {

using detail::RequestState;

// The seed of a random-filled prompt's K/V (Request::synthetic_prefix): the
// same prompt gets the same values, so runs of one prompt decode alike (an
// oracle's recorded continuation stays valid).
uint64_t prompt_seed(const Seq& s) {
  return fnv1a_ids(std::span<const int32_t>(s.tokens).first(static_cast<size_t>(s.n_prompt)));
}

}  // namespace

void Scheduler::drain_inbox() {
  std::deque<std::shared_ptr<RequestState>> got;
  {
    std::lock_guard<std::mutex> l(inbox_mu);
    got.swap(inbox);
  }
  for (auto& rs : got) {
    auto s = std::make_unique<Seq>();
    s->st = rs;
    s->tokens = rs->req.prompt;
    s->n_prompt = static_cast<int64_t>(s->tokens.size());
    s->max_new = static_cast<int32_t>(
        std::min<int64_t>(rs->req.max_tokens, cfg().n_ctx - s->n_prompt));
    s->sampler.emplace(rs->req.sampling);
    for (int32_t t : s->tokens)
      if (!MediaPrompt::is_image_key(t)) s->sampler->accept(t);
    if (rs->req.media && !hidden_users.empty()) s->media_rows = rs->req.media->position_rows();
    {
      std::lock_guard<std::mutex> l(stats_mu);
      ++shared_stats.requests_submitted;
    }
    waiting.push_back(std::move(s));
  }
}

void Scheduler::drop_cancelled() {
  for (auto it = waiting.begin(); it != waiting.end();) {
    if ((*it)->st->cancelled.load()) {
      queued.fetch_sub(1);
      finish(**it, Finish::kCancelled);
      it = waiting.erase(it);
    } else {
      ++it;
    }
  }
  for (size_t i = 0; i < running.size();) {
    if (running[i]->st->cancelled.load()) {
      finish(*running[i], Finish::kCancelled);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

void Scheduler::admit() {
  while (static_cast<int>(running.size()) < cfg().n_parallel && !waiting.empty()) {
    const size_t pick = admit_pick();
    if (pick != 0)  // to the front, the others keeping their order
      std::rotate(waiting.begin(), waiting.begin() + static_cast<std::ptrdiff_t>(pick),
                  waiting.begin() + static_cast<std::ptrdiff_t>(pick) + 1);
    Seq& s = *waiting.front();
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    const bool synthetic = s.st->req.synthetic_prefix;
    const int64_t matched = prefix && !synthetic ? prefix->attach(s.table, s.tokens, n - 1) : 0;
    const int64_t need = cache->pages_needed(s.table, n - matched);
    const int64_t avail = cache->n_free_pages() + (prefix ? prefix->evictable() : 0);
    // Keep a page of growth for each running sequence, so a sequence just
    // preempted is not readmitted only to be preempted again at once.
    if (need + static_cast<int64_t>(running.size()) > avail && !running.empty()) {
      cache->release(s.table);  // not yet: wait for running sequences to free pages
      break;
    }
    s.n_computed = matched;
    if (synthetic) {
      // Random K/V for the prompt but its last token (Request::synthetic_prefix);
      // generated tokens of a preempted sequence are recomputed as usual.
      // The fill reserves without evicting: the room `avail` counted in
      // cached prefixes is taken first.
      if (prefix && need > cache->n_free_pages()) prefix->evict(static_cast<int32_t>(need));
      const Status f = kv::fill_random(*cache, s.table, s.n_prompt - 1, prompt_seed(s));
      if (!f) {
        cache->release(s.table);
        queued.fetch_sub(1);
        finish(s, Finish::kError, f);
        waiting.pop_front();
        continue;
      }
      s.n_computed = s.n_prompt - 1;
    }
    s.snapshot_at = synthetic ? 0 : next_snapshot(s);
    if (!s.admitted_once) {
      s.admitted_once = true;
      s.t_start = Clock::now();
      s.cached_prompt = matched;
      st.prompt_tokens += static_cast<uint64_t>(s.n_prompt);
      if (matched > 0) ++st.prefix_cache_hits;
    }
    st.prompt_tokens_computed += static_cast<uint64_t>(n - s.n_computed);
    s.admit_order = ++admit_counter;
    running.push_back(std::move(waiting.front()));
    waiting.pop_front();
    // Running first, then the queue: submit() may undercount free slots for
    // a moment, never overcount them.
    n_running.store(static_cast<int>(running.size()));
    queued.fetch_sub(1);
  }
}

size_t Scheduler::admit_pick() const {
  if (cfg().deterministic) return 0;
  // Preempted sequences (at the front) and requests waiting longer than the
  // age bound first, in arrival order; otherwise the shortest prompt.
  const auto now = Clock::now();
  const auto bound = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(cfg().prefill_age_bound_s));
  size_t best = 0;
  for (size_t i = 0; i < waiting.size(); ++i) {
    const Seq& w = *waiting[i];
    if (w.preemptions > 0 || now - w.st->t_submit >= bound) return i;
    if (w.tokens.size() < waiting[best]->tokens.size()) best = i;
  }
  return best;
}

int64_t Scheduler::next_snapshot(const Seq& s) const {
  if (!prefix || !prefix->needs_snapshot() || prefix->snapshot_capacity() == 0) return 0;
  const int64_t pt = cache->geometry().page_tokens;
  const int64_t last = (s.n_prompt - 1) / pt * pt;  // the prompt's last whole page
  if (s.n_computed >= last) return 0;
  const int64_t iv =
      std::max<int64_t>(1, (int64_t{cfg().state_snapshot_interval} + pt - 1) / pt) * pt;
  int64_t next = std::min(last, (s.n_computed / iv + 1) * iv);
  // And the last page boundary before each image: prompts that share text
  // and differ in an image resume there.
  if (const MediaPrompt* m = s.st->req.media.get())
    for (const MediaPrompt::Image& im : m->images)
      if (const int64_t b = im.begin / pt * pt; b > s.n_computed && b < next) next = b;
  return next;
}

void Scheduler::preempt(size_t i) {
  std::unique_ptr<Seq> s = std::move(running[i]);
  running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
  if (prefix && !s->st->req.synthetic_prefix) prefix->insert(s->table, s->tokens, s->n_computed);
  cache->release(s->table);
  forget_drafts(*s);
  s->table = kv::PageTable{};
  // The tokens already emitted stay in s->tokens and are recomputed with
  // the prompt on readmission, never emitted twice.
  s->n_computed = 0;
  s->step_tokens = 0;
  ++s->preemptions;
  ++st.preemptions;
  queued.fetch_add(1);
  waiting.push_front(std::move(s));
}

Status Scheduler::reserve_or_preempt(Seq& s, int64_t n, bool* self_preempted) {
  *self_preempted = false;
  while (true) {
    if (cache->reserve(s.table, n).is_ok()) return Status::ok();
    const int64_t need = cache->pages_needed(s.table, n);
    if (prefix && prefix->evict(static_cast<int32_t>(need)) > 0) continue;
    // Out of pages: preempt the youngest running sequence (possibly `s`).
    size_t youngest = 0;
    for (size_t i = 1; i < running.size(); ++i)
      if (running[i]->admit_order > running[youngest]->admit_order) youngest = i;
    if (running.empty())
      return error(Code::kInternal, "engine: KV pool exhausted with no sequence to preempt");
    const bool is_self = running[youngest].get() == &s;
    preempt(youngest);
    if (is_self) {
      *self_preempted = true;
      return Status::ok();
    }
  }
}

}  // namespace sustain::engine
