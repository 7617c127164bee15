// A vision projector file (llama.cpp's "mmproj" GGUF): `clip.*` metadata, a
// ViT image encoder (`v.*` tensors) and a projector (`mm.*`) that maps the
// encoder's output to embeddings of the text model's width.
//
// Projector::open reads the file with the bounded GGUF reader, reads the
// hyperparameters, walks the weight table (vision/vit_weights.h and the
// projector type's own table) checking that every tensor is there with the
// shape the hyperparameters imply, and names the first thing that is not.
// Weights stay in the mapping except the few the encoder wants in another
// layout (see vit_weights.h).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "gguf/gguf.h"
#include "vision/image.h"
#include "vision/vit_weights.h"

namespace sustain::vision {

// Observes an intermediate result: `rows` rows of `cols` floats, row-major.
// Names follow the reference's trace files (patch_bias, pos_embed,
// layer_out, norm_b, proj_*); `layer` is -1 outside the blocks.
using Tap = std::function<void(std::string_view name, int layer, const float* data, int64_t rows,
                               int64_t cols)>;

struct VisionHparams {
  std::string projector_type;  // clip.projector_type, e.g. "gemma3"
  uint32_t image_size = 0;     // the encoder's input is image_size × image_size
  uint32_t patch_size = 0;
  uint32_t n_embd = 0;  // ViT width
  uint32_t n_ff = 0;
  uint32_t n_layer = 0;
  uint32_t n_head = 0;
  float eps = 1e-6f;  // LayerNorm (and gemma3's RMSNorm) epsilon
  bool gelu = true;   // clip.use_gelu (tanh GELU); false would be quick-GELU
  std::array<float, 3> image_mean{0.5f, 0.5f, 0.5f};
  std::array<float, 3> image_std{0.5f, 0.5f, 0.5f};
  uint32_t projection_dim = 0;  // clip.vision.projection_dim as stored (informative)

  uint32_t patches_per_side() const { return image_size / patch_size; }
  uint32_t n_patches() const { return patches_per_side() * patches_per_side(); }
  uint32_t head_dim() const { return n_embd / n_head; }
};

// What a projector type adds after the ViT. One implementation per type
// (proj_<type>.cc), found by name in projector.cc's registry.
class ProjectorHead {
 public:
  virtual ~ProjectorHead() = default;
  virtual int64_t n_tokens() const = 0;  // image embeddings per image
  virtual int64_t out_dim() const = 0;   // their width: the text model's n_embd
  // Short facts for `sustain info`, e.g. "4x4 average pooling".
  virtual std::vector<std::pair<std::string, std::string>> describe() const = 0;
  // vit_out: [n_patches][n_embd] (after the post-LN); out: [n_tokens][out_dim].
  virtual void forward(const float* vit_out, float* out, ThreadPool& pool,
                       const Tap& tap) const = 0;
};

class Projector {
 public:
  static Expected<Projector> open(const std::string& path, const gguf::ReadOptions& opt = {});
  // Checks an already opened file (e.g. one built in memory by a test).
  static Expected<Projector> from_file(std::shared_ptr<gguf::File> file);

  const VisionHparams& hparams() const { return hp_; }
  const ProjectorHead& head() const { return *head_; }
  int64_t n_tokens() const { return head_->n_tokens(); }
  int64_t out_dim() const { return head_->out_dim(); }
  uint64_t tensor_bytes() const;  // of every tensor in the file
  // The buffers encode() allocates for one image, summed as if all were
  // alive at once (an upper bound of its peak): preprocessed pixels, patch
  // columns, the residual stream and the block's activations, one head's
  // scores, the matmul scratch, the projector's pooling and output.
  uint64_t encode_scratch_bytes() const;
  const gguf::File& file() const { return *file_; }
  const VitWeights& vit() const { return *vit_; }

  // Decoded image → embeddings [n_tokens][out_dim].
  std::vector<float> encode(const Image& img, ThreadPool& pool, const Tap& tap = {}) const;
  // Preprocessed input [3][S][S] (see preprocess.h) → embeddings.
  std::vector<float> encode_pixels(const float* pixels, ThreadPool& pool,
                                   const Tap& tap = {}) const;

 private:
  std::shared_ptr<gguf::File> file_;
  VisionHparams hp_;
  std::shared_ptr<const VitWeights> vit_;
  std::shared_ptr<const ProjectorHead> head_;
};

// Reads the hyperparameters (clip.vision.*) and checks them for sense.
Expected<VisionHparams> read_vision_hparams(const gguf::File& f);

// Whether a GGUF file is a projector (general.architecture "clip").
bool is_projector_file(const gguf::File& f);

}  // namespace sustain::vision
