#include "tools/quant_mix.h"

#include <algorithm>
#include <cctype>

namespace sustain::tools {

const std::vector<FileTypeInfo>& file_types() {
  static const std::vector<FileTypeInfo> kTypes = {
      {FileType::kF32, "F32", QType::F32, 0, "32-bit float, no quantization"},
      {FileType::kF16, "F16", QType::F16, 1, "16-bit float"},
      {FileType::kBF16, "BF16", QType::BF16, 32, "bfloat16"},
      {FileType::kQ8_0, "Q8_0", QType::Q8_0, 7, "8-bit, 32-element blocks (8.5 bits/weight)"},
      {FileType::kQ4_0, "Q4_0", QType::Q4_0, 2, "4-bit, 32-element blocks (4.5 bits/weight)"},
      {FileType::kQ4_K_M, "Q4_K_M", QType::Q4_K, 15,
       "4-bit K-quant, Q6_K for output and some attn_v / ffn_down layers"},
      {FileType::kQ4_K_S, "Q4_K_S", QType::Q4_K, 14,
       "4-bit K-quant, Q5_K for the first attn_v / ffn_down layers"},
      {FileType::kQ5_K_M, "Q5_K_M", QType::Q5_K, 17,
       "5-bit K-quant, Q6_K for output and some attn_v / ffn_down layers"},
      {FileType::kQ6_K, "Q6_K", QType::Q6_K, 18, "6-bit K-quant (6.56 bits/weight)"},
  };
  return kTypes;
}

std::optional<FileType> file_type_from_name(std::string_view name) {
  for (const auto& t : file_types()) {
    if (t.name.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < name.size(); ++i)
      eq &= std::toupper(static_cast<unsigned char>(name[i])) == t.name[i];
    if (eq) return t.type;
  }
  return std::nullopt;
}

const FileTypeInfo& file_type_info(FileType t) {
  for (const auto& i : file_types())
    if (i.type == t) return i;
  return file_types().front();
}

std::string file_type_names() {
  std::string s;
  for (const auto& t : file_types()) {
    if (!s.empty()) s += ", ";
    s += t.name;
  }
  return s;
}

namespace {

bool is_quantized(QType t) { return qtype_traits(t).block_elems > 1; }

// llama.cpp's "more bits" layers: the first and last eighth, and every third in between.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// Rows whose length is not a multiple of the block size cannot use a format:
// fall back to a 32-element format of similar size, or F16 when even that fails.
// llama.cpp matches tensor names by substring, so a mixture of experts'
// stacked ffn_down_exps (one per layer) follows the ffn_down rules.
bool is_ffn_down(TensorRole r) {
  return r == TensorRole::kFfnDown || r == TensorRole::kFfnDownExps;
}

QType fit_to_row(QType t, int64_t row) {
  if (row % qtype_traits(t).block_elems == 0) return t;
  QType fb = QType::F16;
  switch (t) {
    case QType::Q2_K:
    case QType::Q3_K: fb = QType::Q4_0; break;
    case QType::Q4_K: fb = QType::Q5_0; break;
    case QType::Q5_K: fb = QType::Q5_1; break;
    case QType::Q6_K: fb = QType::Q8_0; break;
    default: break;
  }
  if (row % qtype_traits(fb).block_elems != 0) fb = QType::F16;
  return fb;
}

}  // namespace

std::vector<QType> plan_tensor_types(const ArchConfig& cfg, const std::vector<WeightSpec>& table,
                                     FileType ft) {
  const QType base = file_type_info(ft).base;
  // llama.cpp treats an 80-layer Llama as its 70B size class, which gets Q5_K attn_v.
  const bool is_70b = cfg.arch == Arch::kLlama && cfg.n_layer == 80;
  int n_attn_v = 0, n_ffn_down = 0;
  for (const auto& w : table) {
    // llama.cpp counts fused QKV projections (qwen35's DeltaNet attn_qkv)
    // among the attn_v tensors whose first and last eighths get more bits.
    n_attn_v += w.role == TensorRole::kAttnV || w.role == TensorRole::kSsmQkv;
    n_ffn_down += is_ffn_down(w.role);
  }
  int i_attn_v = 0, i_ffn_down = 0;
  std::vector<QType> out;
  out.reserve(table.size());
  for (const auto& w : table) {
    // Only matrices are converted; norms, biases and rope factors stay F32,
    // and so do a mixture of experts' router and DeltaNet's conv taps, as
    // llama.cpp leaves them.
    if (!w.is_matrix() || w.role == TensorRole::kFfnGateInp || w.role == TensorRole::kSsmConv1d) {
      out.push_back(QType::F32);
      continue;
    }
    const int64_t row = w.shape.back();
    QType t = base;
    if (is_quantized(base)) {
      const bool output_like = w.role == TensorRole::kOutput ||
                               (cfg.tied_output && w.role == TensorRole::kTokenEmbd);
      if (output_like) {
        if (row % qtype_traits(base).block_elems != 0) {
          t = QType::Q8_0;
        } else if (base != QType::Q8_0) {
          t = QType::Q6_K;
        }
      } else if (w.role == TensorRole::kAttnV) {
        if ((ft == FileType::kQ4_K_M || ft == FileType::kQ5_K_M) &&
            use_more_bits(i_attn_v, n_attn_v)) {
          t = QType::Q6_K;
        } else if (ft == FileType::kQ4_K_S && i_attn_v < 4) {
          t = QType::Q5_K;
        }
        if (is_70b && (t == QType::Q3_K || t == QType::Q4_K)) t = QType::Q5_K;
        ++i_attn_v;
      } else if (w.role == TensorRole::kSsmQkv) {
        if (ft == FileType::kQ4_K_M) {
          t = QType::Q5_K;
        } else if (ft == FileType::kQ5_K_M) {
          t = QType::Q6_K;
        }
      } else if (is_ffn_down(w.role)) {
        if ((ft == FileType::kQ4_K_M || ft == FileType::kQ5_K_M) &&
            use_more_bits(i_ffn_down, n_ffn_down)) {
          t = QType::Q6_K;
        } else if (ft == FileType::kQ4_K_S && i_ffn_down < n_ffn_down / 8) {
          t = QType::Q5_K;
        }
        ++i_ffn_down;
      }
    }
    out.push_back(fit_to_row(t, row));
  }
  return out;
}

}  // namespace sustain::tools
