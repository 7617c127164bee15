// Which format each tensor gets for a given target file type ("Q4_K_M", ...).
// The rules reproduce llama.cpp's per-tensor mix for the types sustain
// writes, so a sustain Q4_K_M file has the same layout (and size) as one from
// llama-quantize: output / tied embeddings get Q6_K, some attn_v and ffn_down
// layers get more bits, rows that do not fit a 256-element block fall back
// to a 32-element format, norms and other 1-D tensors stay F32.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/arch_config.h"
#include "model/weights.h"
#include "tensor/qtype.h"

namespace sustain::tools {

enum class FileType {
  kF32,
  kF16,
  kBF16,
  kQ8_0,
  kQ4_0,
  kQ4_K_M,
  kQ4_K_S,
  kQ5_K_M,
  kQ6_K,
};

struct FileTypeInfo {
  FileType type;
  std::string_view name;     // "Q4_K_M"
  QType base;                // format of most matrices
  uint32_t gguf_file_type;   // value of general.file_type (llama.cpp's llama_ftype)
  std::string_view summary;
};

const std::vector<FileTypeInfo>& file_types();
std::optional<FileType> file_type_from_name(std::string_view name);  // case-insensitive
const FileTypeInfo& file_type_info(FileType t);
std::string file_type_names();  // "F32, F16, BF16, Q8_0, ..." for help and errors

// Plans the format of every tensor of `table` (in table order).
std::vector<QType> plan_tensor_types(const ArchConfig& cfg, const std::vector<WeightSpec>& table,
                                     FileType ft);

}  // namespace sustain::tools
