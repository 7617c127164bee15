#include "model/transformer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <span>
#include <utility>

namespace sustain {

attention::AttnParams attn_params(const ArchConfig& c) {
  attention::AttnParams p;
  p.n_head = static_cast<int>(c.n_head);
  p.n_head_kv = static_cast<int>(c.n_head_kv);
  p.head_dim_k = static_cast<int>(c.head_dim_k);
  p.head_dim_v = static_cast<int>(c.head_dim_v);
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim_k));
  // Gemma 3 27B (62 blocks) scales queries by its query_pre_attn_scalar,
  // n_embd / n_head, which llama.cpp keys on the block count.
  if (c.arch == Arch::kGemma3 && c.n_layer == 62)
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_head));
  // Sizes the scratch for the sliding layers; attention_block sets each
  // layer's own window.
  p.window = static_cast<int>(c.sliding_window);
  return p;
}

kernels::RopeParams rope_params(const ArchConfig& c, const ModelWeights& w, bool neox) {
  kernels::RopeParams r;
  r.head_dim = static_cast<int>(c.head_dim_k);
  r.rope_dim = static_cast<int>(c.rope_dim);
  r.freq_base = c.rope_freq_base;
  const bool scaled = c.rope_scaling == RopeScaling::kLinear || c.rope_scaling == RopeScaling::kYarn;
  r.freq_scale = scaled && c.rope_scale_factor > 0.0f ? 1.0f / c.rope_scale_factor : 1.0f;
  // YaRN as llama.cpp applies it: full ramp (ext_factor 1) between the
  // default beta_fast / beta_slow, over the original training context.
  if (c.rope_scaling == RopeScaling::kYarn) r.ext_factor = 1.0f;
  r.freq_factors = w.rope_freqs.empty() ? nullptr : w.rope_freqs.data();
  r.neox = neox;
  r.n_ctx_orig = static_cast<int>(c.rope_orig_ctx);
  return r;
}

void embed(const Model& m, TokenSpan s, Workspace& ws) {
  const int64_t d = m.config().n_embd;
  for (int64_t i = 0; i < s.size(); ++i) {
    if (s[i].embd != nullptr)
      std::copy_n(s[i].embd, d, ws.x.data() + i * d);
    else
      kernels::get_row(m.weights().token_embd, s[i].id, ws.x.data() + i * d);
  }
}

void reduce_partial(Workspace& ws, float* y, int64_t n) {
  if (!ws.stage || !ws.stage->all_reduce || !ws.comm_status) return;
  ws.comm_status = ws.stage->all_reduce(y, n);
}

int stage_begin(const Workspace& ws) {
  return ws.stage ? ws.stage->layer_begin : 0;
}

int stage_end(const Model& m, const Workspace& ws) {
  return ws.stage ? ws.stage->layer_end : static_cast<int>(m.config().n_main_layer());
}

Status stage_input(const Model& m, TokenSpan s, Workspace& ws, float embd_scale) {
  const int64_t d = m.config().n_embd;
  if (stage_begin(ws) > 0) return ws.stage->recv(ws.x.data(), s.size() * d);
  embed(m, s, ws);
  if (embd_scale != 1.0f)
    for (int64_t i = 0; i < s.size(); ++i)
      if (s[i].embd == nullptr)
        for (int64_t j = 0; j < d; ++j) ws.x[i * d + j] *= embd_scale;
  return Status::ok();
}

Status stage_output(const Model& m, TokenSpan s, Workspace& ws, ThreadPool& pool, float* logits) {
  SUSTAIN_TRY(ws.comm_status);
  if (ws.stage && !ws.stage->head) return Status::ok();
  if (stage_end(m, ws) < static_cast<int>(m.config().n_main_layer()))
    return ws.stage->send(ws.x.data(), s.size() * m.config().n_embd);
  if (ws.stage && ws.stage->gather_vocab && m.shard() &&
      m.shard()->n_vocab() < int64_t{m.config().n_vocab}) {
    // Tensor split, head split: this rank's vocabulary rows, then every rank's.
    int64_t rows = 0;
    for (int64_t i = 0; i < s.size(); ++i) rows += s[i].logits;
    if (!logits || rows == 0) return Status::ok();
    output_head(m, s, ws, pool, ws.logits_part.data());
    return ws.stage->gather_vocab(ws.logits_part.data(), logits, rows);
  }
  output_head(m, s, ws, pool, logits);
  return Status::ok();
}

namespace {

void norm_rows(const float* x, const std::vector<float>& w, float* y, int64_t rows, int64_t n,
               float eps) {
  for (int64_t r = 0; r < rows; ++r) kernels::rms_norm(x + r * n, w.data(), y + r * n, n, eps);
}

void matmul(const kernels::WeightView& w, const float* x, int64_t rows, float* y, Workspace& ws,
            ThreadPool& pool) {
  kernels::matmul(w, x, w.n_in, rows, y, w.n_out, pool, ws.matmul_scratch.data());
}

// Products of one input (q, k, v; gate, up) as one kernels::matmul_batch:
// the input is quantized once where the formats agree, and the rows of all
// of them are split over the threads together — two pool regions where one
// matmul each took two apiece, and one idle tail instead of three. Results
// are matmul's bit for bit.
// With a prologue, x's rows are made by it inside the batch's quantization
// region (kernels::RowPrologue): the norm or SwiGLU before a product, which
// in a decode step of several sequences ran on the caller while the other
// threads waited.
void matmul_same_input(std::initializer_list<std::pair<const kernels::WeightView*, float*>> ps,
                       const float* x, int64_t rows, Workspace& ws, ThreadPool& pool,
                       kernels::RowPrologue prologue = {}) {
  std::array<kernels::MatmulJob, 3> jobs;
  SUSTAIN_CHECK(ps.size() <= jobs.size());
  size_t n = 0;
  for (const auto& [w, y] : ps) jobs[n++] = {*w, x, w->n_in, rows, y, w->n_out};
  kernels::matmul_batch(std::span(jobs.data(), n), pool, ws.matmul_scratch.data(),
                        ws.matmul_scratch.size(), prologue);
}

// Row t of y = rms_norm(row t of x) · gain, as a RowPrologue.
struct NormRow {
  const float* x;
  const float* gain;
  float* y;
  int64_t n;
  float eps;
  kernels::RowPrologue prologue() const {
    return {[](const void* p, int64_t t) {
              const auto& c = *static_cast<const NormRow*>(p);
              kernels::rms_norm(c.x + t * c.n, c.gain, c.y + t * c.n, c.n, c.eps);
            },
            this};
  }
};

// Row t of out = silu(gate) · up (or GELU's, for Gemma), as a RowPrologue.
struct GatedRow {
  const float* gate;
  const float* up;
  float* out;
  int64_t n;
  bool gelu;
  kernels::RowPrologue prologue() const {
    return {[](const void* p, int64_t t) {
              const auto& c = *static_cast<const GatedRow*>(p);
              if (c.gelu) {
                kernels::geglu(c.gate + t * c.n, c.up + t * c.n, c.out + t * c.n, c.n);
              } else {
                kernels::swiglu(c.gate + t * c.n, c.up + t * c.n, c.out + t * c.n, c.n);
              }
            },
            this};
  }
};

// Tensor split where a KV head's query group spans ranks: the rank caches
// one KV head per sub-group of its query heads, so the heads it projected
// ([T, real] rows of hd) are copied out to them ([T, cached] rows), in place.
void expand_kv_heads(const TensorShard& sh, int group, float* x, int64_t T, int64_t hd) {
  const int real = sh.kv_end - sh.kv_begin, cached = sh.n_kv_cached();
  for (int64_t t = T - 1; t >= 0; --t)
    for (int j = cached - 1; j >= 0; --j) {
      const int r = (sh.head_begin + j * sh.sub_group) / group - sh.kv_begin;
      std::memmove(x + (t * cached + j) * hd, x + (t * real + r) * hd,
                   static_cast<size_t>(hd) * sizeof(float));
    }
}

// The RoPE angles of s's tokens under rp, from ws.rope_table when it holds
// them (same positions, same parameters: the layers of one forward) and
// computed there otherwise. The sines and cosines were 2 x 32 sincosf per
// token per layer, 1.5 % of a decode step of smollm2-135m.
const float* rope_table(TokenSpan s, const kernels::RopeParams& rp, Workspace& ws) {
  const int64_t T = s.size(), half = rp.rope_dim / 2;
  bool same = ws.rope_key == rp && static_cast<int64_t>(ws.rope_pos.size()) == T;
  for (int64_t i = 0; same && i < T; ++i) same = ws.rope_pos[static_cast<size_t>(i)] == s[i].pos;
  if (same) return ws.rope_table.data();
  ws.rope_table.resize(static_cast<size_t>(T * 2 * half));
  ws.rope_pos.resize(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) {
    float* row = ws.rope_table.data() + i * 2 * half;
    kernels::rope_angles(s[i].pos, rp, row, row + half);
    ws.rope_pos[static_cast<size_t>(i)] = s[i].pos;
  }
  ws.rope_key = rp;
  return ws.rope_table.data();
}

}  // namespace

void attention_block(const Model& m, int layer, TokenSpan s, const AttnOptions& o,
                     kv::KvCache& cache, Workspace& ws, ThreadPool& pool) {
  const ArchConfig& c = m.config();
  const LayerWeights& L = m.weights().layers[static_cast<size_t>(layer)];
  const int64_t T = s.size(), d = c.n_embd;
  const int64_t qd = c.q_dim(), kd = c.k_dim(), vd = c.v_dim();

  // A pipeline stage's cache holds only its own blocks' layers.
  const int kvl =
      (o.kv_layer >= 0 ? o.kv_layer : layer) - (ws.stage ? ws.stage->kv_layer_begin : 0);
  // With an output gate, q's matrix yields per head h the query at
  // [2h·hd, 2h·hd + hd) and its gate in the next hd.
  float* q_out = o.out_gate ? ws.q_gate.data() : ws.q.data();
  const NormRow norm{ws.x.data(), L.attn_norm.data(), ws.cur.data(), d, c.rms_eps};
  matmul_same_input({{&L.wq, q_out}, {&L.wk, ws.k.data()}, {&L.wv, ws.v.data()}}, ws.cur.data(), T,
                    ws, pool, norm.prologue());
  if (o.out_gate) {
    const int64_t hd = c.head_dim_k;
    for (int64_t i = 0; i < T; ++i)
      for (int64_t h = 0; h < c.n_head; ++h) {
        const float* src = ws.q_gate.data() + i * 2 * qd + h * 2 * hd;
        std::copy_n(src, hd, ws.q.data() + i * qd + h * hd);
        std::copy_n(src + hd, hd, ws.attn_gate.data() + i * qd + h * hd);
      }
  }
  if (o.qkv_bias) {
    kernels::add_bias(ws.q.data(), L.bq.data(), T, qd);
    kernels::add_bias(ws.k.data(), L.bk.data(), T, L.wk.n_out);
    kernels::add_bias(ws.v.data(), L.bv.data(), T, L.wv.n_out);
  }
  if (const TensorShard* sh = m.shard(); sh && sh->expands_kv()) {
    const int group = static_cast<int>(m.file_config().n_head / m.file_config().n_head_kv);
    expand_kv_heads(*sh, group, ws.k.data(), T, c.head_dim_k);
    expand_kv_heads(*sh, group, ws.v.data(), T, c.head_dim_v);
  }
  if (o.qk_norm) {
    // Per head: the gain has head_dim entries shared by every head.
    norm_rows(ws.q.data(), L.q_norm, ws.q.data(), T * c.n_head, c.head_dim_k, c.rms_eps);
    norm_rows(ws.k.data(), L.k_norm, ws.k.data(), T * c.n_head_kv, c.head_dim_k, c.rms_eps);
  }
  kernels::RopeParams rp = rope_params(c, m.weights(), o.neox);
  if (o.rope_base > 0.0f) {
    rp.freq_base = o.rope_base;
    rp.freq_scale = 1.0f;
    rp.ext_factor = 0.0f;
  }
  const float* angles = rope_table(s, rp, ws);
  const int64_t half = rp.rope_dim / 2;
  for (int64_t i = 0; i < T; ++i) {
    const float* cs = angles + i * 2 * half;
    kernels::rope_rotate(ws.q.data() + i * qd, static_cast<int>(c.n_head), rp, cs, cs + half);
    kernels::rope_rotate(ws.k.data() + i * kd, static_cast<int>(c.n_head_kv), rp, cs, cs + half);
    const kv::PageTable& pt = *s.batch.seqs[static_cast<size_t>(s[i].seq)];
    cache.store(pt, kvl, s[i].pos, ws.k.data() + i * kd, ws.v.data() + i * vd);
  }
  ws.queries.clear();
  for (int64_t i = 0; i < T; ++i)
    ws.queries.push_back({s.batch.seqs[static_cast<size_t>(s[i].seq)],
                          s[i].n_visible > 0 ? s[i].n_visible : s[i].pos + 1,
                          // A non-causal token's window counts back from itself.
                          s[i].n_visible > s[i].pos + 1 ? s[i].pos + 1 : 0});
  attention::AttnParams ap = attn_params(c);
  // The query scale is the whole model's (Gemma 3 27B's depends on n_head).
  if (m.shard()) ap.scale = attn_params(m.file_config()).scale;
  ap.window = o.window;
  attention::attend(cache, kvl, ap, ws.queries, ws.q.data(), ws.attn_out.data(), pool,
                    ws.attn_scratch.data());
  if (o.out_gate) {
    const int64_t n = T * c.n_head * c.head_dim_v;
    for (int64_t i = 0; i < n; ++i)
      ws.attn_out[i] *= 1.0f / (1.0f + std::exp(-ws.attn_gate[i]));
  }
  if (const TensorShard* sh = m.shard(); sh && !sh->o_by_columns && ws.stage &&
                                          ws.stage->gather_heads) {
    // attn_output whole on every rank: gather every head's output first.
    if (ws.comm_status)
      ws.comm_status = ws.stage->gather_heads(ws.attn_out.data(), ws.attn_all.data(), T);
    matmul(L.wo, ws.attn_all.data(), T, ws.cur.data(), ws, pool);
  } else {
    matmul(L.wo, ws.attn_out.data(), T, ws.cur.data(), ws, pool);
    reduce_partial(ws, ws.cur.data(), T * d);
  }
  if (o.post_norm) norm_rows(ws.cur.data(), L.attn_post_norm, ws.cur.data(), T, d, c.rms_eps);
  for (int64_t i = 0; i < T; ++i) kernels::add(ws.x.data() + i * d, ws.cur.data() + i * d, d);
}

void ffn_block(const Model& m, int layer, TokenSpan s, Workspace& ws, ThreadPool& pool,
               const FfnOptions& o) {
  const ArchConfig& c = m.config();
  const LayerWeights& L = m.weights().layers[static_cast<size_t>(layer)];
  const int64_t T = s.size(), d = c.n_embd, ff = c.n_ff;
  const NormRow norm{ws.x.data(), L.ffn_norm.data(), ws.cur.data(), d, c.rms_eps};
  matmul_same_input({{&L.w_gate, ws.gate.data()}, {&L.w_up, ws.up.data()}}, ws.cur.data(), T, ws,
                    pool, norm.prologue());
  const GatedRow gated{ws.gate.data(), ws.up.data(), ws.hidden.data(), ff, o.gelu};
  matmul_same_input({{&L.w_down, ws.cur.data()}}, ws.hidden.data(), T, ws, pool, gated.prologue());
  reduce_partial(ws, ws.cur.data(), T * d);
  if (o.post_norm) norm_rows(ws.cur.data(), L.ffn_post_norm, ws.cur.data(), T, d, c.rms_eps);
  for (int64_t i = 0; i < T; ++i) kernels::add(ws.x.data() + i * d, ws.cur.data() + i * d, d);
}

void moe_ffn_block(const Model& m, int layer, TokenSpan s, Workspace& ws, ThreadPool& pool) {
  const ArchConfig& c = m.config();
  const LayerWeights& L = m.weights().layers[static_cast<size_t>(layer)];
  const int64_t T = s.size(), d = c.n_embd, fe = c.n_ff_exp;
  const int E = static_cast<int>(c.n_expert), K = static_cast<int>(c.n_expert_used);
  norm_rows(ws.x.data(), L.ffn_norm, ws.cur.data(), T, d, c.rms_eps);
  matmul(L.router, ws.cur.data(), T, ws.router_logits.data(), ws, pool);

  // Routing as llama.cpp computes it: softmax over all experts, the K most
  // probable (lower index on a tie), their probabilities renormalized to sum
  // to 1 (the floor only guards a sum that underflowed).
  std::fill(ws.expert_start.begin(), ws.expert_start.end(), 0);
  for (int64_t i = 0; i < T; ++i) {
    float* p = ws.router_logits.data() + i * E;
    kernels::softmax(p, E);
    int32_t* ids = ws.expert_id.data() + i * K;
    float* wts = ws.expert_weight.data() + i * K;
    float sum = 0.0f;
    for (int j = 0; j < K; ++j) {
      int best = -1;
      for (int e = 0; e < E; ++e) {
        bool taken = false;
        for (int q = 0; q < j; ++q) taken = taken || ids[q] == e;
        if (!taken && (best < 0 || p[e] > p[best])) best = e;
      }
      ids[j] = best;
      wts[j] = p[best];
      sum += p[best];
      ++ws.expert_start[static_cast<size_t>(best) + 1];
    }
    const float inv = 1.0f / std::max(sum, 6.1035e-5f);
    for (int j = 0; j < K; ++j) wts[j] *= inv;
  }
  // Group the (token, slot) pairs by expert, so each expert's matrices are
  // read once per step for all the tokens that chose it.
  // A stable counting sort: within an expert, tokens stay in batch order.
  for (int e = 0; e < E; ++e) ws.expert_start[e + 1] += ws.expert_start[e];
  std::copy_n(ws.expert_start.begin(), E, ws.expert_next.begin());
  std::vector<int32_t>& rows = ws.expert_rows;
  for (int64_t i = 0; i < T * K; ++i) {
    const int e = ws.expert_id[static_cast<size_t>(i)];
    rows[static_cast<size_t>(ws.expert_next[e]++)] = static_cast<int32_t>(i);
  }
  // Experts run in groups of up to expert_group_rows rows (all of them in a
  // decode step): one batch of every gate and up product of the group, the
  // SwiGLU, one batch of the down products (kernels::matmul_batch: two pool
  // regions each, however many experts). Outputs are added back to x expert
  // by expert, in expert order, as one expert at a time would. A rank of a
  // tensor split runs only its experts and adds their outputs into
  // ws.moe_partial, which the ranks sum (one all-reduce) before it joins x.
  const TensorShard* sh = m.shard();
  const int e_begin = sh ? sh->expert_begin : 0, e_end = sh ? sh->expert_end : E;
  float* partial = sh ? ws.moe_partial.data() : nullptr;
  if (partial) std::fill_n(partial, T * d, 0.0f);
  const int64_t cap = ws.expert_group_rows;
  std::vector<kernels::MatmulJob>& jobs = ws.expert_jobs;
  for (int e0 = e_begin; e0 < e_end;) {
    const int32_t g0 = ws.expert_start[e0];
    int e1 = e0;
    while (e1 < e_end && ws.expert_start[e1 + 1] - g0 <= cap) ++e1;
    SUSTAIN_CHECK(e1 > e0);  // an expert has at most max_tokens <= cap rows
    const int32_t g1 = ws.expert_start[e1];
    for (int32_t r = g0; r < g1; ++r) {
      const int64_t tok = rows[static_cast<size_t>(r)] / K;
      std::copy_n(ws.cur.data() + tok * d, d, ws.expert_in.data() + (r - g0) * d);
    }
    jobs.clear();
    for (int e = e0; e < e1; ++e) {
      const int64_t off = ws.expert_start[e] - g0, n = ws.expert_start[e + 1] - ws.expert_start[e];
      if (n == 0) continue;
      const float* in = ws.expert_in.data() + off * d;
      jobs.push_back(
          {L.gate_exps[static_cast<size_t>(e)], in, d, n, ws.gate.data() + off * fe, fe});
      jobs.push_back({L.up_exps[static_cast<size_t>(e)], in, d, n, ws.up.data() + off * fe, fe});
    }
    kernels::matmul_batch(jobs, pool, ws.matmul_scratch.data(), ws.matmul_scratch.size());
    kernels::swiglu(ws.gate.data(), ws.up.data(), ws.hidden.data(), (g1 - g0) * fe);
    jobs.clear();
    for (int e = e0; e < e1; ++e) {
      const int64_t off = ws.expert_start[e] - g0, n = ws.expert_start[e + 1] - ws.expert_start[e];
      if (n == 0) continue;
      jobs.push_back({L.down_exps[static_cast<size_t>(e)], ws.hidden.data() + off * fe, fe, n,
                      ws.expert_out.data() + off * d, d});
    }
    kernels::matmul_batch(jobs, pool, ws.matmul_scratch.data(), ws.matmul_scratch.size());
    for (int32_t r = g0; r < g1; ++r) {
      const int32_t slot = rows[static_cast<size_t>(r)];
      const float w = ws.expert_weight[static_cast<size_t>(slot)];
      float* x = (partial ? partial : ws.x.data()) + (slot / K) * d;
      const float* y = ws.expert_out.data() + (r - g0) * d;
      for (int64_t k = 0; k < d; ++k) x[k] += w * y[k];
    }
    e0 = e1;
  }
  if (partial) {
    reduce_partial(ws, partial, T * d);
    for (int64_t i = 0; i < T; ++i) kernels::add(ws.x.data() + i * d, partial + i * d, d);
  }
}

void output_head(const Model& m, TokenSpan s, Workspace& ws, ThreadPool& pool, float* logits,
                 const std::vector<float>* norm, const kernels::WeightView* out) {
  if (!logits) return;
  const ArchConfig& c = m.config();
  const int64_t d = c.n_embd;
  const float* gain = (norm ? *norm : m.weights().output_norm).data();
  int64_t rows = 0;
  for (int64_t i = 0; i < s.size(); ++i) {
    if (!s[i].logits) continue;
    kernels::rms_norm(ws.x.data() + i * d, gain, ws.logits_in.data() + rows * d, d, c.rms_eps);
    ++rows;
  }
  if (rows == 0) return;
  const auto& w = out ? *out : m.weights().output;
  kernels::matmul(w, ws.logits_in.data(), d, rows, logits, w.n_out, pool, ws.matmul_scratch.data());
  // Gemma's final soft cap, where the file asks for it: cap · tanh(logit / cap).
  if (const float cap = c.final_logit_softcap; cap > 0.0f) {
    for (int64_t i = 0; i < rows * w.n_out; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
  }
}

}  // namespace sustain
