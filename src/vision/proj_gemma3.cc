// Gemma 3's projector ("gemma3" in clip.projector_type):
//   pooled = avg_pool_k×k(ViT output viewed as its patch grid)
//   out    = (RMSNorm(pooled) · soft_emb_norm) · W
// k is clip.vision.projector.scale_factor (4 when absent, as in real Gemma 3
// files). soft_emb_norm already holds Gemma's 1 + w. W is stored as
// [vision_dim][text_dim] and multiplied from the right, the transpose of the
// usual linear layer; it is transposed once at load into W[out, in].
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kernels/ops.h"
#include "tensor/fp16.h"
#include "tensor/qtype.h"
#include "vision/heads.h"
#include "vision/vit_ops.h"

namespace sustain::vision {
namespace {

constexpr uint64_t kDefaultScaleFactor = 4;

class Gemma3Head final : public ProjectorHead {
 public:
  int64_t n_tokens() const override { return static_cast<int64_t>(out_side_) * out_side_; }
  int64_t out_dim() const override { return text_dim_; }
  std::vector<std::pair<std::string, std::string>> describe() const override {
    return {{"pooling", fmt::format("{0}x{0} average over the {1}x{1} patch grid -> {2}x{2}", k_,
                                    side_, out_side_)},
            {"norm", "RMSNorm x soft_emb_norm"},
            {"projection",
             fmt::format("{} -> {} ({})", vision_dim_, text_dim_, qtype_name(proj_.type))}};
  }

  void forward(const float* vit_out, float* out, ThreadPool& pool, const Tap& tap) const override {
    const int64_t nt = n_tokens(), c = vision_dim_;
    std::vector<float> pooled(static_cast<size_t>(nt) * c), normed(pooled.size());
    avg_pool_grid(vit_out, pooled.data(), side_, k_, c);
    if (tap) tap("proj_pool2d", -1, pooled.data(), nt, c);
    for (int64_t t = 0; t < nt; ++t)
      kernels::rms_norm(pooled.data() + t * c, nullptr, normed.data() + t * c, c, eps_);
    if (tap) tap("proj_rms_norm", -1, normed.data(), nt, c);
    for (int64_t t = 0; t < nt; ++t)
      for (int64_t i = 0; i < c; ++i) normed[t * c + i] *= soft_emb_norm_[i];
    if (tap) tap("proj_soft_emb_norm", -1, normed.data(), nt, c);
    std::vector<uint8_t> scratch(kernels::matmul_scratch_bytes(proj_.type, c, nt));
    kernels::matmul(proj_, normed.data(), c, nt, out, text_dim_, pool, scratch.data());
  }

  int side_ = 0, k_ = 1, out_side_ = 0;
  int64_t vision_dim_ = 0, text_dim_ = 0;
  float eps_ = 1e-6f;
  std::vector<float> soft_emb_norm_;
  // W[text_dim, vision_dim]: F16 (as stored by real files, and the format the
  // reference multiplies in) or F32; other stored formats are widened to F32.
  std::vector<uint8_t> proj_data_;
  kernels::WeightView proj_;
};

}  // namespace

Expected<std::unique_ptr<ProjectorHead>> make_gemma3_head(TensorLoader& ld, const gguf::File& f,
                                                          const VisionHparams& hp) {
  auto h = std::make_unique<Gemma3Head>();
  SUSTAIN_ASSIGN_OR_RETURN(
      uint64_t k, f.get_uint_or("clip.vision.projector.scale_factor", kDefaultScaleFactor));
  h->side_ = static_cast<int>(hp.patches_per_side());
  if (k == 0 || k > static_cast<uint64_t>(h->side_) || h->side_ % k != 0)
    return error(Code::kBadFile,
                 "{}: clip.vision.projector.scale_factor {} does not divide the {}x{} patch grid",
                 f.path(), k, h->side_, h->side_);
  h->k_ = static_cast<int>(k);
  h->out_side_ = h->side_ / h->k_;
  h->vision_dim_ = hp.n_embd;
  h->eps_ = hp.eps;
  SUSTAIN_ASSIGN_OR_RETURN(h->soft_emb_norm_, ld.floats("mm.soft_emb_norm.weight", {hp.n_embd}));

  const gguf::TensorInfo* t = f.find_tensor("mm.input_projection.weight");
  if (!t)
    return error(Code::kBadFile, "{}: tensor `mm.input_projection.weight` is missing", f.path());
  if (t->shape.size() != 2 || t->shape[0] != hp.n_embd)
    return error(
        Code::kBadFile,
        "{}: tensor `mm.input_projection.weight` has shape [{}], expected [{}, text width]",
        f.path(), fmt::join(t->shape, ", "), hp.n_embd);
  h->text_dim_ = t->shape[1];
  if (h->text_dim_ <= 0)
    return error(Code::kBadFile, "{}: `mm.input_projection.weight` has no columns", f.path());
  SUSTAIN_ASSIGN_OR_RETURN(auto w, ld.floats("mm.input_projection.weight", t->shape));
  const int64_t in = h->vision_dim_, out = h->text_dim_;
  const QType type = t->type == QType::F16 ? QType::F16 : QType::F32;
  const size_t elem = type == QType::F16 ? 2 : 4;
  h->proj_data_.resize(static_cast<size_t>(in) * out * elem);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) {
      const float x = w[static_cast<size_t>(i) * out + o];  // stored [in][out]
      const size_t at = static_cast<size_t>(o) * in + i;
      if (type == QType::F16) {
        const uint16_t b = f32_to_f16(x);  // exact: x came from f16
        std::memcpy(h->proj_data_.data() + at * 2, &b, 2);
      } else {
        std::memcpy(h->proj_data_.data() + at * 4, &x, 4);
      }
    }
  h->proj_ = {type, out, in, h->proj_data_.data(), static_cast<size_t>(in) * elem};
  return std::unique_ptr<ProjectorHead>(std::move(h));
}

}  // namespace sustain::vision
