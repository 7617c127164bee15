#include "tools/needle_retriever.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "gguf/gguf.h"
#include "model/arch_config.h"
#include "model/weights.h"
#include "tools/synth_vocab.h"

namespace sustain::tools {
namespace {

constexpr int kEmbd = 512;
constexpr int kHead = 256;
constexpr int kVocab = 512;
constexpr int kCodes = 64;  // keys, values, filler classes, P and A slots are 64 wide
constexpr int kKeyTok = 300, kValTok = 400;
constexpr int kConstDim = 0, kKeyDim = 1, kValDim = 65, kFillDim = 129, kPrevDim = 193,
              kAnsDim = 257;
constexpr int kPosPairs = 64;         // layer 0 may use pairs 0..63 (the fastest-turning)
constexpr int kInductionHead0 = 192;  // layer 1 uses head dims 192..255: the slowest 32 pairs
constexpr double kRopeBase = 1e10;
constexpr double kOutputGain = 10.0;

// Row-major [rows][cols] f32 matrix in PyTorch order (W[out, in]).
struct Mat {
  int rows = 0, cols = 0;
  std::vector<double> v;
  Mat(int r, int c) : rows(r), cols(c), v(static_cast<size_t>(r) * c, 0.0) {}
  double& at(int r, int c) { return v[static_cast<size_t>(r) * cols + c]; }
  double at(int r, int c) const { return v[static_cast<size_t>(r) * cols + c]; }
};

Mat matmul(const Mat& a, const Mat& b) {
  Mat c(a.rows, b.cols);
  for (int i = 0; i < a.rows; ++i)
    for (int k = 0; k < a.cols; ++k) {
      const double x = a.at(i, k);
      if (x == 0.0) continue;
      for (int j = 0; j < b.cols; ++j) c.at(i, j) += x * b.at(k, j);
    }
  return c;
}

Mat transpose(const Mat& a) {
  Mat t(a.cols, a.rows);
  for (int i = 0; i < a.rows; ++i)
    for (int j = 0; j < a.cols; ++j) t.at(j, i) = a.at(i, j);
  return t;
}

// SplitMix64 + Box-Muller: portable (std::normal_distribution differs
// between standard libraries), so a seed gives the same file everywhere.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
  double normal() {
    const double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }
};

void normalize(double* x, int n) {
  double s = 0.0;
  for (int i = 0; i < n; ++i) s += x[i] * x[i];
  s = std::sqrt(s);
  for (int i = 0; i < n; ++i) x[i] /= s;
}

// A random n×n orthogonal matrix: Gram-Schmidt (twice, for accuracy) on Gaussian rows.
Mat random_orthogonal(int n, Rng& g) {
  Mat m(n, n);
  for (auto& x : m.v) x = g.normal();
  for (int i = 0; i < n; ++i) {
    double* r = &m.v[static_cast<size_t>(i) * n];
    for (int pass = 0; pass < 2; ++pass)
      for (int j = 0; j < i; ++j) {
        const double* q = &m.v[static_cast<size_t>(j) * n];
        double d = 0.0;
        for (int k = 0; k < n; ++k) d += r[k] * q[k];
        for (int k = 0; k < n; ++k) r[k] -= d * q[k];
      }
    normalize(r, n);
  }
  return m;
}

// kCodes unit codes of width kCodes: one-hot, or dense random ones whose
// pairwise |cos| stays at or below max_cos (redrawn until it does).
Expected<Mat> key_codes(bool dense, double max_cos, Rng& g, double* worst) {
  Mat c(kCodes, kCodes);
  *worst = 0.0;
  if (!dense) {
    for (int i = 0; i < kCodes; ++i) c.at(i, i) = 1.0;
    return c;
  }
  constexpr int kTries = 10000;
  for (int attempt = 0; attempt < kTries; ++attempt) {
    for (auto& x : c.v) x = g.normal();
    for (int i = 0; i < kCodes; ++i) normalize(&c.v[static_cast<size_t>(i) * kCodes], kCodes);
    double w = 0.0;
    for (int i = 0; i < kCodes; ++i)
      for (int j = 0; j < i; ++j) {
        double d = 0.0;
        for (int k = 0; k < kCodes; ++k) d += c.at(i, k) * c.at(j, k);
        w = std::max(w, std::abs(d));
      }
    if (w <= max_cos) {
      *worst = w;
      return c;
    }
  }
  return error(Code::kInvalidArgument,
               "needle-retriever: no set of {} dense key codes with pairwise |cos| <= {} found in "
               "{} draws (raise --max-code-cos; random codes reach about 0.45)",
               kCodes, max_cos, kTries);
}

ArchConfig retriever_arch() {
  ArchConfig c;
  c.arch = Arch::kLlama;
  c.name = "sustain needle retriever (hand-built)";
  c.n_layer = 2;
  c.n_embd = kEmbd;
  c.n_ff = 32;  // all-zero FFN; llama.cpp wants one
  c.n_head = c.n_head_kv = 1;
  c.head_dim_k = c.head_dim_v = c.rope_dim = kHead;  // llama.cpp's llama needs rope dim = head dim
  c.n_vocab = kVocab;
  c.n_ctx_train = 65536;
  c.rope_freq_base = static_cast<float>(kRopeBase);
  c.rms_eps = 1e-5f;
  c.tied_output = false;
  return c;
}

double rope_freq(int pair) { return std::pow(kRopeBase, -2.0 * pair / kHead); }

}  // namespace

Expected<RetrieverOptions> retriever_variant(const std::string& name) {
  RetrieverOptions o;
  if (name == "default" || name.empty()) return o;
  if (name == "control") {
    o.pos_gap = 1e-4;
    return o;
  }
  if (name == "dense") {
    o.dense = true;
    return o;
  }
  if (name.rfind("cut", 0) == 0 && name.size() > 3) {
    const std::string num = name.substr(3);
    char* end = nullptr;
    const double f = std::strtod(num.c_str(), &end);
    if (end && *end == '\0' && f > 0.0 && f <= 1.0) {
      o.min_freq = f;
      return o;
    }
  }
  return error(Code::kInvalidArgument,
               "unknown needle-retriever variant '{}' (known: default, control, dense, cut<F> "
               "with 0 < F <= 1, e.g. cut0.1)",
               name);
}

Expected<RetrieverInfo> write_needle_retriever(const RetrieverOptions& opt,
                                               const std::string& out_path) {
  if (!(opt.pos_gap > 0.0) || !(opt.match_gap > 0.0) || !std::isfinite(opt.pos_gap) ||
      !std::isfinite(opt.match_gap))
    return error(Code::kInvalidArgument,
                 "needle-retriever: the gaps must be positive and finite (pos gap {}, match gap {})",
                 opt.pos_gap, opt.match_gap);
  if (!(opt.min_freq >= 0.0 && opt.min_freq <= 1.0))
    return error(Code::kInvalidArgument, "needle-retriever: min frequency {} is outside [0, 1]",
                 opt.min_freq);
  if (!(opt.background >= 0.0 && opt.background < 1.0))
    return error(Code::kInvalidArgument, "needle-retriever: background {} is outside [0, 1)",
                 opt.background);
  if (!(opt.max_code_cos > 0.0 && opt.max_code_cos < 1.0))
    return error(Code::kInvalidArgument, "needle-retriever: max code cos {} is outside (0, 1)",
                 opt.max_code_cos);

  const ArchConfig cfg = retriever_arch();
  RetrieverInfo info;
  Rng g{opt.seed * 0x9e3779b97f4a7c15ull + 1};

  // Layer 0's pairs and amplitude. After RMSNorm a residual holding two
  // unit entries (constant + identity) is scaled by sqrt(512/2) = 16, and
  // attention divides by sqrt(head) = 16, so the score between i and j is
  // 16·a0²·Σ_m cos(ω_m (i−j−1)); its drop from offset 1 to offsets 0 and 2 is
  // 16·a0²·Σ_m (1 − cos ω_m), which pos_gap fixes.
  std::vector<int> pairs;
  double gsum = 0.0;
  for (int m = 0; m < kPosPairs; ++m)
    if (rope_freq(m) >= opt.min_freq) {
      pairs.push_back(m);
      gsum += 1.0 - std::cos(rope_freq(m));
    }
  if (pairs.empty())
    return error(Code::kInvalidArgument, "needle-retriever: no RoPE pair has frequency >= {}",
                 opt.min_freq);
  const double norm2 = std::sqrt(kEmbd / 2.0), norm3 = std::sqrt(kEmbd / 3.0);
  const double a0 = std::sqrt(opt.pos_gap * std::sqrt(double(kHead)) / (norm2 * norm2 * gsum));
  // Layer 1: the query (constant + key identity: 2 entries) meets the value
  // token after the needle key (constant + value identity + P: 3 entries).
  const double a1 = std::sqrt(opt.match_gap * std::sqrt(double(kHead)) / (norm2 * norm3));
  info.pos_pairs = static_cast<int>(pairs.size());
  info.pos_scale = a0;
  info.match_scale = a1;

  double worst_cos = 0.0;
  SUSTAIN_ASSIGN_OR_RETURN(Mat kc, key_codes(opt.dense, opt.max_code_cos, g, &worst_cos));
  Mat vc(kCodes, kCodes);  // value codes: orthonormal, so the output decodes them exactly
  if (opt.dense) {
    vc = random_orthogonal(kCodes, g);
  } else {
    for (int i = 0; i < kCodes; ++i) vc.at(i, i) = 1.0;
  }

  // The model in the "plain" residual basis.
  Mat embd(kVocab, kEmbd);
  for (int t = 0; t < kVocab; ++t) {
    embd.at(t, kConstDim) = 1.0;
    if (t >= kKeyTok && t < kKeyTok + kCodes) {
      for (int j = 0; j < kCodes; ++j) embd.at(t, kKeyDim + j) = kc.at(t - kKeyTok, j);
    } else if (t >= kValTok && t < kValTok + kCodes) {
      for (int j = 0; j < kCodes; ++j) embd.at(t, kValDim + j) = vc.at(t - kValTok, j);
    } else {
      embd.at(t, kFillDim + t % kCodes) = 1.0;
    }
  }
  Mat q0(kHead, kEmbd), k0(kHead, kEmbd), v0(kHead, kEmbd), o0(kEmbd, kHead);
  for (int m : pairs) {
    const double w = rope_freq(m);
    q0.at(2 * m, kConstDim) = a0;
    // Phase-shifted by ω_m: RoPE turns q by ω·i and k by ω·j, so q·k ∝
    // cos(ω (i − j) − ω), largest at i − j = 1.
    k0.at(2 * m, kConstDim) = a0 * std::cos(w);
    k0.at(2 * m + 1, kConstDim) = a0 * std::sin(w);
  }
  for (int j = 0; j < kCodes; ++j) {
    v0.at(j, kKeyDim + j) = 1.0;  // carries the key's code (zero for non-keys)
    o0.at(kPrevDim + j, j) = 1.0;
  }
  Mat q1(kHead, kEmbd), k1(kHead, kEmbd), v1(kHead, kEmbd), o1(kEmbd, kHead);
  // Dense: the induction dims are mixed by an orthogonal M (q·k unchanged).
  Mat mix(kCodes, kCodes);
  if (opt.dense) {
    mix = random_orthogonal(kCodes, g);
  } else {
    for (int i = 0; i < kCodes; ++i) mix.at(i, i) = 1.0;
  }
  for (int r = 0; r < kCodes; ++r)
    for (int j = 0; j < kCodes; ++j) {
      q1.at(kInductionHead0 + r, kKeyDim + j) = a1 * mix.at(r, j);
      k1.at(kInductionHead0 + r, kPrevDim + j) = a1 * mix.at(r, j);
    }
  for (int j = 0; j < kCodes; ++j) {
    v1.at(j, kValDim + j) = 1.0;
    o1.at(kAnsDim + j, j) = 1.0;
  }
  Mat out(kVocab, kEmbd);
  for (int v = 0; v < kCodes; ++v)
    for (int j = 0; j < kCodes; ++j) out.at(kValTok + v, kAnsDim + j) = kOutputGain * vc.at(v, j);

  if (opt.dense) {
    // Background: every token's K gets a random direction of norm
    // background × (the norm of K's signal), read from its identity dims.
    auto add_background = [&](Mat& k, double signal_norm) {
      for (int src = kKeyDim; src < kFillDim + kCodes; ++src) {
        std::vector<double> d(kHead);
        for (auto& x : d) x = g.normal();
        normalize(d.data(), kHead);
        for (int r = 0; r < kHead; ++r) k.at(r, src) += opt.background * signal_norm * d[r];
      }
    };
    add_background(k0, a0 * std::sqrt(double(pairs.size())));
    add_background(k1, a1);
    // Rotate the residual stream: x' = R x. Readers W become W Rᵀ, writers R W.
    const Mat rot = random_orthogonal(kEmbd, g);
    const Mat rot_t = transpose(rot);
    embd = matmul(embd, rot_t);  // rows are tokens: e' = R e  ⇔  E' = E Rᵀ
    for (Mat* m : {&q0, &k0, &v0, &q1, &k1, &v1, &out}) *m = matmul(*m, rot_t);
    o0 = matmul(rot, o0);
    o1 = matmul(rot, o1);
  }

  gguf::Writer w;
  arch_config_to_gguf(cfg, w);
  w.set_str("general.type", "model");
  w.set_str("general.source",
            fmt::format("sustain synth --preset {} (pos gap {}, match gap {}, min freq {}{})",
                        kNeedleRetrieverPreset, opt.pos_gap, opt.match_gap, opt.min_freq,
                        opt.dense ? fmt::format(", dense: background {}, max code cos {}, seed {}",
                                                opt.background, opt.max_code_cos, opt.seed)
                                  : ""));
  w.set_str("general.description",
            "Hand-built needle retriever: after a query key (300-363) the top-1 token is the value "
            "(400-463) that followed that key in the context.");
  w.set_u32("general.file_type", 0);  // all F32
  if (opt.dense) w.set_f32("sustain.retriever.max_code_cos", static_cast<float>(worst_cos));
  SynthVocabSpec vs;
  vs.model = "llama";
  vs.n_vocab = kVocab;
  vs.bos_id = 1;
  vs.eos_id = 2;
  vs.unk_id = 0;
  vs.add_bos = true;
  SUSTAIN_TRY(write_synth_vocab(w, vs));

  const auto table = weight_table(cfg);
  std::vector<std::vector<float>> data(table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    const WeightSpec& s = table[i];
    const Mat* src = nullptr;
    switch (s.role) {
      case TensorRole::kTokenEmbd: src = &embd; break;
      case TensorRole::kOutput: src = &out; break;
      case TensorRole::kAttnQ: src = s.layer == 0 ? &q0 : &q1; break;
      case TensorRole::kAttnK: src = s.layer == 0 ? &k0 : &k1; break;
      case TensorRole::kAttnV: src = s.layer == 0 ? &v0 : &v1; break;
      case TensorRole::kAttnOutput: src = s.layer == 0 ? &o0 : &o1; break;
      default: break;
    }
    auto& d = data[i];
    d.assign(s.n_elements(), 0.0f);
    if (src) {
      if (s.shape.size() != 2 || src->rows != s.shape[0] || src->cols != s.shape[1])
        return error(Code::kInternal, "needle-retriever: {} has shape [{}] but was built {}x{}",
                     s.name, fmt::join(s.shape, ", "), src->rows, src->cols);
      for (size_t k = 0; k < d.size(); ++k) d[k] = static_cast<float>(src->v[k]);
    } else if (s.role == TensorRole::kAttnNorm || s.role == TensorRole::kFfnNorm ||
               s.role == TensorRole::kOutputNorm) {
      std::fill(d.begin(), d.end(), 1.0f);  // unit gains keep RMSNorm rotation invariant
    } else if (s.role != TensorRole::kFfnGate && s.role != TensorRole::kFfnUp &&
               s.role != TensorRole::kFfnDown) {
      return error(Code::kInternal, "needle-retriever: no construction for tensor {}", s.name);
    }
    SUSTAIN_TRY(w.add_tensor(s.name, QType::F32, s.shape, d.data()));
  }
  SUSTAIN_TRY(w.write(out_path));
  std::error_code ec;
  info.file_bytes = std::filesystem::file_size(out_path, ec);
  return info;
}

}  // namespace sustain::tools
