// The gated delta rule (Gated DeltaNet, qwen35's linear-attention layers)
// for one value head of one sequence over n_tokens consecutive tokens.
// The state S is a [dk][dv] matrix; per token t, in this order:
//   S ← exp(g_t)·S                      (decay, g_t ≤ 0)
//   δ = β_t·(v_t − Sᵀk_t)                (delta-rule write of the error)
//   S ← S + k_t δᵀ
//   o_t = scale · Sᵀq_t                  (read from the updated state)
// q and k are expected L2-normalised by the caller.
//
// delta_rule_ref is that recurrence token by token: the oracle. delta_rule
// computes the same in chunks of C tokens (WY form): with G_t the decay
// summed over the chunk up to t and S0 the state at the chunk start,
//   δ_t = β_t(v_t − e^{G_t} S0ᵀk_t − Σ_{s<t} e^{G_t−G_s}(k_s·k_t) δ_s)   (triangular solve)
//   o_t = scale·(e^{G_t} S0ᵀq_t + Σ_{s≤t} e^{G_t−G_s}(k_s·q_t) δ_s)
//   S   = e^{G_C} S0 + Σ_s e^{G_C−G_s} k_s δ_sᵀ
// so the state is read and written once per chunk instead of three times
// per token, and the work is dense products over the chunk.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sustain::kernels {

struct DeltaRuleArgs {
  int64_t n_tokens = 0;
  int dk = 0, dv = 0;
  const float* q = nullptr;  // token t's query at q + t * ld_qk, dk values
  const float* k = nullptr;  // token t's key at k + t * ld_qk
  int64_t ld_qk = 0;
  const float* v = nullptr;  // token t's value at v + t * ld_v, dv values
  int64_t ld_v = 0;
  const float* g = nullptr;     // token t's log decay at g[t * ld_gb]
  const float* beta = nullptr;  // token t's step at beta[t * ld_gb]
  int64_t ld_gb = 1;
  float scale = 1.0f;
  float* S = nullptr;  // [dk][dv]: the state before, then after the tokens
  float* o = nullptr;  // token t's output at o + t * ld_o, dv values
  int64_t ld_o = 0;
};

// Token-by-token recurrence (scalar, double accumulation): the reference.
void delta_rule_ref(const DeltaRuleArgs& a);

// Chunked form; `scratch` holds delta_rule_scratch_floats(chunk, dk, dv).
void delta_rule(const DeltaRuleArgs& a, int chunk, float* scratch);
size_t delta_rule_scratch_floats(int chunk, int dk, int dv);

}  // namespace sustain::kernels
