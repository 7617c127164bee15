// A tensor split (docs/split.md): the share of every block one rank holds
// when a model is split by tensors over several ranks. A rank keeps a run of
// query heads with the K/V heads they read (and caches only those), the
// matching columns of attn_output, and a run of the FFN's hidden columns
// (rows of gate/up, columns of down). A hybrid model's Gated DeltaNet blocks
// are cut by key heads: a rank keeps a run of them with every value head
// that reads them, those heads' channels of the convolution and their
// recurrent state, and the matching columns of ssm_out. Its attn_output,
// ssm_out and ffn_down products are partial sums that the ranks add together
// (one all-reduce each); the cuts fall on the block boundaries of the
// matrices' formats, so every rank reads its weights in place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/arch_config.h"

namespace sustain {
namespace gguf {
class File;
}

// Splits `total` items over parts in proportion to `shares` (each > 0):
// part d gets [bounds[d], bounds[d + 1]), boundaries rounded from the
// cumulative shares. Both splits (layer and tensor) and `plan` use it.
std::vector<int64_t> split_bounds(int64_t total, const std::vector<double>& shares);

struct TensorShard {
  int rank = 0, n_ranks = 1;
  int head_begin = 0, head_end = 0;  // query heads [begin, end) of the model's n_head
  // Query heads per cached KV head. The model's GQA group, unless there are
  // too few KV heads for the ranks: then a divisor of it, and a KV head whose
  // group spans ranks is projected and cached by each of them.
  int sub_group = 1;
  int kv_begin = 0, kv_end = 0;  // the model's KV heads whose K/V rows this rank projects
  // attn_output cut by input columns at head_begin (partial sums, summed over
  // the ranks). False where such a cut would fall inside a block of the
  // matrix's format: every rank then gathers all heads' attention outputs
  // and multiplies the whole matrix.
  bool o_by_columns = true;
  int64_t ff_begin = 0, ff_end = 0;  // FFN hidden columns [begin, end) of n_ff
  // Rows of the output matrix (vocabulary entries) this rank multiplies:
  // its share when the head is split (rank 0 gathers the logits), all of
  // them on rank 0 and none elsewhere when it is not.
  int64_t vocab_begin = 0, vocab_end = 0;
  // Gated DeltaNet blocks (hybrid models): key heads [ssm_k_begin,
  // ssm_k_end) of the model's ssm_n_k_heads, and the value heads that read
  // them — value head j reads key head j mod n_k, so key head k is read by
  // k, k + n_k, k + 2·n_k, … The rank orders its value heads group by group
  // (all of its heads of the first n_k, then of the next), which keeps the
  // rule "local value head j reads local key head j mod (its key heads)".
  int ssm_k_begin = 0, ssm_k_end = 0;
  // Mixture of experts: the experts [expert_begin, expert_end) of n_expert,
  // whole (their gate, up and down matrices). Every rank routes every token
  // with the whole router and runs the chosen experts it holds; the ranks'
  // weighted sums are partial sums of the block's output (one all-reduce).
  int expert_begin = 0, expert_end = 0;

  int n_ssm_k() const { return ssm_k_end - ssm_k_begin; }
  int n_experts() const { return expert_end - expert_begin; }
  int n_heads() const { return head_end - head_begin; }
  int n_kv_cached() const { return n_heads() / sub_group; }
  int64_t n_ff() const { return ff_end - ff_begin; }
  int64_t n_vocab() const { return vocab_end - vocab_begin; }
  // The rank's cache holds more KV heads than it projects (a spanning group).
  bool expands_kv() const { return n_kv_cached() != kv_end - kv_begin; }
};

// The formats' blocks the cuts must respect: the widest block (in elements)
// of any block's attn_output, ffn_down and ssm_out (1 for f32/f16).
struct ShardGranules {
  int64_t o_block = 1, down_block = 1, ssm_out_block = 1;
};
Expected<ShardGranules> shard_granules(const ArchConfig& c, const gguf::File& f);

// Each rank's share for `shares.size()` ranks; `split_head`: the output
// matrix by vocabulary rows too (else all on rank 0). kInvalidArgument naming
// the rank when a share leaves a rank without a query head, an FFN block or
// (split head) a vocabulary row, (hybrid) a DeltaNet key head or (MoE) an
// expert.
Expected<std::vector<TensorShard>> tensor_shards(const ArchConfig& c,
                                                 const std::vector<double>& shares,
                                                 const ShardGranules& g, bool split_head = true);

// The architecture as the rank sees it: its heads, cached KV heads, FFN
// width and DeltaNet heads.
ArchConfig shard_config(const ArchConfig& c, const TensorShard& s);

// "heads 0-3 (KV 0), FFN 0-4095, attn_output by columns" for logs and errors.
std::string describe(const TensorShard& s);

}  // namespace sustain
