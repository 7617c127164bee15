// The SigLIP ViT encoder forward pass (Gemma 3's vision tower).
#pragma once

#include <vector>

#include "base/thread_pool.h"
#include "vision/projector.h"
#include "vision/vit_weights.h"

namespace sustain::vision {

// Buffers one block needs for n rows; sized on first use, reused after.
struct VitScratch {
  std::vector<float> h, q, k, v, a, up;
  std::vector<uint8_t> matmul;
};

// One pre-norm block over x [n][n_embd], in place:
//   x += Wo·Attn(LN1(x)) + bo;  x += Wdown·GELU(Wup·LN2(x) + bup) + bdown
void vit_block(const VitLayer& L, const VisionHparams& hp, float* x, int64_t n, VitScratch& ws,
               ThreadPool& pool);

// pixels: [3][S][S] (preprocess.h) → out: [n_patches][n_embd], after the post-LN.
void vit_forward(const VitWeights& w, const VisionHparams& hp, const float* pixels,
                 std::vector<float>& out, ThreadPool& pool, const Tap& tap);

}  // namespace sustain::vision
