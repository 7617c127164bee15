// A pipeline stage: the contiguous blocks one process computes when a model
// is split by layers over several ranks (docs/split.md). The forward pass
// runs only these blocks and hands the residual stream over through the two
// callbacks, so model/ stays free of any transport; dist/ and the command
// that owns the ranks supply them.
#pragma once

#include <cstdint>
#include <functional>

#include "base/status.h"

namespace sustain {

struct PipelineStage {
  // Blocks [layer_begin, layer_end) of the model's n_layer.
  int layer_begin = 0, layer_end = 0;
  // The KV cache of a stage holds only its own blocks' layers: the cache
  // layer of block b is kv_layer(b) - kv_layer_begin.
  int kv_layer_begin = 0;
  // Not the first stage: fills x [n floats] with the residual stream the
  // previous stage computed for this chunk of the batch.
  std::function<Status(float* x, int64_t n)> recv;
  // Not the last stage: hands the residual stream after layer_end - 1 on.
  std::function<Status(const float* x, int64_t n)> send;
  // Tensor split (model/shard.h): replaces x [n floats] with its sum over
  // the ranks (the partial products of attn_output and ffn_down).
  std::function<Status(float* x, int64_t n)> all_reduce;
  // Tensor split with attn_output whole: the attention outputs of this
  // rank's heads for `tokens` tokens [tokens, own width] → every rank's,
  // in head order [tokens, n_head × head_dim_v].
  std::function<Status(const float* own, float* all, int64_t tokens)> gather_heads;
  // Tensor split with the output matrix split by vocabulary rows: this
  // rank's logits columns [rows, own width] → every rank's, in vocabulary
  // order [rows, n_vocab].
  std::function<Status(const float* own, float* all, int64_t rows)> gather_vocab;
  // Layer split: a forward call of at least 2 × kMinMicroBatch tokens is cut
  // into this many chunks (micro-batches, each at least kMinMicroBatch
  // tokens, none over the workspace), so that a stage computes chunk k + 1
  // while the next stage computes chunk k: the pipeline fills within one
  // step. Every stage must be given the same value. 1: chunks of the
  // workspace's size only.
  int micro_batches = 1;
  static constexpr int64_t kMinMicroBatch = 32;
  // Whether this stage computes logits (with the head kept on rank 0 of a
  // tensor split, the other ranks hold the same residual stream and skip it).
  bool head = true;
};

}  // namespace sustain
