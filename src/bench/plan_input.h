// What `sustain plan` and `sustain bench` share: a model file's tensors as
// a memory-plan input, and the kernel scratch a workspace adds.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "gguf/gguf.h"
#include "plan/plan.h"

namespace sustain::bench {

plan::TensorEntry entry_of(const gguf::TensorInfo& t);

// A GGUF file's tensors as they are stored (the file is mapped, its tensor
// data never read), its architecture and host costs.
Status read_plan_file(const std::string& path, plan::PlanInput& in);

// What Model::make_workspace adds to its f32 buffers: the largest matmul
// activation scratch over the matrices it multiplies, the attention scratch
// and the query list (each at least 64 bytes, as there).
uint64_t kernel_scratch(const plan::PlanInput& in, int64_t ubatch, int threads);

}  // namespace sustain::bench
