#include "tensor/qtype.h"

#include <algorithm>
#include <cctype>
#include <iterator>

#include "base/status.h"
#include "tensor/quant.h"

namespace sustain {
namespace {

// One row per format, in id order. Formats with no quantize/dequantize here
// (the IQ and ternary families, integer types) are still listed so any GGUF
// file can be opened, sized and described.
constexpr QTypeTraits kTraits[] = {
    {QType::F32, "F32", 1, 4, true, quantize_f32, dequantize_f32},
    {QType::F16, "F16", 1, 2, true, quantize_f16, dequantize_f16},
    {QType::Q4_0, "Q4_0", 32, 18, true, quantize_q4_0, dequantize_q4_0},
    {QType::Q4_1, "Q4_1", 32, 20, true, quantize_q4_1, dequantize_q4_1},
    {QType::Q5_0, "Q5_0", 32, 22, true, quantize_q5_0, dequantize_q5_0},
    {QType::Q5_1, "Q5_1", 32, 24, true, quantize_q5_1, dequantize_q5_1},
    {QType::Q8_0, "Q8_0", 32, 34, true, quantize_q8_0, dequantize_q8_0},
    {QType::Q8_1, "Q8_1", 32, 36, true, quantize_q8_1, dequantize_q8_1},
    {QType::Q2_K, "Q2_K", 256, 84, true, quantize_q2_k, dequantize_q2_k},
    {QType::Q3_K, "Q3_K", 256, 110, true, quantize_q3_k, dequantize_q3_k},
    {QType::Q4_K, "Q4_K", 256, 144, true, quantize_q4_k, dequantize_q4_k},
    {QType::Q5_K, "Q5_K", 256, 176, true, quantize_q5_k, dequantize_q5_k},
    {QType::Q6_K, "Q6_K", 256, 210, true, quantize_q6_k, dequantize_q6_k},
    {QType::Q8_K, "Q8_K", 256, 292, true, quantize_q8_k, dequantize_q8_k},
    {QType::IQ2_XXS, "IQ2_XXS", 256, 66, true, nullptr, nullptr},
    {QType::IQ2_XS, "IQ2_XS", 256, 74, true, nullptr, nullptr},
    {QType::IQ3_XXS, "IQ3_XXS", 256, 98, true, nullptr, nullptr},
    {QType::IQ1_S, "IQ1_S", 256, 50, true, nullptr, nullptr},
    {QType::IQ4_NL, "IQ4_NL", 32, 18, true, nullptr, nullptr},
    {QType::IQ3_S, "IQ3_S", 256, 110, true, nullptr, nullptr},
    {QType::IQ2_S, "IQ2_S", 256, 82, true, nullptr, nullptr},
    {QType::IQ4_XS, "IQ4_XS", 256, 136, true, nullptr, nullptr},
    {QType::I8, "I8", 1, 1, true, nullptr, nullptr},
    {QType::I16, "I16", 1, 2, true, nullptr, nullptr},
    {QType::I32, "I32", 1, 4, true, nullptr, nullptr},
    {QType::I64, "I64", 1, 8, true, nullptr, nullptr},
    {QType::F64, "F64", 1, 8, true, nullptr, nullptr},
    {QType::IQ1_M, "IQ1_M", 256, 56, true, nullptr, nullptr},
    {QType::BF16, "BF16", 1, 2, true, quantize_bf16, dequantize_bf16},
    {QType::TQ1_0, "TQ1_0", 256, 54, true, nullptr, nullptr},
    {QType::TQ2_0, "TQ2_0", 256, 66, true, nullptr, nullptr},
    {QType::MXFP4, "MXFP4", 32, 17, true, nullptr, nullptr},
    {QType::FP8_E4M3, "FP8_E4M3", 1, 1, false, quantize_fp8_e4m3, dequantize_fp8_e4m3},
};

}  // namespace

const QTypeTraits* find_qtype(uint32_t id) {
  for (const auto& t : kTraits)
    if (static_cast<uint32_t>(t.type) == id) return &t;
  return nullptr;
}

const QTypeTraits& qtype_traits(QType t) {
  const QTypeTraits* tr = find_qtype(static_cast<uint32_t>(t));
  SUSTAIN_CHECK(tr != nullptr);
  return *tr;
}

std::optional<QType> qtype_from_name(std::string_view name) {
  auto eq = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() &&
           std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::toupper(static_cast<unsigned char>(x)) ==
                    std::toupper(static_cast<unsigned char>(y));
           });
  };
  for (const auto& t : kTraits)
    if (eq(t.name, name)) return t.type;
  if (eq(name, "FP8") || eq(name, "E4M3")) return QType::FP8_E4M3;
  return std::nullopt;
}

QTypeList all_qtypes() { return {std::begin(kTraits), std::end(kTraits)}; }

}  // namespace sustain
