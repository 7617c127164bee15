// `sustain quantize IN OUT --type T`: converts a GGUF file's weights to
// another format with llama.cpp's per-tensor type mix, and measures what each
// tensor lost (RMSE against the input's values).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "tensor/qtype.h"
#include "tools/quant_mix.h"

namespace sustain::gguf {
class File;
}

namespace sustain::tools {

struct TensorQuantStats {
  std::string name;
  std::vector<int64_t> shape;
  QType src = QType::F32;
  QType dst = QType::F32;
  uint64_t n_elements = 0;
  uint64_t src_bytes = 0, dst_bytes = 0;
  double rmse = 0.0;      // sqrt(mean((dst - src)^2)) over the tensor
  double rel_rmse = 0.0;  // rmse / rms(src)
  bool copied = false;    // same format in and out: bytes copied unchanged
};

struct QuantizeResult {
  std::vector<TensorQuantStats> tensors;
  double total_rmse = 0.0;      // over every element of every converted tensor
  double total_rel_rmse = 0.0;  // total_rmse / rms of those elements
  uint64_t src_bytes = 0, dst_bytes = 0;
  double seconds = 0.0;
};

struct QuantizeOptions {
  FileType type = FileType::kQ4_K_M;
  // Called after each tensor with (index, count, stats of that tensor).
  std::function<void(size_t, size_t, const TensorQuantStats&)> progress;
};

// The format each tensor of `in` gets under `type` (in file order). Tensors
// that are not 2-D "*.weight" matrices, and norms, keep their format.
std::vector<QType> plan_file_types(const gguf::File& in, FileType type);

Expected<QuantizeResult> quantize_file(const std::string& in_path, const std::string& out_path,
                                       const QuantizeOptions& opt, ThreadPool& pool);

}  // namespace sustain::tools
