// SigLIP ViT, as llama.cpp's clip graph runs it for Gemma 3:
//   x = conv_p×p(pixels) + b + pos                    (patch embedding)
//   x += Wo·Attn(LN1(x)) + bo                         (no mask: all patches see all)
//   x += Wdown·GELU(Wup·LN2(x) + bup) + bdown
//   out = post_LN(x)
// The convolution has kernel = stride = patch size, so it is a matmul over
// im2col columns.
#include "vision/vit.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "vision/vit_ops.h"

namespace sustain::vision {

void vit_block(const VitLayer& L, const VisionHparams& hp, float* x, int64_t n, VitScratch& ws,
               ThreadPool& pool) {
  const int64_t d = hp.n_embd, ff = hp.n_ff;
  const size_t nd = static_cast<size_t>(n * d);
  for (auto* b : {&ws.h, &ws.q, &ws.k, &ws.v, &ws.a}) b->resize(nd);
  ws.up.resize(static_cast<size_t>(n * ff));
  size_t scratch_bytes = 0;
  for (const auto* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.up, &L.down})
    scratch_bytes = std::max(scratch_bytes, kernels::matmul_scratch_bytes(m->type, m->n_in, n));
  ws.matmul.resize(std::max(ws.matmul.size(), scratch_bytes));
  float *h = ws.h.data(), *q = ws.q.data(), *k = ws.k.data(), *v = ws.v.data(), *a = ws.a.data();
  float* up = ws.up.data();
  void* scratch = ws.matmul.data();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim()));

  layer_norm(x, L.ln1_w.data(), L.ln1_b.data(), h, n, d, hp.eps);
  kernels::matmul(L.wq, h, d, n, q, d, pool, scratch);
  kernels::add_bias(q, L.bq.data(), n, d);
  kernels::matmul(L.wk, h, d, n, k, d, pool, scratch);
  kernels::add_bias(k, L.bk.data(), n, d);
  kernels::matmul(L.wv, h, d, n, v, d, pool, scratch);
  kernels::add_bias(v, L.bv.data(), n, d);
  attention_full(q, k, v, a, n, static_cast<int>(hp.n_head), static_cast<int>(hp.head_dim()), scale,
                 pool);
  kernels::matmul(L.wo, a, d, n, h, d, pool, scratch);
  kernels::add_bias(h, L.bo.data(), n, d);
  kernels::add(x, h, n * d);

  layer_norm(x, L.ln2_w.data(), L.ln2_b.data(), h, n, d, hp.eps);
  kernels::matmul(L.up, h, d, n, up, ff, pool, scratch);
  kernels::add_bias(up, L.b_up.data(), n, ff);
  gelu_f16_table(up, n * ff);
  kernels::matmul(L.down, up, ff, n, h, d, pool, scratch);
  kernels::add_bias(h, L.b_down.data(), n, d);
  kernels::add(x, h, n * d);
}

void vit_forward(const VitWeights& w, const VisionHparams& hp, const float* pixels,
                 std::vector<float>& out, ThreadPool& pool, const Tap& tap) {
  const int S = static_cast<int>(hp.image_size), P = static_cast<int>(hp.patch_size);
  const int side = S / P;
  const int64_t n = hp.n_patches(), d = hp.n_embd, cols = 3 * P * P;
  auto emit = [&](const char* name, int layer, const float* x, int64_t rows, int64_t c) {
    if (tap) tap(name, layer, x, rows, c);
  };

  std::vector<uint8_t> scratch(kernels::matmul_scratch_bytes(w.patch.type, cols, n));

  // im2col: patch p = py·side + px; column (c, ky, kx) as the kernel's rows.
  std::vector<float> col(static_cast<size_t>(n) * cols);
  for (int py = 0; py < side; ++py)
    for (int px = 0; px < side; ++px) {
      float* cr = col.data() + (static_cast<int64_t>(py) * side + px) * cols;
      for (int c = 0; c < 3; ++c)
        for (int ky = 0; ky < P; ++ky)
          for (int kx = 0; kx < P; ++kx)
            *cr++ = pixels[(static_cast<int64_t>(c) * S + py * P + ky) * S + px * P + kx];
    }
  std::vector<float> x(static_cast<size_t>(n) * d);
  kernels::matmul(w.patch, col.data(), cols, n, x.data(), d, pool, scratch.data());
  kernels::add_bias(x.data(), w.patch_bias.data(), n, d);
  emit("patch_bias", -1, x.data(), n, d);
  kernels::add(x.data(), w.pos.data(), n * d);
  emit("pos_embed", -1, x.data(), n, d);

  VitScratch ws;
  for (size_t il = 0; il < w.layers.size(); ++il) {
    vit_block(w.layers[il], hp, x.data(), n, ws, pool);
    emit("layer_out", static_cast<int>(il), x.data(), n, d);
  }
  out.resize(x.size());
  layer_norm(x.data(), w.post_ln_w.data(), w.post_ln_b.data(), out.data(), n, d, hp.eps);
  emit("norm_b", -1, out.data(), n, d);
}

}  // namespace sustain::vision
