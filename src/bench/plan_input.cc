#include "bench/plan_input.h"

#include <algorithm>

#include "attention/attention.h"
#include "kernels/ops.h"
#include "model/arch_config.h"
#include "model/transformer.h"

namespace sustain::bench {

plan::TensorEntry entry_of(const gguf::TensorInfo& t) {
  return {t.name, t.type, t.shape, t.n_bytes};
}

Status read_plan_file(const std::string& path, plan::PlanInput& in) {
  SUSTAIN_ASSIGN_OR_RETURN(gguf::File f, gguf::File::open(path));
  SUSTAIN_ASSIGN_OR_RETURN(in.arch, arch_config_from_gguf(f));
  for (const gguf::TensorInfo& t : f.tensors()) in.tensors.push_back(entry_of(t));
  in.rope_freqs = f.find_tensor("rope_freqs.weight") != nullptr;
  in.host = plan::default_host_costs(in.arch, in.tensors);
  // The header (metadata with the vocabulary) is read by the tokenizer, so its pages are resident.
  in.host.metadata_bytes = f.data_offset();
  return Status::ok();
}

uint64_t kernel_scratch(const plan::PlanInput& in, int64_t ubatch, int threads) {
  const ArchConfig& c = in.arch;
  uint64_t mm = 0;
  const char* output = c.tied_output ? "token_embd.weight" : "output.weight";
  for (const plan::TensorEntry& t : in.tensors) {
    const bool layer_matrix = t.name.rfind("blk.", 0) == 0 && t.shape.size() == 2;
    if (!(layer_matrix || t.name == output) || t.shape.size() != 2) continue;
    if (!kernels::matmul_supported(t.type)) continue;
    mm = std::max<uint64_t>(mm, kernels::matmul_scratch_bytes(t.type, t.shape[1], ubatch));
  }
  const uint64_t attn = attention::attention_scratch_bytes(attn_params(c), ubatch, threads);
  return std::max<uint64_t>(mm, 64) + std::max<uint64_t>(attn, 64) +
         static_cast<uint64_t>(ubatch) * sizeof(attention::QueryInfo);
}

}  // namespace sustain::bench
