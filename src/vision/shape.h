// A projector described by its shape instead of a file: the tensors an
// mmproj GGUF of that shape holds (names and shapes as llama.cpp's converter
// writes them) and the buffers encoding one image needs. What `plan` counts
// for a projector nobody has downloaded yet, with the same arithmetic it
// uses for a file (Projector::encode_scratch_bytes calls the formula here).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tensor/qtype.h"
#include "vision/projector.h"

namespace sustain::vision {

struct ProjectorShape {
  VisionHparams hp;
  int pool = 1;             // gemma3: k×k average pooling of the patch grid
  int64_t out_dim = 0;      // the text model's n_embd
  QType matrix_type = QType::F16;  // tensors of two or more dimensions; 1-D ones are F32

  int64_t n_tokens() const;  // image tokens per image
};

struct ShapeTensor {
  std::string name;
  QType type = QType::F32;
  std::vector<int64_t> shape;  // PyTorch order (outermost first)
  uint64_t bytes = 0;
};

// Named shapes: "gemma3" is the SigLIP-So400m encoder Gemma 3 4B, 12B and
// 27B ship (896×896 input, 14×14 patches, 27 blocks of width 1152, FFN 4304,
// 16 heads, 4×4 pooling to 256 image tokens). `out_dim` is the text model's
// width. Errors name the shapes known.
Expected<ProjectorShape> projector_shape(std::string_view name, int64_t out_dim, QType matrix_type);
std::string projector_shape_names();

// Every tensor an mmproj of this shape stores.
std::vector<ShapeTensor> projector_tensors(const ProjectorShape& s);

// The buffers encode() allocates for one image, summed as if all were alive
// at once, given the largest matmul scratch of the encoder's matrices.
uint64_t encode_scratch_bytes(const VisionHparams& hp, int64_t n_tokens, int64_t out_dim,
                              uint64_t matmul_scratch);
// The same for a shape (its matrices' scratch computed from matrix_type).
uint64_t encode_scratch_bytes(const ProjectorShape& s);

}  // namespace sustain::vision
