#include "vision/shape.h"

#include <algorithm>

#include <fmt/format.h>

#include "kernels/ops.h"

namespace sustain::vision {

int64_t ProjectorShape::n_tokens() const {
  const int64_t side = hp.patches_per_side() / std::max(1, pool);
  return side * side;
}

namespace {

struct Named {
  const char* name;
  VisionHparams hp;
  int pool;
};

const Named kShapes[] = {
    // google/siglip-so400m-patch14 as Gemma 3 uses it (at 896 px), with
    // clip.vision.projector.scale_factor 4.
    {"gemma3", {"gemma3", 896, 14, 1152, 4304, 27, 16, 1e-6f}, 4},
};

}  // namespace

std::string projector_shape_names() {
  std::string s;
  for (const Named& n : kShapes) s += (s.empty() ? "" : ", ") + std::string(n.name);
  return s;
}

Expected<ProjectorShape> projector_shape(std::string_view name, int64_t out_dim, QType matrix_type) {
  for (const Named& n : kShapes) {
    if (name != n.name) continue;
    if (out_dim <= 0) return error(Code::kInvalidArgument, "projector shape: out_dim must be > 0");
    if (matrix_type != QType::F32 && matrix_type != QType::F16 && matrix_type != QType::BF16 &&
        matrix_type != QType::Q8_0)
      return error(Code::kInvalidArgument,
                   "a projector's matrices in {}: give F16, BF16, F32 or Q8_0 (the formats mmproj "
                   "files come in)",
                   qtype_name(matrix_type));
    ProjectorShape s;
    s.hp = n.hp;
    s.pool = n.pool;
    s.out_dim = out_dim;
    s.matrix_type = matrix_type;
    return s;
  }
  return error(Code::kNotFound, "'{}' is not a projector shape (one of: {})", name,
               projector_shape_names());
}

std::vector<ShapeTensor> projector_tensors(const ProjectorShape& s) {
  const VisionHparams& hp = s.hp;
  const int64_t d = hp.n_embd, ff = hp.n_ff, p = hp.patch_size;
  // Embeddings, the patch kernel and the projection are not quantized by
  // llama.cpp's converter; nor is a matrix whose rows the format's blocks
  // do not divide (FFN 4304 in Q8_0's 32).
  const QType wide = s.matrix_type == QType::F32 ? QType::F32 : QType::F16;
  std::vector<ShapeTensor> out;
  auto add = [&](std::string name, QType t, std::vector<int64_t> shape) {
    const uint64_t n_in = static_cast<uint64_t>(shape.back());
    if (n_in % qtype_traits(t).block_elems != 0) t = wide;
    uint64_t rows = 1;
    for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= static_cast<uint64_t>(shape[i]);
    out.push_back({std::move(name), t, shape, rows * qtype_row_bytes(t, n_in)});
  };
  add("mm.input_projection.weight", wide, {d, s.out_dim});
  add("mm.soft_emb_norm.weight", QType::F32, {d});
  add("v.patch_embd.bias", QType::F32, {d});
  add("v.patch_embd.weight", wide, {d, 3, p, p});
  add("v.position_embd.weight", wide, {hp.n_patches(), d});
  for (uint32_t l = 0; l < hp.n_layer; ++l) {
    auto n = [&](const char* what) { return fmt::format("v.blk.{}.{}", l, what); };
    for (const char* ln : {"ln1.bias", "ln1.weight", "ln2.bias", "ln2.weight"})
      add(n(ln), QType::F32, {d});
    add(n("ffn_up.bias"), QType::F32, {ff});
    add(n("ffn_up.weight"), s.matrix_type, {ff, d});
    add(n("ffn_down.bias"), QType::F32, {d});
    add(n("ffn_down.weight"), s.matrix_type, {d, ff});
    for (const char* m : {"attn_k", "attn_out", "attn_q", "attn_v"}) {
      add(n((std::string(m) + ".bias").c_str()), QType::F32, {d});
      add(n((std::string(m) + ".weight").c_str()), s.matrix_type, {d, d});
    }
  }
  add("v.post_ln.bias", QType::F32, {d});
  add("v.post_ln.weight", QType::F32, {d});
  return out;
}

uint64_t encode_scratch_bytes(const VisionHparams& hp, int64_t n_tokens, int64_t out_dim,
                              uint64_t matmul_scratch) {
  const uint64_t n = hp.n_patches(), d = hp.n_embd, ff = hp.n_ff, hd = hp.head_dim();
  const uint64_t s = hp.image_size, p = hp.patch_size;
  const auto nt = static_cast<uint64_t>(n_tokens), out = static_cast<uint64_t>(out_dim);
  const uint64_t floats = 3 * s * s      // preprocessed pixels
                          + n * 3 * p * p  // patch columns
                          + 2 * n * d      // residual stream and the encoder's output
                          + 5 * n * d      // norm, q, k, v, attention output
                          + n * ff         // FFN up
                          + 3 * n * hd     // one head's K, Vᵀ and output
                          + n * n          // one head's scores
                          + 2 * nt * d     // pooled and normed
                          + nt * out;      // the embeddings
  return floats * sizeof(float) + 2 * s * s * 3 + matmul_scratch;  // + the letterbox's two RGB images
}

uint64_t encode_scratch_bytes(const ProjectorShape& s) {
  uint64_t mm = 0;
  const auto n = static_cast<int64_t>(s.hp.n_patches());
  for (const ShapeTensor& t : projector_tensors(s))
    if (t.name.find(".attn_") != std::string::npos || t.name.find(".ffn_") != std::string::npos)
      if (t.shape.size() == 2)
        mm = std::max<uint64_t>(mm, kernels::matmul_scratch_bytes(t.type, t.shape[1], n));
  return encode_scratch_bytes(s.hp, s.n_tokens(), s.out_dim, mm);
}

}  // namespace sustain::vision
