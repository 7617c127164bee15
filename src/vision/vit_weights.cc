#include "vision/vit_weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tensor/fp16.h"
#include "tensor/qtype.h"
#include "vision/projector.h"

namespace sustain::vision {

Expected<const gguf::TensorInfo*> TensorLoader::find(const std::string& name,
                                                     const std::vector<int64_t>& shape) {
  const gguf::TensorInfo* t = f_.find_tensor(name);
  if (!t) return error(Code::kBadFile, "{}: tensor `{}` is missing", f_.path(), name);
  if (t->shape != shape)
    return error(Code::kBadFile, "{}: tensor `{}` has shape [{}], expected [{}]", f_.path(), name,
                 fmt::join(t->shape, ", "), fmt::join(shape, ", "));
  used_.insert(name);
  return t;
}

Expected<std::vector<float>> TensorLoader::floats(const std::string& name,
                                                  const std::vector<int64_t>& shape) {
  SUSTAIN_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, find(name, shape));
  const auto& tr = qtype_traits(t->type);
  if (!tr.dequantize)
    return error(Code::kUnsupported, "{}: tensor `{}` is {}, which cannot be read as floats",
                 f_.path(), name, tr.name);
  std::vector<float> out(t->n_elements);
  tr.dequantize(t->data, out.data(), static_cast<int64_t>(t->n_elements));
  return out;
}

Expected<kernels::WeightView> TensorLoader::matrix(const std::string& name, int64_t n_out,
                                                   int64_t n_in) {
  SUSTAIN_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, find(name, {n_out, n_in}));
  if (!kernels::matmul_supported(t->type))
    return error(Code::kUnsupported, "{}: tensor `{}` is {}, which matmul does not take", f_.path(),
                 name, qtype_name(t->type));
  kernels::WeightView v;
  v.type = t->type;
  v.n_out = n_out;
  v.n_in = n_in;
  v.data = t->data;
  v.row_bytes = qtype_row_bytes(t->type, static_cast<uint64_t>(n_in));
  return v;
}

Status TensorLoader::check_all_used() const {
  for (const auto& t : f_.tensors())
    if (!used_.count(t.name))
      return error(Code::kUnsupported,
                   "{}: tensor `{}` belongs to a feature this build does not implement", f_.path(),
                   t.name);
  return Status::ok();
}

Expected<VitWeights> load_vit_weights(TensorLoader& ld, const VisionHparams& hp) {
  const int64_t d = hp.n_embd, ff = hp.n_ff, p = hp.patch_size;
  VitWeights w;
  // GGUF ne [p, p, 3, n_embd] = PyTorch [n_embd, 3, p, p]: row o is already
  // the (channel, ky, kx)-ordered kernel of output channel o.
  SUSTAIN_ASSIGN_OR_RETURN(auto kernel, ld.floats("v.patch_embd.weight", {d, 3, p, p}));
  w.patch_f16.resize(kernel.size());
  for (size_t i = 0; i < kernel.size(); ++i) w.patch_f16[i] = f32_to_f16(kernel[i]);
  w.patch.type = QType::F16;
  w.patch.n_out = d;
  w.patch.n_in = 3 * p * p;
  w.patch.data = w.patch_f16.data();
  w.patch.row_bytes = qtype_row_bytes(QType::F16, static_cast<uint64_t>(w.patch.n_in));
  SUSTAIN_ASSIGN_OR_RETURN(w.patch_bias, ld.floats("v.patch_embd.bias", {d}));
  SUSTAIN_ASSIGN_OR_RETURN(w.pos, ld.floats("v.position_embd.weight", {hp.n_patches(), d}));
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    VitLayer L;
    auto n = [&](const char* s) { return fmt::format("v.blk.{}.{}", il, s); };
    SUSTAIN_ASSIGN_OR_RETURN(L.ln1_w, ld.floats(n("ln1.weight"), {d}));
    SUSTAIN_ASSIGN_OR_RETURN(L.ln1_b, ld.floats(n("ln1.bias"), {d}));
    SUSTAIN_ASSIGN_OR_RETURN(L.ln2_w, ld.floats(n("ln2.weight"), {d}));
    SUSTAIN_ASSIGN_OR_RETURN(L.ln2_b, ld.floats(n("ln2.bias"), {d}));
    SUSTAIN_ASSIGN_OR_RETURN(L.wq, ld.matrix(n("attn_q.weight"), d, d));
    SUSTAIN_ASSIGN_OR_RETURN(L.wk, ld.matrix(n("attn_k.weight"), d, d));
    SUSTAIN_ASSIGN_OR_RETURN(L.wv, ld.matrix(n("attn_v.weight"), d, d));
    SUSTAIN_ASSIGN_OR_RETURN(L.wo, ld.matrix(n("attn_out.weight"), d, d));
    SUSTAIN_ASSIGN_OR_RETURN(L.bq, ld.floats(n("attn_q.bias"), {d}));
    SUSTAIN_ASSIGN_OR_RETURN(L.bk, ld.floats(n("attn_k.bias"), {d}));
    SUSTAIN_ASSIGN_OR_RETURN(L.bv, ld.floats(n("attn_v.bias"), {d}));
    SUSTAIN_ASSIGN_OR_RETURN(L.bo, ld.floats(n("attn_out.bias"), {d}));
    // llama.cpp swaps ffn_up and ffn_down when a converter wrote them the
    // other way round; such a file fails the shape check here instead.
    SUSTAIN_ASSIGN_OR_RETURN(L.up, ld.matrix(n("ffn_up.weight"), ff, d));
    SUSTAIN_ASSIGN_OR_RETURN(L.down, ld.matrix(n("ffn_down.weight"), d, ff));
    SUSTAIN_ASSIGN_OR_RETURN(L.b_up, ld.floats(n("ffn_up.bias"), {ff}));
    SUSTAIN_ASSIGN_OR_RETURN(L.b_down, ld.floats(n("ffn_down.bias"), {d}));
    w.layers.push_back(std::move(L));
  }
  SUSTAIN_ASSIGN_OR_RETURN(w.post_ln_w, ld.floats("v.post_ln.weight", {d}));
  SUSTAIN_ASSIGN_OR_RETURN(w.post_ln_b, ld.floats("v.post_ln.bias", {d}));
  return w;
}

}  // namespace sustain::vision
