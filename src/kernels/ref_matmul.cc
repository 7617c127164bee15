// Reference matmul: activation quantization and per-format dot products with
// llama.cpp's arithmetic (see ref.h). Integer sums per block are exact; the
// float accumulation follows ggml's generic vec_dot order.
#include <vector>

#include "base/status.h"
#include "kernels/block_util.h"
#include "kernels/ref.h"
#include "tensor/fp16.h"
#include "tensor/quant.h"
#include "tensor/row_tiles.h"

namespace sustain::kernels::ref {
namespace {

float dot_q4_0(const void* vw, const void* va, int64_t n) {
  const auto* w = static_cast<const BlockQ4_0*>(vw);
  const auto* a = static_cast<const BlockQ8_0*>(va);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int isum = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      isum += ((w[b].qs[j] & 0xF) - 8) * a[b].qs[j];
      isum += ((w[b].qs[j] >> 4) - 8) * a[b].qs[j + kQK / 2];
    }
    sum += static_cast<float>(isum) * f16_to_f32(w[b].d) * f16_to_f32(a[b].d);
  }
  return sum;
}

float dot_q4_1(const void* vw, const void* va, int64_t n) {
  const auto* w = static_cast<const BlockQ4_1*>(vw);
  const auto* a = static_cast<const BlockQ8_1*>(va);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int isum = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      isum += (w[b].qs[j] & 0xF) * a[b].qs[j];
      isum += (w[b].qs[j] >> 4) * a[b].qs[j + kQK / 2];
    }
    // The min term uses the activation block's stored s = d * sum(q).
    sum += f16_to_f32(w[b].d) * f16_to_f32(a[b].d) * static_cast<float>(isum) +
           f16_to_f32(w[b].m) * f16_to_f32(a[b].s);
  }
  return sum;
}

// Element j of a Q5 block: 4 low bits from qs, bit 4 from bit j of qh.
inline int q5_value(const uint8_t* qs, uint32_t qh, int j) {
  const int lo = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
  return lo | static_cast<int>(((qh >> j) & 1) << 4);
}

float dot_q5_0(const void* vw, const void* va, int64_t n) {
  const auto* w = static_cast<const BlockQ5_0*>(vw);
  const auto* a = static_cast<const BlockQ8_0*>(va);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const uint32_t qh = load_u32(w[b].qh);
    int isum = 0;
    for (int j = 0; j < kQK; ++j) isum += (q5_value(w[b].qs, qh, j) - 16) * a[b].qs[j];
    sum += f16_to_f32(w[b].d) * f16_to_f32(a[b].d) * static_cast<float>(isum);
  }
  return sum;
}

float dot_q5_1(const void* vw, const void* va, int64_t n) {
  const auto* w = static_cast<const BlockQ5_1*>(vw);
  const auto* a = static_cast<const BlockQ8_1*>(va);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const uint32_t qh = load_u32(w[b].qh);
    int isum = 0;
    for (int j = 0; j < kQK; ++j) isum += q5_value(w[b].qs, qh, j) * a[b].qs[j];
    sum += f16_to_f32(w[b].d) * f16_to_f32(a[b].d) * static_cast<float>(isum) +
           f16_to_f32(w[b].m) * f16_to_f32(a[b].s);
  }
  return sum;
}

float dot_q8_0(const void* vw, const void* va, int64_t n) {
  const auto* w = static_cast<const BlockQ8_0*>(vw);
  const auto* a = static_cast<const BlockQ8_0*>(va);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int isum = 0;
    for (int j = 0; j < kQK; ++j) isum += w[b].qs[j] * a[b].qs[j];
    sum += static_cast<float>(isum) * (f16_to_f32(w[b].d) * f16_to_f32(a[b].d));
  }
  return sum;
}

// K-quants: per super-block an exact integer sum of scale * (q . a) over the
// sub-blocks, and (for the formats with mins) sum of min * bsum; the float
// result is d * isum - dmin * summs with d, dmin already times the
// activation scale.
float dot_q2_k(const void* vw, const void* va, int64_t n) {
  const auto* w = static_cast<const BlockQ2_K*>(vw);
  const auto* a = static_cast<const BlockQ8_K*>(va);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int summs = 0, isum = 0;
    for (int j = 0; j < 16; ++j) summs += a[b].bsums[j] * (w[b].scales[j] >> 4);
    for (int e = 0; e < kQK_K; ++e) {
      // Element e = 128h + 32s + l sits in bits 2s..2s+1 of qs[32h + l].
      const int h = e / 128, s = (e % 128) / 32, l = e % 32;
      const int q = (w[b].qs[32 * h + l] >> (2 * s)) & 3;
      isum += (w[b].scales[e / 16] & 0xF) * q * a[b].qs[e];
    }
    const float dall = a[b].d * f16_to_f32(w[b].d);
    const float dmin = a[b].d * f16_to_f32(w[b].dmin);
    sum += dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
  return sum;
}

float dot_q3_k(const void* vw, const void* va, int64_t n) {
  const auto* w = static_cast<const BlockQ3_K*>(vw);
  const auto* a = static_cast<const BlockQ8_K*>(va);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int8_t sc[16];
    unpack_q3k_scales(w[b].scales, sc);
    int isum = 0;
    for (int e = 0; e < kQK_K; ++e) {
      // Low two bits as Q2_K; the high bit (set = no offset) in bit (4h + s) of hmask[l].
      const int h = e / 128, s = (e % 128) / 32, l = e % 32;
      const int lo = (w[b].qs[32 * h + l] >> (2 * s)) & 3;
      const int q = lo - ((w[b].hmask[l] >> (4 * h + s)) & 1 ? 0 : 4);
      isum += sc[e / 16] * q * a[b].qs[e];
    }
    sum += f16_to_f32(w[b].d) * a[b].d * static_cast<float>(isum);
  }
  return sum;
}

float dot_q4_k(const void* vw, const void* va, int64_t n) {
  const auto* w = static_cast<const BlockQ4_K*>(vw);
  const auto* a = static_cast<const BlockQ8_K*>(va);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    uint8_t sc[8], mn[8];
    unpack_k4_scales(w[b].scales, sc, mn);
    int summs = 0, isum = 0;
    for (int j = 0; j < 16; ++j) summs += a[b].bsums[j] * mn[j / 2];
    for (int e = 0; e < kQK_K; ++e) {
      // Element e = 64g + 32h + l: nibble h of qs[32g + l].
      const int g = e / 64, h = (e % 64) / 32, l = e % 32;
      const int q = (w[b].qs[32 * g + l] >> (4 * h)) & 0xF;
      isum += sc[e / 32] * q * a[b].qs[e];
    }
    const float d = f16_to_f32(w[b].d) * a[b].d;
    const float dmin = f16_to_f32(w[b].dmin) * a[b].d;
    sum += d * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
  return sum;
}

float dot_q5_k(const void* vw, const void* va, int64_t n) {
  const auto* w = static_cast<const BlockQ5_K*>(vw);
  const auto* a = static_cast<const BlockQ8_K*>(va);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    uint8_t sc[8], mn[8];
    unpack_k4_scales(w[b].scales, sc, mn);
    int summs = 0, isum = 0;
    for (int j = 0; j < 16; ++j) summs += a[b].bsums[j] * mn[j / 2];
    for (int e = 0; e < kQK_K; ++e) {
      // As Q4_K, plus bit 4 from bit (e / 32) of qh[l].
      const int g = e / 64, h = (e % 64) / 32, l = e % 32;
      const int q =
          ((w[b].qs[32 * g + l] >> (4 * h)) & 0xF) | (((w[b].qh[l] >> (e / 32)) & 1) << 4);
      isum += sc[e / 32] * q * a[b].qs[e];
    }
    const float d = f16_to_f32(w[b].d) * a[b].d;
    const float dmin = f16_to_f32(w[b].dmin) * a[b].d;
    sum += d * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
  return sum;
}

float dot_q6_k(const void* vw, const void* va, int64_t n) {
  const auto* w = static_cast<const BlockQ6_K*>(vw);
  const auto* a = static_cast<const BlockQ8_K*>(va);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int isum = 0;
    for (int e = 0; e < kQK_K; ++e) {
      // Element e = 128h + 32s + l: low nibble (s even) or high nibble (s odd)
      // of ql[64h + 32(s&1) + l]; top two bits in bits 2s..2s+1 of qh[32h + l].
      const int h = e / 128, s = (e % 128) / 32, l = e % 32;
      const uint8_t ql = w[b].ql[64 * h + 32 * (s & 1) + l];
      const int lo = s < 2 ? (ql & 0xF) : (ql >> 4);
      const int q = (lo | (((w[b].qh[32 * h + l] >> (2 * s)) & 3) << 4)) - 32;
      isum += w[b].scales[e / 16] * q * a[b].qs[e];
    }
    sum += f16_to_f32(w[b].d) * a[b].d * static_cast<float>(isum);
  }
  return sum;
}

// Float formats: activations are f32 values already rounded to the weight's
// format; products of two f16 (or bf16) values are exact in f32, summed in double.
float dot_f32(const void* vw, const void* va, int64_t n) {
  const auto* w = static_cast<const float*>(vw);
  const auto* a = static_cast<const float*>(va);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(w[i]) * a[i];
  return static_cast<float>(sum);
}

float dot_f16(const void* vw, const void* va, int64_t n) {
  const auto* w = static_cast<const uint16_t*>(vw);
  const auto* a = static_cast<const float*>(va);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(f16_to_f32(w[i]) * a[i]);
  return static_cast<float>(sum);
}

float dot_bf16(const void* vw, const void* va, int64_t n) {
  const auto* w = static_cast<const uint16_t*>(vw);
  const auto* a = static_cast<const float*>(va);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(bf16_to_f32(w[i]) * a[i]);
  return static_cast<float>(sum);
}

// Formats llama.cpp has no integer dot for (Q8_1, Q8_K and FP8 as weights):
// dequantize with the format's reference and dot in double.
float dot_dequantized(QType t, const void* vw, const void* va, int64_t n) {
  std::vector<float> wf(static_cast<size_t>(n));
  qtype_traits(t).dequantize(vw, wf.data(), n);
  return dot_f32(wf.data(), va, n);
}

}  // namespace

size_t activation_row_bytes(QType w, int64_t n) {
  const QType a = activation_type(w);
  if (a == QType::F16 || a == QType::BF16) return static_cast<size_t>(n) * sizeof(float);
  return qtype_row_bytes(a, static_cast<uint64_t>(n));
}

void quantize_activation(QType w, const float* x, void* out, int64_t n) {
  const QType a = activation_type(w);
  auto* f = static_cast<float*>(out);
  switch (a) {
    case QType::F16:
      for (int64_t i = 0; i < n; ++i) f[i] = f16_to_f32(f32_to_f16(x[i]));
      return;
    case QType::BF16:
      for (int64_t i = 0; i < n; ++i) f[i] = bf16_to_f32(f32_to_bf16(x[i]));
      return;
    default:
      qtype_traits(a).quantize(x, out, n);
  }
}

float vec_dot(QType w, const void* w_row, const void* act_row, int64_t n) {
  switch (w) {
    case QType::F32:
      return dot_f32(w_row, act_row, n);
    case QType::F16:
      return dot_f16(w_row, act_row, n);
    case QType::BF16:
      return dot_bf16(w_row, act_row, n);
    case QType::Q4_0:
      return dot_q4_0(w_row, act_row, n);
    case QType::Q4_1:
      return dot_q4_1(w_row, act_row, n);
    case QType::Q5_0:
      return dot_q5_0(w_row, act_row, n);
    case QType::Q5_1:
      return dot_q5_1(w_row, act_row, n);
    case QType::Q8_0:
      return dot_q8_0(w_row, act_row, n);
    case QType::Q2_K:
      return dot_q2_k(w_row, act_row, n);
    case QType::Q3_K:
      return dot_q3_k(w_row, act_row, n);
    case QType::Q4_K:
      return dot_q4_k(w_row, act_row, n);
    case QType::Q5_K:
      return dot_q5_k(w_row, act_row, n);
    case QType::Q6_K:
      return dot_q6_k(w_row, act_row, n);
    default:
      SUSTAIN_CHECK(matmul_supported(w));
      return dot_dequantized(w, w_row, act_row, n);
  }
}

void matmul(const WeightView& w, const float* x, int64_t ldx, int64_t n_tokens, float* y,
            int64_t ldy) {
  SUSTAIN_CHECK(matmul_supported(w.type));
  std::vector<uint8_t> act(activation_row_bytes(w.type, w.n_in));
  const auto* wbytes = static_cast<const uint8_t*>(w.data);
  std::vector<uint8_t> row(w.tiled ? w.row_bytes : 0);  // a repacked row, back in row layout
  for (int64_t t = 0; t < n_tokens; ++t) {
    quantize_activation(w.type, x + t * ldx, act.data(), w.n_in);
    for (int64_t o = 0; o < w.n_out; ++o) {
      const uint8_t* r = wbytes + o * w.row_bytes;
      if (w.tiled) {
        from_row_tiles(w.type, w.data, w.n_in, o, row.data());
        r = row.data();
      }
      y[t * ldy + o] = vec_dot(w.type, r, act.data(), w.n_in);
    }
  }
}

}  // namespace sustain::kernels::ref
