// Gated DeltaNet, the linear-attention block of qwen35 (llama.cpp
// src/models/qwen35.cpp states the computation; docs/models.md repeats it):
//   mixed = W_qkv·h, z = W_gate·h, β = σ(W_beta·h), g = softplus(W_alpha·h + dt_bias)·A
//   c = SiLU(causal depthwise conv over time of mixed, K taps, state = last K-1 inputs)
//   q, k = L2-normalised heads of c; v = the rest; value head j reads key head j mod H_k
//   o = gated delta rule (kernels/delta_rule.h) per value head, state S [d_k][d_v]
//   y = RMSNorm(o per head)·ssm_norm ⊙ SiLU(z);  x += W_out·y
#include <algorithm>
#include <cmath>

#include "base/batch_invariant.h"
#include "kernels/delta_rule.h"
#include "model/transformer.h"

namespace sustain {
namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }

// softplus as ggml computes it: the identity above 20.
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

void l2_normalize(float* x, int64_t n, float eps) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  const float inv = 1.0f / std::max(static_cast<float>(std::sqrt(s)), eps);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

// The causal convolution of one sequence's n input rows (row stride ld_in)
// into out [n][ch], SiLU applied: input row r - (K-1) + j meets tap j, rows
// before the run come from the conv state (oldest first), which then holds
// the last K-1 inputs of the extended sequence.
void conv_advance(const LayerWeights& L, float* state, const float* in, int64_t ld_in, float* out,
                  int64_t n, int64_t ch, int64_t K) {
  for (int64_t r = 0; r < n; ++r) {
    float* y = out + r * ch;
    std::fill_n(y, ch, 0.0f);
    for (int64_t j = 0; j < K; ++j) {
      const int64_t src = r - (K - 1) + j;
      const float* xr = src >= 0 ? in + src * ld_in : state + (K - 1 + src) * ch;
      for (int64_t q = 0; q < ch; ++q) y[q] += L.ssm_conv[static_cast<size_t>(q * K + j)] * xr[q];
    }
    for (int64_t q = 0; q < ch; ++q) y[q] = silu(y[q]);
  }
  const int64_t keep = K - 1;
  if (n >= keep) {
    for (int64_t r = 0; r < keep; ++r) std::copy_n(in + (n - keep + r) * ld_in, ch, state + r * ch);
  } else {
    std::copy(state + n * ch, state + keep * ch, state);
    for (int64_t r = 0; r < n; ++r) std::copy_n(in + r * ld_in, ch, state + (keep - n + r) * ch);
  }
}

// The delta rule of value head h over one run of n convolved rows (conv,
// row stride ch; β and decay with row stride ld_gb), advancing S and
// writing the outputs to o (row stride ld_o).
void delta_head(const ArchConfig& c, const float* conv, int64_t n, const float* beta,
                const float* g, int64_t ld_gb, float* S, float* o, int64_t ld_o, int64_t h,
                float* scratch) {
  const int64_t ch = c.ssm_conv_channels(), hk = c.ssm_n_k_heads, hd = c.ssm_head_dim;
  kernels::DeltaRuleArgs a;
  a.n_tokens = n;
  a.dk = a.dv = static_cast<int>(hd);
  a.q = conv + (h % hk) * hd;
  a.k = conv + hk * hd + (h % hk) * hd;
  a.ld_qk = ch;
  a.v = conv + 2 * hk * hd + h * hd;
  a.ld_v = ch;
  a.g = g + h;
  a.beta = beta + h;
  a.ld_gb = ld_gb;
  a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  a.S = S + h * hd * hd;
  a.o = o + h * hd;
  a.ld_o = ld_o;
  if (!batch_invariant()) {
    kernels::delta_rule(a, kDeltaRuleChunk, scratch);
    return;
  }
  // Batch invariance: token by token, as decode advances the state (the
  // chunked form sums in another order).
  kernels::DeltaRuleArgs one = a;
  one.n_tokens = 1;
  for (int64_t t = 0; t < n; ++t) {
    one.q = a.q + t * a.ld_qk;
    one.k = a.k + t * a.ld_qk;
    one.v = a.v + t * a.ld_v;
    one.g = a.g + t * a.ld_gb;
    one.beta = a.beta + t * a.ld_gb;
    one.o = a.o + t * a.ld_o;
    kernels::delta_rule(one, kDeltaRuleChunk, scratch);
  }
}

}  // namespace

Status seq_runs(TokenSpan s, const kv::KvCache& cache, std::vector<SeqRun>& runs) {
  runs.clear();
  const kv::StatePool& states = cache.states();
  for (int64_t i = 0; i < s.size();) {
    const int32_t seq = s[i].seq;
    const kv::PageTable& t = *s.batch.seqs[static_cast<size_t>(seq)];
    if (t.state < 0)
      return error(Code::kInvalidArgument,
                   "sequence {} has no recurrent-state slot (reserve its KV room first)", seq);
    for (const SeqRun& r : runs)
      if (r.slot == t.state)
        return error(Code::kInvalidArgument,
                     "hybrid model: the tokens of sequence {} are not one run in the batch", seq);
    int64_t j = i + 1;
    while (j < s.size() && s[j].seq == seq) ++j;
    const int64_t want = states.pos(t.state);
    for (int64_t r = i; r < j; ++r)
      if (s[r].pos != want + (r - i))
        return error(Code::kInvalidArgument,
                     "hybrid model: sequence {} has token position {} where its recurrent state "
                     "expects {} (a state cannot skip or rewind positions)",
                     seq, s[r].pos, want + (r - i));
    runs.push_back({t.state, i, j});
    i = j;
  }
  return Status::ok();
}

void delta_net_block(const Model& m, int layer, int state_layer, TokenSpan s,
                     const std::vector<SeqRun>& runs, kv::KvCache& cache, Workspace& ws,
                     ThreadPool& pool) {
  const ArchConfig& c = m.config();
  const LayerWeights& L = m.weights().layers[static_cast<size_t>(layer)];
  const int64_t T = s.size(), d = c.n_embd;
  const int64_t ch = c.ssm_conv_channels(), inner = c.ssm_inner;
  const int64_t hk = c.ssm_n_k_heads, hv = c.ssm_n_v_heads, hd = c.ssm_head_dim;
  const int64_t K = c.ssm_conv_kernel;
  const float eps = c.rms_eps;
  kv::StatePool& states = cache.states();

  for (int64_t i = 0; i < T; ++i)
    kernels::rms_norm(ws.x.data() + i * d, L.attn_norm.data(), ws.cur.data() + i * d, d, eps);
  auto mm = [&](const kernels::WeightView& w, float* y) {
    kernels::matmul(w, ws.cur.data(), w.n_in, T, y, w.n_out, pool, ws.matmul_scratch.data());
  };
  mm(L.ssm_qkv, ws.ssm_mixed.data());
  mm(L.ssm_gate, ws.ssm_z.data());
  mm(L.ssm_beta, ws.ssm_beta.data());
  mm(L.ssm_alpha, ws.ssm_g.data());
  for (int64_t i = 0; i < T; ++i)
    for (int64_t h = 0; h < hv; ++h) {
      float& b = ws.ssm_beta[static_cast<size_t>(i * hv + h)];
      b = 1.0f / (1.0f + std::exp(-b));
      float& g = ws.ssm_g[static_cast<size_t>(i * hv + h)];
      g = softplus(g + L.ssm_dt_bias[static_cast<size_t>(h)]) * L.ssm_a[static_cast<size_t>(h)];
    }

  // What a speculative verify step keeps of its sequences (model.h,
  // RecurrentRecord): the convolution input, β and decay of each position.
  if (ws.record != nullptr)
    for (RecurrentRecord& rec : *ws.record)
      for (const SeqRun& run : runs) {
        if (run.slot != rec.slot) continue;
        for (int64_t i = run.begin; i < run.end; ++i) {
          const int64_t at = s[i].pos - rec.pos0;
          if (at < 0 || at >= rec.n_max) continue;
          float* dst = rec.rows.data() + (state_layer * rec.n_max + at) * rec.width;
          std::copy_n(ws.ssm_mixed.data() + i * ch, ch, dst);
          std::copy_n(ws.ssm_beta.data() + i * hv, hv, dst + ch);
          std::copy_n(ws.ssm_g.data() + i * hv, hv, dst + ch + hv);
        }
      }

  // Causal convolution per sequence.
  for (const SeqRun& run : runs)
    conv_advance(L, states.conv(run.slot, state_layer), ws.ssm_mixed.data() + run.begin * ch, ch,
                 ws.ssm_conv.data() + run.begin * ch, run.end - run.begin, ch, K);
  for (int64_t i = 0; i < T; ++i) {
    float* row = ws.ssm_conv.data() + i * ch;
    for (int64_t h = 0; h < 2 * hk; ++h) l2_normalize(row + h * hd, hd, eps);
  }

  // The delta rule, one task per (sequence, value head); value head j reads
  // query/key head j mod H_k.
  const size_t n_tasks = runs.size() * static_cast<size_t>(hv);
  pool.parallel_for_dynamic(n_tasks, 1, [&](size_t b, size_t e, int slot) {
    float* scratch = ws.ssm_scratch.data() + ws.ssm_scratch_floats * static_cast<size_t>(slot);
    for (size_t task = b; task < e; ++task) {
      const SeqRun& run = runs[task / static_cast<size_t>(hv)];
      const int64_t h = static_cast<int64_t>(task % static_cast<size_t>(hv));
      delta_head(c, ws.ssm_conv.data() + run.begin * ch, run.end - run.begin,
                 ws.ssm_beta.data() + run.begin * hv, ws.ssm_g.data() + run.begin * hv, hv,
                 states.ssm(run.slot, state_layer), ws.ssm_o.data() + run.begin * inner, inner, h,
                 scratch);
    }
  });

  // Gated RMSNorm per value head, then the output projection.
  for (int64_t i = 0; i < T; ++i)
    for (int64_t h = 0; h < hv; ++h) {
      float* o = ws.ssm_o.data() + i * inner + h * hd;
      const float* z = ws.ssm_z.data() + i * inner + h * hd;
      kernels::rms_norm(o, L.ssm_norm.data(), o, hd, eps);
      for (int64_t q = 0; q < hd; ++q) o[q] *= silu(z[q]);
    }
  kernels::matmul(L.ssm_out, ws.ssm_o.data(), inner, T, ws.cur.data(), d, pool,
                  ws.matmul_scratch.data());
  reduce_partial(ws, ws.cur.data(), T * d);  // tensor split: each rank's value heads
  for (int64_t i = 0; i < T; ++i) kernels::add(ws.x.data() + i * d, ws.cur.data() + i * d, d);
}

void delta_net_replay(const Model& m, int layer, int state_layer, const RecurrentRecord& rec,
                      int64_t n, kv::KvCache& cache, Workspace& ws, ThreadPool& pool) {
  const ArchConfig& c = m.config();
  const LayerWeights& L = m.weights().layers[static_cast<size_t>(layer)];
  const int64_t ch = c.ssm_conv_channels(), hk = c.ssm_n_k_heads, hv = c.ssm_n_v_heads;
  const int64_t hd = c.ssm_head_dim, inner = c.ssm_inner;
  kv::StatePool& states = cache.states();
  const float* in = rec.rows.data() + state_layer * rec.n_max * rec.width;
  conv_advance(L, states.conv(rec.slot, state_layer), in, rec.width, ws.ssm_conv.data(), n, ch,
               c.ssm_conv_kernel);
  for (int64_t i = 0; i < n; ++i) {
    float* row = ws.ssm_conv.data() + i * ch;
    for (int64_t h = 0; h < 2 * hk; ++h) l2_normalize(row + h * hd, hd, c.rms_eps);
  }
  pool.parallel_for_dynamic(static_cast<size_t>(hv), 1, [&](size_t b, size_t e, int slot) {
    float* scratch = ws.ssm_scratch.data() + ws.ssm_scratch_floats * static_cast<size_t>(slot);
    for (size_t h = b; h < e; ++h)
      delta_head(c, ws.ssm_conv.data(), n, in + ch, in + ch + hv, rec.width,
                 states.ssm(rec.slot, state_layer), ws.ssm_o.data(), inner, static_cast<int64_t>(h),
                 scratch);
  });
}

}  // namespace sustain
