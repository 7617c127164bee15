// The scheduler's speculative decoding (issue 15): each step's drafts
// (proposers, cut by the gate to what pays at the measured step price), and
// after the forward the verify rows drawn and applied (accepted tokens
// emitted, rejected positions rolled back). The step loop is scheduler.cc.
#include <algorithm>

#include "engine/scheduler.h"

namespace sustain::engine {
namespace {

// The speculation gate: the acceptance assumed before any draft was verified.
constexpr double kGatePrior = 0.5;

}  // namespace

void Scheduler::forget_drafts(const Seq& s) {
  for (auto& p : proposers) p->forget(s.st->id);
}

int64_t Scheduler::propose(const std::vector<Seq*>& decoding, int64_t budget) {
  const spec::Config& c = cfg().spec;
  // k for each sequence, oldest first, as if every draft came out whole:
  // the most it may draft, then what the gate finds worth verifying.
  std::vector<spec::Job> jobs;
  std::vector<Seq*> job_seq;
  int64_t left = budget;
  for (Seq* s : decoding) {
    left -= 1;
    if (proposers.empty() || !s->st->req.speculative || left <= 0) continue;
    // Not before the prompt's last token is computed: its first token is
    // then always drawn by plain sampling. A draft there (a prompt whose
    // last chunk was one token, a prefix-cache hit, a random fill) verifies
    // it by rejection sampling, which draws other random numbers: the same
    // distribution, but a seeded request's tokens would depend on how its
    // prompt happened to be chunked.
    if (s->n_computed < s->n_prompt) continue;
    const int64_t n_tok = static_cast<int64_t>(s->tokens.size());
    // Never draft past max_tokens or the context (the last emitted token
    // needs no draft after it), nor past the step's token budget.
    const int64_t k = std::min<int64_t>({c.draft_max, left, s->max_new - s->n_generated - 1,
                                         cfg().n_ctx - n_tok - 1});
    if (k < c.draft_min) continue;
    left -= k;
    spec::Job j;
    j.seq = s->st->id;
    j.tokens = s->tokens;
    j.k = static_cast<int>(k);
    j.sampling = &s->st->req.sampling;
    j.out = &s->draft;
    jobs.push_back(j);
    job_seq.push_back(s);
  }
  if (c.gate && !cfg().deterministic && !jobs.empty()) gate(decoding, jobs, job_seq);
  // The first proposer that drafts for a sequence wins; the rest see only
  // the sequences still without a draft.
  std::erase_if(jobs, [](const spec::Job& j) { return j.k < 1; });
  for (auto& p : proposers) {
    if (jobs.empty()) break;
    p->propose_batch(jobs);
    std::erase_if(jobs, [](const spec::Job& j) { return !j.out->tokens.empty(); });
  }
  int64_t used = 0;
  for (Seq* s : decoding) {
    // A draft copied from an image's positions (n-gram lookup) would be
    // image keys, not tokens: it ends before the first one.
    auto& d = s->draft.tokens;
    if (auto it = std::find_if(d.begin(), d.end(), MediaPrompt::is_image_key); it != d.end())
      s->draft.tokens.resize(static_cast<size_t>(it - d.begin()));
    if (static_cast<int64_t>(s->draft.tokens.size()) < c.draft_min) s->draft.clear();
    if (s->learning_draft) st.spec_gate_learning_tokens += s->draft.tokens.size();
    s->learning_draft = false;
    s->step_tokens = 1 + static_cast<int64_t>(s->draft.tokens.size());
    used += s->step_tokens;
  }
  return used;
}

// The gate (spec/gate.h): each job's k cut to what pays at the measured
// price of a decode step. Until decode steps of different sizes have been
// seen, every other step drafts and the rest draft nothing, so the price
// can be learned (each draft as long as the sequence's acceptance
// estimate makes worth reaching: spec::exploration_draft_length); then a
// sequence the gate keeps from drafting is still let through for a probe
// now and then (spec::ProbeSchedule), so that a proposer that starts to
// match is noticed; and while drafting wins only narrowly, a step now and
// then runs without drafts so that the price it is compared with stays
// measured (spec::PriceRecheck).
void Scheduler::gate(const std::vector<Seq*>& decoding, std::vector<spec::Job>& jobs,
                     const std::vector<Seq*>& job_seq) {
  const spec::Config& c = cfg().spec;
  const double prior = acceptance_all.alpha(kGatePrior);
  if (!decode_cost.ready()) {
    const bool draft = gate_explore_steps++ % 2 == 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
      const int len =
          spec::exploration_draft_length(job_seq[i]->acceptance.alpha(prior), jobs[i].k);
      jobs[i].k = draft ? std::min(jobs[i].k, std::max(len, c.draft_min)) : 0;
      job_seq[i]->learning_draft = draft;
    }
    return;
  }
  const spec::StepPrice price{decode_cost.per_step(), decode_cost.per_row(),
                              decode_cost.per_attended()};
  std::vector<spec::GateSeq> g;
  for (size_t i = 0; i < jobs.size(); ++i)
    g.push_back({job_seq[i]->n_computed, job_seq[i]->acceptance.alpha(prior), jobs[i].k});
  // Decoding sequences without a job still run their decode row.
  int64_t other_rows = 0;
  double other_attended = 0;
  for (Seq* s : decoding)
    if (std::find(job_seq.begin(), job_seq.end(), s) == job_seq.end()) {
      ++other_rows;
      other_attended += static_cast<double>(s->n_computed + 1);
    }
  std::vector<int> k(jobs.size());
  double undrafted = 0;
  const double drafted =
      spec::choose_draft_lengths(g, price, other_rows, other_attended, k, &verify_cost, &undrafted);
  if (std::any_of(k.begin(), k.end(), [](int v) { return v > 0; }) &&
      gate_recheck.due(drafted, undrafted)) {
    // The step without drafts is measured again (spec::PriceRecheck); the
    // sequences' probe schedules are left as they were.
    for (spec::Job& j : jobs) j.k = 0;
    gate_recheck.ran_undrafted();
    ++st.spec_gate_rechecks;
    return;
  }
  bool none = true;
  for (size_t i = 0; i < jobs.size(); ++i) {
    Seq& s = *job_seq[i];
    if (k[i] > 0) {
      s.probe.drafted();
    } else if (s.probe.idle_step()) {
      k[i] = std::min(jobs[i].k, std::max(1, c.draft_min));
      ++st.spec_gate_probes;
    } else {
      ++st.spec_gate_skipped;
    }
    if (k[i] > 0 && k[i] < c.draft_min) k[i] = std::min(jobs[i].k, c.draft_min);
    jobs[i].k = k[i];
    none &= k[i] == 0;
  }
  if (none) gate_recheck.ran_undrafted();
}

// The forward ran over [last, d_1..d_k] with logits rows 0..k. Row r is
// sampled exactly as a non-speculative step would; while the sample equals
// d_{r+1} the draft's K/V stays valid and the next row is sampled too; the
// first disagreement (or the bonus row k) ends the step. Drawing (here)
// touches only the sequence's sampler, so sequences draw at once; what was
// drawn is applied after (apply_verify). Rejected positions leave the page
// table; a hybrid's state goes back to before the step and re-absorbs only
// the accepted tokens.
void Scheduler::draw_verify(PendingVerify& v, LogprobScratch& sc) {
  const Seq& s = *v.s;
  const int64_t n_vocab = engine.model_->config().n_vocab;
  const int64_t k = static_cast<int64_t>(s.draft.tokens.size());
  const Request& req = s.st->req;
  v.evs.clear();
  for (int64_t r = 0; r <= k; ++r) {
    const bool drafted = r < k;
    const auto ri = static_cast<size_t>(r);
    const float* row = v.rows + r * n_vocab;
    const int32_t id = drafted && !s.draft.q.empty()
                           ? sample(*v.s, row, s.draft.tokens[ri], s.draft.q[ri])
                           : sample(*v.s, row);
    v.evs.push_back(describe(s, row, id, sc));
    if (!drafted || id != s.draft.tokens[ri]) break;
    // What ends the request in emit() ends the draw: an end of generation,
    // or the length limit once this token is out.
    const auto out = static_cast<int64_t>(v.evs.size());
    if (!req.ignore_eos && engine.tok_->is_eog(id)) break;
    if (s.n_generated + out >= s.max_new ||
        static_cast<int64_t>(s.tokens.size()) + out >= cfg().n_ctx)
      break;
  }
}

void Scheduler::apply_verify(PendingVerify& v) {
  Seq& s = *v.s;
  const int64_t base = s.n_computed, k = static_cast<int64_t>(s.draft.tokens.size());
  s.n_computed = base + 1;  // the last token's K/V is in
  int64_t accepted = 0;
  // The request's counts before any emission: a token that ends the
  // request finishes it inside emit(), and its usage must hold this step.
  ++s.spec_steps;
  s.spec_drafted += k;
  for (size_t r = 0; r < v.evs.size(); ++r) {
    const bool drafted = static_cast<int64_t>(r) < k;
    if (drafted && r < st.spec_drafted_at.size()) ++st.spec_drafted_at[r];
    const bool hit = drafted && v.evs[r].id == s.draft.tokens[r];
    if (hit) {
      if (r < st.spec_accepted_at.size()) ++st.spec_accepted_at[r];
      ++accepted;
      ++s.spec_accepted;
    }
    emit(s, std::move(v.evs[r]));
    if (s.done || !hit) break;
    ++s.n_computed;
  }
  const int32_t backup = v.backup;
  const RecurrentRecord* rec = v.rec;
  // Positions reached: up to and including the first rejection (none past
  // a finish).
  const int64_t reached = std::min<int64_t>(k, accepted + (s.done ? 0 : 1));
  s.acceptance.update(reached, accepted);
  acceptance_all.update(reached, accepted);
  s.probe.verified(accepted > 0);
  ++st.spec_steps;
  st.spec_draft_tokens += static_cast<uint64_t>(k);
  st.spec_accepted_tokens += static_cast<uint64_t>(accepted);
  s.draft.clear();
  if (!s.done) {
    cache->truncate(s.table, s.n_computed);
    if (backup >= 0 && accepted < k && s.table.state >= 0 && rec != nullptr) {
      // The state from before the step, advanced over the accepted
      // positions from the inputs the verify forward recorded.
      cache->states().copy(backup, s.table.state);
      Status r = engine.model_->replay_recurrent(*rec, s.n_computed - base, *cache, ws, *pool);
      if (!r.is_ok()) finish(s, Finish::kError, r);
    } else if (backup >= 0 && accepted < k && s.table.state >= 0) {
      cache->states().copy(backup, s.table.state);
      Batch b;
      b.seqs = {&s.table};
      for (int64_t p = base; p < s.n_computed; ++p)
        b.tokens.push_back({s.tokens[static_cast<size_t>(p)], 0, p, false});
      // Over ranks the followers re-absorb them too (the state copy above
      // goes with this step).
      Status r = forward(b, nullptr, nullptr);
      if (!r.is_ok()) finish(s, Finish::kError, r);
    }
  }
  if (backup >= 0) cache->states().free(backup);
}

}  // namespace sustain::engine
