#include "model/ref_forward.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "gguf/gguf.h"
#include "model/weights.h"
#include "tensor/fp16.h"
#include "tensor/qtype.h"

namespace sustain::test {
namespace {

// Four partial sums in double: still a fixed summation order (the result
// depends only on the inputs), and about three times faster than one
// dependent chain, which matters for the 135M-parameter synth model.
double dot(const float* a, const float* b, size_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += double{a[i]} * b[i];
    s1 += double{a[i + 1]} * b[i + 1];
    s2 += double{a[i + 2]} * b[i + 2];
    s3 += double{a[i + 3]} * b[i + 3];
  }
  for (; i < n; ++i) s0 += double{a[i]} * b[i];
  return (s0 + s1) + (s2 + s3);
}

void add_bias(const std::vector<float>& b, float* y) {
  for (size_t i = 0; i < b.size(); ++i) y[i] += b[i];
}

void rms_norm(const float* x, const float* w, size_t n, float eps, float* y) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += double{x[i]} * x[i];
  const double scale = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (size_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i] * scale) * w[i];
}

float silu(float x) {
  return x / (1.0f + std::exp(-x));
}

float round_f16(float x) {
  return f16_to_f32(f32_to_f16(x));
}

// The format ggml's CPU backend converts a matmul's activations to before
// the dot products with a weight of type `t` (its `vec_dot_type`).
QType activation_partner(QType t) {
  switch (t) {
    case QType::F16:
      return QType::F16;
    case QType::BF16:
      return QType::BF16;
    case QType::Q4_0:
    case QType::Q5_0:
    case QType::Q8_0:
      return QType::Q8_0;
    case QType::Q4_1:
    case QType::Q5_1:
      return QType::Q8_1;
    case QType::Q2_K:
    case QType::Q3_K:
    case QType::Q4_K:
    case QType::Q5_K:
    case QType::Q6_K:
      return QType::Q8_K;
    default:
      return QType::F32;
  }
}

// Tracks max |x| in `slot` (when given) and counts non-finite elements.
void observe(ForwardStats* s, float ForwardStats::*slot, const float* x, size_t n) {
  if (!s) return;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      ++s->n_non_finite;
    } else if (slot) {
      s->*slot = std::max(s->*slot, std::fabs(x[i]));
    }
  }
}

// The whole tensor as f32, row by row (rows are contiguous in GGUF).
Expected<std::vector<float>> dequantize_tensor(const gguf::TensorInfo& ti,
                                               const std::string& path) {
  const QTypeTraits& tr = qtype_traits(ti.type);
  if (!tr.dequantize)
    return error(Code::kUnsupported, "{}: tensor `{}` is {}, which sustain cannot dequantize", path,
                 ti.name, tr.name);
  const uint64_t row = ti.shape.empty() ? 1 : static_cast<uint64_t>(ti.shape.back());
  if (row == 0 || row % tr.block_elems != 0)
    return error(Code::kBadFile,
                 "{}: tensor `{}` has rows of {} elements, not a multiple of {}'s block of {}",
                 path, ti.name, row, tr.name, tr.block_elems);
  const uint64_t row_bytes = qtype_row_bytes(ti.type, row);
  const uint64_t n_rows = ti.n_elements / row;
  if (n_rows * row_bytes > ti.n_bytes)
    return error(Code::kBadFile, "{}: tensor `{}` is shorter than its shape", path, ti.name);
  std::vector<float> out(ti.n_elements);
  for (uint64_t r = 0; r < n_rows; ++r)
    tr.dequantize(ti.data + r * row_bytes, out.data() + r * row, static_cast<int64_t>(row));
  return out;
}

}  // namespace

float ForwardStats::max_abs() const {
  return std::max({max_abs_residual, max_abs_attn_score, max_abs_ffn, max_abs_logit});
}

RopeStyle rope_style(Arch arch) {
  // llama.cpp's llama_model_rope_type(): LLM_ARCH_LLAMA uses NORM (its
  // converter permutes Q/K rows so HF's rotate-half becomes adjacent pairs);
  // QWEN2 and QWEN3 use NEOX.
  switch (arch) {
    case Arch::kLlama:
      return RopeStyle::kNorm;
    case Arch::kQwen2:
    case Arch::kQwen3:
    case Arch::kQwen3Moe:
    case Arch::kGemma3:
      return RopeStyle::kNeox;
  }
  return RopeStyle::kNorm;
}

struct RefModel::Cache {
  int n_pos = 0;
  std::vector<std::vector<float>> k, v;  // per layer: [n_pos][k_dim] and [n_pos][v_dim]
};

Expected<RefModel> RefModel::load(const gguf::File& f, const RefOptions& opt) {
  RefModel m;
  m.opt_ = opt;
  SUSTAIN_ASSIGN_OR_RETURN(m.cfg_, arch_config_from_gguf(f));
  const ArchConfig& c = m.cfg_;
  SUSTAIN_TRY(validate_weights(c, f));
  if (c.rope_scaling == RopeScaling::kYarn)
    return error(Code::kUnsupported,
                 "{}: YaRN RoPE scaling is not implemented in the reference forward", f.path());
  if (c.head_dim_k != c.head_dim_v)
    return error(Code::kUnsupported, "{}: key length {} != value length {}", f.path(), c.head_dim_k,
                 c.head_dim_v);
  m.rope_style_ = rope_style(c.arch);

  auto vec = [&](const std::string& name, std::vector<float>& dst) -> Status {
    const gguf::TensorInfo* ti = f.find_tensor(name);
    if (!ti) return error(Code::kBadFile, "{}: tensor `{}` is missing", f.path(), name);
    auto t = dequantize_tensor(*ti, f.path());
    if (!t) return t.status();
    dst = std::move(t).value();
    return Status::ok();
  };
  auto mat = [&](const std::string& name, Matrix& dst) -> Status {
    SUSTAIN_TRY(vec(name, dst.w));
    const gguf::TensorInfo* ti = f.find_tensor(name);  // present: vec() succeeded
    dst.rows = static_cast<size_t>(ti->shape[0]);
    dst.cols = static_cast<size_t>(ti->shape[1]);
    dst.act_type = activation_partner(ti->type);
    return Status::ok();
  };

  // theta_i(pos) = pos * base^(-2i / rope_dim); linear scaling divides
  // positions by the factor and Llama 3's rope_freqs divides each frequency.
  std::vector<float> freq_factors;
  if (c.rope_scaling == RopeScaling::kLlama3) SUSTAIN_TRY(vec("rope_freqs.weight", freq_factors));
  const double freq_scale =
      c.rope_scaling == RopeScaling::kLinear ? 1.0 / double{c.rope_scale_factor} : 1.0;
  m.inv_freq_.resize(c.rope_dim / 2);
  for (uint32_t i = 0; i < c.rope_dim / 2; ++i) {
    double w = std::pow(double{c.rope_freq_base}, -2.0 * i / c.rope_dim) * freq_scale;
    if (!freq_factors.empty()) w /= freq_factors[i];
    m.inv_freq_[i] = w;
  }

  SUSTAIN_TRY(vec("token_embd.weight", m.tok_embd_));
  SUSTAIN_TRY(vec("output_norm.weight", m.output_norm_));
  // Tied output: llama.cpp multiplies by token_embd in its stored format, so
  // the activation partner follows token_embd's type too.
  SUSTAIN_TRY(mat(c.tied_output ? "token_embd.weight" : "output.weight", m.output_));
  m.layers_.resize(c.n_layer);
  for (uint32_t il = 0; il < c.n_layer; ++il) {
    Layer& l = m.layers_[il];
    const std::string p = "blk." + std::to_string(il) + ".";
    SUSTAIN_TRY(vec(p + "attn_norm.weight", l.attn_norm));
    SUSTAIN_TRY(mat(p + "attn_q.weight", l.wq));
    SUSTAIN_TRY(mat(p + "attn_k.weight", l.wk));
    SUSTAIN_TRY(mat(p + "attn_v.weight", l.wv));
    if (c.has_qkv_bias()) {
      SUSTAIN_TRY(vec(p + "attn_q.bias", l.bq));
      SUSTAIN_TRY(vec(p + "attn_k.bias", l.bk));
      SUSTAIN_TRY(vec(p + "attn_v.bias", l.bv));
    }
    if (c.has_qk_norm()) {
      SUSTAIN_TRY(vec(p + "attn_q_norm.weight", l.q_norm));
      SUSTAIN_TRY(vec(p + "attn_k_norm.weight", l.k_norm));
    }
    SUSTAIN_TRY(mat(p + "attn_output.weight", l.wo));
    SUSTAIN_TRY(vec(p + "ffn_norm.weight", l.ffn_norm));
    SUSTAIN_TRY(mat(p + "ffn_gate.weight", l.w_gate));
    SUSTAIN_TRY(mat(p + "ffn_up.weight", l.w_up));
    SUSTAIN_TRY(mat(p + "ffn_down.weight", l.w_down));
  }
  return m;
}

void RefModel::matvec(const Matrix& m, const float* x, float* y) const {
  std::vector<float> rounded;
  if (opt_.quantize_activations && m.act_type != QType::F32) {
    // Round trip through the partner format: the values llama.cpp's integer
    // (or f16) dot products actually see.
    const QTypeTraits& tr = qtype_traits(m.act_type);
    SUSTAIN_CHECK(m.cols % tr.block_elems == 0);
    std::vector<uint8_t> q(qtype_row_bytes(m.act_type, m.cols));
    rounded.resize(m.cols);
    tr.quantize(x, q.data(), static_cast<int64_t>(m.cols));
    tr.dequantize(q.data(), rounded.data(), static_cast<int64_t>(m.cols));
    x = rounded.data();
  }
  for (size_t r = 0; r < m.rows; ++r) y[r] = static_cast<float>(dot(&m.w[r * m.cols], x, m.cols));
}

void RefModel::apply_rope(float* head, int pos) const {
  const uint32_t half = cfg_.rope_dim / 2;
  const bool norm = rope_style_ == RopeStyle::kNorm;
  // Dimensions at and beyond rope_dim are left unrotated (partial RoPE).
  for (uint32_t i = 0; i < half; ++i) {
    const double theta = pos * inv_freq_[i];
    const double cs = std::cos(theta), sn = std::sin(theta);
    float* a = head + (norm ? 2 * i : i);
    float* b = head + (norm ? 2 * i + 1 : i + half);
    const double x0 = *a, x1 = *b;
    *a = static_cast<float>(x0 * cs - x1 * sn);
    *b = static_cast<float>(x0 * sn + x1 * cs);
  }
}

std::vector<float> RefModel::step(Cache& cache, int32_t token, ForwardStats* stats) const {
  const ArchConfig& c = cfg_;
  SUSTAIN_CHECK(token >= 0 && static_cast<uint32_t>(token) < c.n_vocab);
  const size_t d = c.n_embd, ff = c.n_ff, hd = c.head_dim_k;
  const size_t q_dim = c.q_dim(), kv_dim = c.k_dim();
  const int pos = cache.n_pos;

  std::vector<float> x(tok_embd_.begin() + token * d, tok_embd_.begin() + (token + 1) * d);
  observe(stats, &ForwardStats::max_abs_residual, x.data(), d);

  std::vector<float> xn(d), q(q_dim), k(kv_dim), v(kv_dim), attn(q_dim), proj(d);
  std::vector<float> gate(ff), up(ff), qh(hd);
  std::vector<double> prob(pos + 1);
  const uint32_t group = c.n_head / c.n_head_kv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));

  for (uint32_t il = 0; il < c.n_layer; ++il) {
    const Layer& l = layers_[il];

    // Attention block.
    rms_norm(x.data(), l.attn_norm.data(), d, c.rms_eps, xn.data());
    matvec(l.wq, xn.data(), q.data());
    matvec(l.wk, xn.data(), k.data());
    matvec(l.wv, xn.data(), v.data());
    if (c.has_qkv_bias()) {
      add_bias(l.bq, q.data());
      add_bias(l.bk, k.data());
      add_bias(l.bv, v.data());
    }
    if (c.has_qk_norm()) {  // qwen3: RMS norm per head, before RoPE
      for (uint32_t h = 0; h < c.n_head; ++h)
        rms_norm(&q[h * hd], l.q_norm.data(), hd, c.rms_eps, &q[h * hd]);
      for (uint32_t h = 0; h < c.n_head_kv; ++h)
        rms_norm(&k[h * hd], l.k_norm.data(), hd, c.rms_eps, &k[h * hd]);
    }
    for (uint32_t h = 0; h < c.n_head; ++h) apply_rope(&q[h * hd], pos);
    for (uint32_t h = 0; h < c.n_head_kv; ++h) apply_rope(&k[h * hd], pos);
    observe(stats, nullptr, q.data(), q_dim);
    observe(stats, nullptr, k.data(), kv_dim);
    observe(stats, nullptr, v.data(), kv_dim);
    if (opt_.kv_f16) {
      for (float& e : k) e = round_f16(e);
      for (float& e : v) e = round_f16(e);
    }
    cache.k[il].insert(cache.k[il].end(), k.begin(), k.end());
    cache.v[il].insert(cache.v[il].end(), v.begin(), v.end());

    const float* ks = cache.k[il].data();
    const float* vs = cache.v[il].data();
    for (uint32_t h = 0; h < c.n_head; ++h) {
      const size_t kvh = h / group;  // GQA: consecutive query heads share a KV head
      for (size_t i = 0; i < hd; ++i)
        qh[i] = opt_.kv_f16 ? round_f16(q[h * hd + i]) : q[h * hd + i];
      double max_s = -INFINITY;
      for (int t = 0; t <= pos; ++t) {
        prob[t] = dot(qh.data(), ks + t * kv_dim + kvh * hd, hd) * scale;
        const float sf = static_cast<float>(prob[t]);
        observe(stats, &ForwardStats::max_abs_attn_score, &sf, 1);
        max_s = std::max(max_s, prob[t]);
      }
      double sum = 0;
      for (int t = 0; t <= pos; ++t) sum += (prob[t] = std::exp(prob[t] - max_s));
      for (int t = 0; t <= pos; ++t) {
        prob[t] /= sum;
        if (opt_.kv_f16) prob[t] = round_f16(static_cast<float>(prob[t]));
      }
      for (size_t i = 0; i < hd; ++i) {
        double acc = 0;
        for (int t = 0; t <= pos; ++t) acc += prob[t] * vs[t * kv_dim + kvh * hd + i];
        attn[h * hd + i] = static_cast<float>(acc);
      }
    }
    observe(stats, nullptr, attn.data(), q_dim);
    matvec(l.wo, attn.data(), proj.data());
    for (size_t i = 0; i < d; ++i) x[i] += proj[i];

    // SwiGLU feed-forward block.
    rms_norm(x.data(), l.ffn_norm.data(), d, c.rms_eps, xn.data());
    matvec(l.w_gate, xn.data(), gate.data());
    matvec(l.w_up, xn.data(), up.data());
    observe(stats, &ForwardStats::max_abs_ffn, gate.data(), ff);
    observe(stats, &ForwardStats::max_abs_ffn, up.data(), ff);
    for (size_t i = 0; i < ff; ++i) gate[i] = silu(gate[i]) * up[i];
    observe(stats, &ForwardStats::max_abs_ffn, gate.data(), ff);
    matvec(l.w_down, gate.data(), proj.data());
    for (size_t i = 0; i < d; ++i) x[i] += proj[i];
    observe(stats, &ForwardStats::max_abs_residual, x.data(), d);
  }
  ++cache.n_pos;

  rms_norm(x.data(), output_norm_.data(), d, c.rms_eps, xn.data());
  std::vector<float> logits(c.n_vocab);
  matvec(output_, xn.data(), logits.data());
  observe(stats, &ForwardStats::max_abs_logit, logits.data(), logits.size());
  return logits;
}

std::vector<std::vector<float>> RefModel::forward(const std::vector<int32_t>& tokens,
                                                  ForwardStats* stats) const {
  Cache cache;
  cache.k.resize(cfg_.n_layer);
  cache.v.resize(cfg_.n_layer);
  std::vector<std::vector<float>> out;
  out.reserve(tokens.size());
  for (int32_t t : tokens) out.push_back(step(cache, t, stats));
  return out;
}

std::vector<int32_t> RefModel::generate_greedy(const std::vector<int32_t>& prompt, int n_gen,
                                               ForwardStats* stats) const {
  SUSTAIN_CHECK(!prompt.empty());
  Cache cache;
  cache.k.resize(cfg_.n_layer);
  cache.v.resize(cfg_.n_layer);
  std::vector<float> logits;
  for (int32_t t : prompt) logits = step(cache, t, stats);
  std::vector<int32_t> out;
  for (int i = 0; i < n_gen; ++i) {
    // First maximum on ties, like llama.cpp's greedy sampler.
    const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
    out.push_back(static_cast<int32_t>(best));
    if (i + 1 < n_gen) logits = step(cache, out.back(), stats);
  }
  return out;
}

}  // namespace sustain::test
