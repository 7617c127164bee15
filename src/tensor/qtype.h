// QType: every tensor format sustain knows, in one traits table (qtype.cc).
// The numeric values are GGUF's type ids, so a file's type field maps 1:1.
// FP8_E4M3 is not a GGUF type: it exists for the KV cache and gets an id far
// above GGUF's range that is never written to a file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace sustain {

enum class QType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  FP8_E4M3 = 1000,  // sustain-only (KV cache); never in a GGUF file
};

// Converts `n` elements between float and a format. `n` is a multiple of the
// format's block size. Scalar reference implementations (the oracles that
// SIMD kernels are tested against).
using QuantizeFn = void (*)(const float* src, void* dst, int64_t n);
using DequantizeFn = void (*)(const void* src, float* dst, int64_t n);

struct QTypeTraits {
  QType type;
  std::string_view name;     // GGUF's spelling: "Q4_K", "BF16", ...
  uint32_t block_elems;      // elements per block (1 for plain types)
  uint32_t block_bytes;      // bytes per block
  bool in_gguf;              // may appear in a GGUF file
  QuantizeFn quantize;       // nullptr where sustain cannot write the format
  DequantizeFn dequantize;   // nullptr where sustain cannot read the values
};

// nullptr for an id that names no known format.
const QTypeTraits* find_qtype(uint32_t id);
const QTypeTraits& qtype_traits(QType t);
std::optional<QType> qtype_from_name(std::string_view name);  // case-insensitive
inline std::string_view qtype_name(QType t) { return qtype_traits(t).name; }

// All known formats, in id order.
struct QTypeList {
  const QTypeTraits* begin_;
  const QTypeTraits* end_;
  const QTypeTraits* begin() const { return begin_; }
  const QTypeTraits* end() const { return end_; }
};
QTypeList all_qtypes();

// Bytes of `n` elements; `n` must be a multiple of the block size (checked by
// callers that handle untrusted shapes — see gguf/).
inline uint64_t qtype_row_bytes(QType t, uint64_t n) {
  const auto& tr = qtype_traits(t);
  return n / tr.block_elems * tr.block_bytes;
}

}  // namespace sustain
