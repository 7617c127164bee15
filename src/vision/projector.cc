#include "vision/projector.h"

#include <algorithm>

#include <fmt/format.h>

#include "kernels/ops.h"
#include "vision/heads.h"
#include "vision/preprocess.h"
#include "vision/shape.h"
#include "vision/vit.h"

namespace sustain::vision {
namespace {

struct HeadKind {
  const char* name;  // clip.projector_type
  MakeHead make;
};
constexpr HeadKind kHeads[] = {
    {"gemma3", make_gemma3_head},
};

// Bounds far above any real projector, so a hostile header cannot make the
// encoder allocate without limit (activations are n_patches × n_ff floats).
constexpr uint64_t kMaxImageSize = 4096;
constexpr uint64_t kMaxWidth = 16384;
constexpr uint64_t kMaxLayers = 256;

Expected<uint32_t> bounded(const gguf::File& f, const char* key, uint64_t lo, uint64_t hi) {
  SUSTAIN_ASSIGN_OR_RETURN(uint64_t v, f.get_uint(key));
  if (v < lo || v > hi)
    return error(Code::kBadFile, "{}: `{}` is {}, expected {}..{}", f.path(), key, v, lo, hi);
  return static_cast<uint32_t>(v);
}

Expected<std::array<float, 3>> rgb_triplet(const gguf::File& f, const char* key, float dflt) {
  if (!f.has(key)) return std::array<float, 3>{dflt, dflt, dflt};
  SUSTAIN_ASSIGN_OR_RETURN(auto v, f.get_float_array(key));
  if (v.size() != 3)
    return error(Code::kBadFile, "{}: `{}` has {} values, expected 3 (R, G, B)", f.path(), key,
                 v.size());
  return std::array<float, 3>{v[0], v[1], v[2]};
}

}  // namespace

bool is_projector_file(const gguf::File& f) {
  auto a = f.get_string_or("general.architecture", "");
  return a && *a == "clip";
}

Expected<VisionHparams> read_vision_hparams(const gguf::File& f) {
  if (!is_projector_file(f))
    return error(Code::kBadFile, "{}: not a vision projector (general.architecture is not `clip`)",
                 f.path());
  SUSTAIN_ASSIGN_OR_RETURN(bool has_vision, f.get_bool_or("clip.has_vision_encoder", false));
  if (!has_vision)
    return error(Code::kUnsupported, "{}: clip.has_vision_encoder is not true", f.path());
  VisionHparams hp;
  SUSTAIN_ASSIGN_OR_RETURN(hp.projector_type, f.get_string("clip.projector_type"));
  SUSTAIN_ASSIGN_OR_RETURN(hp.image_size, bounded(f, "clip.vision.image_size", 1, kMaxImageSize));
  SUSTAIN_ASSIGN_OR_RETURN(hp.patch_size, bounded(f, "clip.vision.patch_size", 1, hp.image_size));
  SUSTAIN_ASSIGN_OR_RETURN(hp.n_embd, bounded(f, "clip.vision.embedding_length", 1, kMaxWidth));
  SUSTAIN_ASSIGN_OR_RETURN(hp.n_ff,
                           bounded(f, "clip.vision.feed_forward_length", 1, 4 * kMaxWidth));
  SUSTAIN_ASSIGN_OR_RETURN(hp.n_layer, bounded(f, "clip.vision.block_count", 1, kMaxLayers));
  SUSTAIN_ASSIGN_OR_RETURN(hp.n_head, bounded(f, "clip.vision.attention.head_count", 1, hp.n_embd));
  SUSTAIN_ASSIGN_OR_RETURN(double eps, f.get_float("clip.vision.attention.layer_norm_epsilon"));
  if (!(eps > 0.0 && eps < 1.0))
    return error(Code::kBadFile, "{}: clip.vision.attention.layer_norm_epsilon is {}", f.path(),
                 eps);
  hp.eps = static_cast<float>(eps);
  SUSTAIN_ASSIGN_OR_RETURN(hp.gelu, f.get_bool_or("clip.use_gelu", false));
  SUSTAIN_ASSIGN_OR_RETURN(auto pd, f.get_uint_or("clip.vision.projection_dim", 0));
  hp.projection_dim = static_cast<uint32_t>(std::min<uint64_t>(pd, UINT32_MAX));
  SUSTAIN_ASSIGN_OR_RETURN(hp.image_mean, rgb_triplet(f, "clip.vision.image_mean", 0.5f));
  SUSTAIN_ASSIGN_OR_RETURN(hp.image_std, rgb_triplet(f, "clip.vision.image_std", 0.5f));
  for (float s : hp.image_std)
    if (!(s > 0.0f))
      return error(Code::kBadFile, "{}: clip.vision.image_std holds {}", f.path(), s);
  if (hp.image_size % hp.patch_size != 0)
    return error(Code::kBadFile, "{}: image size {} is not a multiple of the patch size {}",
                 f.path(), hp.image_size, hp.patch_size);
  if (hp.n_embd % hp.n_head != 0)
    return error(Code::kBadFile, "{}: ViT width {} is not a multiple of the {} heads", f.path(),
                 hp.n_embd, hp.n_head);
  if (!hp.gelu)
    return error(Code::kUnsupported,
                 "{}: quick-GELU encoders (clip.use_gelu false) are not "
                 "implemented",
                 f.path());
  return hp;
}

Expected<Projector> Projector::open(const std::string& path, const gguf::ReadOptions& opt) {
  SUSTAIN_ASSIGN_OR_RETURN(gguf::File f, gguf::File::open(path, opt));
  return from_file(std::make_shared<gguf::File>(std::move(f)));
}

Expected<Projector> Projector::from_file(std::shared_ptr<gguf::File> file) {
  Projector p;
  p.file_ = std::move(file);
  const gguf::File& f = *p.file_;
  SUSTAIN_ASSIGN_OR_RETURN(p.hp_, read_vision_hparams(f));
  MakeHead make = nullptr;
  std::string known;
  for (const auto& k : kHeads) {
    if (p.hp_.projector_type == k.name) make = k.make;
    known += known.empty() ? k.name : std::string(", ") + k.name;
  }
  if (!make)
    return error(Code::kUnsupported, "{}: projector type `{}` is not implemented (known: {})",
                 f.path(), p.hp_.projector_type, known);
  TensorLoader ld(f);
  SUSTAIN_ASSIGN_OR_RETURN(VitWeights vit, load_vit_weights(ld, p.hp_));
  p.vit_ = std::make_shared<const VitWeights>(std::move(vit));
  SUSTAIN_ASSIGN_OR_RETURN(std::unique_ptr<ProjectorHead> head, make(ld, f, p.hp_));
  p.head_ = std::move(head);
  SUSTAIN_TRY(ld.check_all_used());
  return p;
}

uint64_t Projector::tensor_bytes() const {
  uint64_t b = 0;
  for (const auto& t : file_->tensors()) b += t.n_bytes;
  return b;
}

uint64_t Projector::encode_scratch_bytes() const {
  uint64_t mm = 0;
  for (const VitLayer& L : vit_->layers)
    for (const kernels::WeightView* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.up, &L.down})
      mm = std::max<uint64_t>(
          mm, kernels::matmul_scratch_bytes(w->type, w->n_in, static_cast<int64_t>(hp_.n_patches())));
  return vision::encode_scratch_bytes(hp_, n_tokens(), out_dim(), mm);
}

std::vector<float> Projector::encode(const Image& img, ThreadPool& pool, const Tap& tap) const {
  const std::vector<float> px =
      preprocess(img, static_cast<int>(hp_.image_size), hp_.image_mean, hp_.image_std);
  return encode_pixels(px.data(), pool, tap);
}

std::vector<float> Projector::encode_pixels(const float* pixels, ThreadPool& pool,
                                            const Tap& tap) const {
  std::vector<float> vit_out;
  vit_forward(*vit_, hp_, pixels, vit_out, pool, tap);
  std::vector<float> out(static_cast<size_t>(n_tokens()) * out_dim());
  head_->forward(vit_out.data(), out.data(), pool, tap);
  return out;
}

}  // namespace sustain::vision
