// Gated DeltaNet, the linear-attention block of qwen35 (llama.cpp
// src/models/qwen35.cpp states the computation; docs/models.md repeats it):
//   mixed = W_qkv·h, z = W_gate·h, β = σ(W_beta·h), g = softplus(W_alpha·h + dt_bias)·A
//   c = SiLU(causal depthwise conv over time of mixed, K taps, state = last K-1 inputs)
//   q, k = L2-normalised heads of c; v = the rest; value head j reads key head j mod H_k
//   o = gated delta rule (kernels/delta_rule.h) per value head, state S [d_k][d_v]
//   y = RMSNorm(o per head)·ssm_norm ⊙ SiLU(z);  x += W_out·y
#include <algorithm>
#include <cmath>

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

  // Causal convolution per sequence: input row r - (K-1) + j meets tap j,
  // rows before the run come from the conv state (oldest first).
  for (const SeqRun& run : runs) {
    float* state = states.conv(run.slot, state_layer);  // [K-1][ch]
    const int64_t n = run.end - run.begin;
    const float* in = ws.ssm_mixed.data() + run.begin * ch;
    float* out = ws.ssm_conv.data() + run.begin * ch;
    for (int64_t r = 0; r < n; ++r) {
      float* y = out + r * ch;
      std::fill_n(y, ch, 0.0f);
      for (int64_t j = 0; j < K; ++j) {
        const int64_t src = r - (K - 1) + j;
        const float* xr = src >= 0 ? in + src * ch : state + (K - 1 + src) * ch;
        for (int64_t q = 0; q < ch; ++q) y[q] += L.ssm_conv[static_cast<size_t>(q * K + j)] * xr[q];
      }
      for (int64_t q = 0; q < ch; ++q) y[q] = silu(y[q]);
    }
    // The new state: the last K-1 inputs of the extended sequence.
    const int64_t keep = K - 1;
    if (n >= keep) {
      std::copy_n(in + (n - keep) * ch, keep * ch, state);
    } else {
      std::copy(state + n * ch, state + keep * ch, state);
      std::copy_n(in, n * ch, state + (keep - n) * ch);
    }
  }
  for (int64_t i = 0; i < T; ++i) {
    float* row = ws.ssm_conv.data() + i * ch;
    for (int64_t h = 0; h < 2 * hk; ++h) l2_normalize(row + h * hd, hd, eps);
  }

  // The delta rule, one task per (sequence, value head); value head j reads
  // query/key head j mod H_k.
  const size_t n_tasks = runs.size() * static_cast<size_t>(hv);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  pool.parallel_for_dynamic(n_tasks, 1, [&](size_t b, size_t e, int slot) {
    float* scratch = ws.ssm_scratch.data() + ws.ssm_scratch_floats * static_cast<size_t>(slot);
    for (size_t task = b; task < e; ++task) {
      const SeqRun& run = runs[task / static_cast<size_t>(hv)];
      const int64_t h = static_cast<int64_t>(task % static_cast<size_t>(hv));
      const float* base = ws.ssm_conv.data() + run.begin * ch;
      kernels::DeltaRuleArgs a;
      a.n_tokens = run.end - run.begin;
      a.dk = a.dv = static_cast<int>(hd);
      a.q = base + (h % hk) * hd;
      a.k = base + hk * hd + (h % hk) * hd;
      a.ld_qk = ch;
      a.v = base + 2 * hk * hd + h * hd;
      a.ld_v = ch;
      a.g = ws.ssm_g.data() + run.begin * hv + h;
      a.beta = ws.ssm_beta.data() + run.begin * hv + h;
      a.ld_gb = hv;
      a.scale = scale;
      a.S = states.ssm(run.slot, state_layer) + h * hd * hd;
      a.o = ws.ssm_o.data() + run.begin * inner + h * hd;
      a.ld_o = inner;
      kernels::delta_rule(a, kDeltaRuleChunk, scratch);
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

}  // namespace sustain
