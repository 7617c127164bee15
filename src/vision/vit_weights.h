// The ViT encoder's weight table (SigLIP as llama.cpp's mmproj files name it)
// and the checked loader that projector types share for their own tensors.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf.h"
#include "kernels/ops.h"

namespace sustain::vision {

struct VisionHparams;

// Fetches tensors by name with the shape the hyperparameters imply (PyTorch
// order), remembering which it took, so that a file with tensors nobody reads
// (a feature this build does not implement) is refused by name rather than
// silently mis-run.
class TensorLoader {
 public:
  explicit TensorLoader(const gguf::File& f) : f_(f) {}
  // Any stored format, dequantized to float (norms, biases, embeddings).
  Expected<std::vector<float>> floats(const std::string& name, const std::vector<int64_t>& shape);
  // A matrix W[n_out, n_in] left in the mapping, in a format matmul takes.
  Expected<kernels::WeightView> matrix(const std::string& name, int64_t n_out, int64_t n_in);
  bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }
  // The first tensor that was not taken, if any: an error naming it.
  Status check_all_used() const;

 private:
  Expected<const gguf::TensorInfo*> find(const std::string& name,
                                         const std::vector<int64_t>& shape);
  const gguf::File& f_;
  std::set<std::string> used_;
};

struct VitLayer {
  std::vector<float> ln1_w, ln1_b, ln2_w, ln2_b;  // [n_embd]
  kernels::WeightView wq, wk, wv, wo;             // [n_embd, n_embd]
  std::vector<float> bq, bk, bv, bo;              // [n_embd]
  kernels::WeightView up, down;                   // [n_ff, n_embd], [n_embd, n_ff]
  std::vector<float> b_up, b_down;
};

struct VitWeights {
  // The patch convolution as a matrix [n_embd, 3·p·p] over im2col columns
  // ordered (channel, ky, kx). Kept in F16: the reference rounds both the
  // kernel and the pixels to f16 for this product.
  std::vector<uint16_t> patch_f16;
  kernels::WeightView patch;
  std::vector<float> patch_bias;  // [n_embd]
  std::vector<float> pos;         // [n_patches, n_embd], learned, added as is
  std::vector<VitLayer> layers;
  std::vector<float> post_ln_w, post_ln_b;
};

Expected<VitWeights> load_vit_weights(TensorLoader& ld, const VisionHparams& hp);

}  // namespace sustain::vision
