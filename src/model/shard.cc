#include "model/shard.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "gguf/gguf.h"
#include "tensor/qtype.h"

namespace sustain {

std::vector<int64_t> split_bounds(int64_t total, const std::vector<double>& shares) {
  double sum = 0.0;
  for (double r : shares) sum += r;
  std::vector<int64_t> b(shares.size() + 1, 0);
  double cum = 0.0;
  for (size_t d = 0; d + 1 < shares.size(); ++d) {
    cum += shares[d];
    b[d + 1] =
        std::clamp<int64_t>(std::llround(static_cast<double>(total) * cum / sum), b[d], total);
  }
  b.back() = total;
  return b;
}

Expected<ShardGranules> shard_granules(const ArchConfig& c, const gguf::File& f) {
  ShardGranules g;
  for (uint32_t il = 0; il < c.n_layer; ++il) {
    for (const char* role : {"attn_output", "ffn_down", "ssm_out"}) {
      const std::string name = fmt::format("blk.{}.{}.weight", il, role);
      const gguf::TensorInfo* t = f.find_tensor(name);
      if (!t) continue;  // validate_weights names a missing tensor
      const int64_t blk = qtype_traits(t->type).block_elems;
      int64_t& dst = role[0] == 'a' ? g.o_block : role[0] == 'f' ? g.down_block : g.ssm_out_block;
      dst = std::max(dst, blk);
    }
  }
  return g;
}

namespace {

bool all_parts_nonempty(const std::vector<int64_t>& b) {
  for (size_t i = 0; i + 1 < b.size(); ++i)
    if (b[i + 1] <= b[i]) return false;
  return true;
}

std::string per_part(const std::vector<int64_t>& b, int64_t scale) {
  std::string s;
  for (size_t i = 0; i + 1 < b.size(); ++i)
    s += fmt::format("{}{}", i ? ", " : "", (b[i + 1] - b[i]) * scale);
  return s;
}

}  // namespace

Expected<std::vector<TensorShard>> tensor_shards(const ArchConfig& c,
                                                 const std::vector<double>& shares,
                                                 const ShardGranules& g, bool split_head) {
  const int R = static_cast<int>(shares.size());
  if (R < 1) return error(Code::kInvalidArgument, "a tensor split needs at least one rank");
  for (double s : shares)
    if (!(s > 0.0) || !std::isfinite(s))
      return error(Code::kInvalidArgument, "a share of {} is not a positive number", s);
  const int n_head = static_cast<int>(c.n_head), n_kv = static_cast<int>(c.n_head_kv);
  if (n_kv < 1 || n_head % n_kv != 0)
    return error(Code::kInvalidArgument, "{} query heads do not share {} KV heads evenly", n_head,
                 n_kv);
  const int group = n_head / n_kv;

  // Heads: units of `d` query heads, d the largest divisor of the group that
  // leaves every rank a unit (whole KV heads where the ranks allow it).
  std::vector<int64_t> hb;
  int d = 0;
  for (int cand = group; cand >= 1; --cand) {
    if (group % cand != 0) continue;
    std::vector<int64_t> b = split_bounds(n_head / cand, shares);
    if (all_parts_nonempty(b)) {
      hb = std::move(b);
      d = cand;
      break;
    }
  }
  if (d == 0) {
    const std::vector<int64_t> b = split_bounds(n_head, shares);
    for (int r = 0; r < R; ++r)
      if (b[r + 1] <= b[r])
        return error(Code::kInvalidArgument,
                     "the shares leave rank {} without a query head of the model's {} (heads per "
                     "rank: {}); give it a larger share, or use fewer ranks",
                     r, n_head, per_part(b, 1));
  }
  // attn_output's cuts: at each rank's first head, which must start a block
  // of the matrix's format; otherwise every rank multiplies all of it.
  bool o_cols = true;
  for (int r = 1; r < R; ++r)
    o_cols = o_cols && (hb[r] * d * static_cast<int64_t>(c.head_dim_v)) % g.o_block == 0;

  // FFN: whole blocks of ffn_down's format per rank; a mixture of experts
  // whole experts instead (its dense width is unused: every rank keeps it).
  const int64_t n_ff = c.n_ff;
  std::vector<int64_t> fb, eb;
  if (c.is_moe()) {
    eb = split_bounds(c.n_expert, shares);
    for (int r = 0; r < R; ++r)
      if (eb[r + 1] <= eb[r])
        return error(Code::kInvalidArgument,
                     "the shares leave rank {} without an expert of the model's {} (experts per "
                     "rank: {}); give it a larger share, or use fewer ranks",
                     r, c.n_expert, per_part(eb, 1));
  } else if (g.down_block < 1 || n_ff % g.down_block != 0) {
    return error(Code::kInvalidArgument, "an FFN of {} columns is not whole blocks of {}", n_ff,
                 g.down_block);
  }
  if (!c.is_moe()) fb = split_bounds(n_ff / g.down_block, shares);
  for (int r = 0; !c.is_moe() && r < R; ++r)
    if (fb[r + 1] <= fb[r])
      return error(Code::kInvalidArgument,
                   "the shares leave rank {} without a block of the FFN's {} columns (ffn_down is "
                   "cut in blocks of {}; columns per rank: {}); give it a larger share, or use "
                   "fewer ranks",
                   r, n_ff, g.down_block, per_part(fb, g.down_block));

  const std::vector<int64_t> vb = split_bounds(c.n_vocab, shares);
  for (int r = 0; split_head && r < R; ++r)
    if (vb[r + 1] <= vb[r])
      return error(Code::kInvalidArgument,
                   "the shares leave rank {} without a row of the output matrix's {}", r,
                   c.n_vocab);

  // Gated DeltaNet: units of u key heads, u the fewest whose value columns
  // of ssm_out (head_dim each) fill whole blocks of its format, so every
  // run of a rank's value heads starts a block.
  std::vector<int64_t> kb{0, 0};
  if (c.is_hybrid()) {
    const int64_t hk = c.ssm_n_k_heads, hv = c.ssm_n_v_heads, hd = c.ssm_head_dim;
    if (hk < 1 || hv % hk != 0)
      return error(Code::kInvalidArgument,
                   "DeltaNet: {} value heads do not read {} key heads evenly", hv, hk);
    const int64_t blk = std::max<int64_t>(g.ssm_out_block, 1);
    const int64_t u = blk / std::gcd(blk, hd);
    if (hk % u != 0)
      return error(Code::kInvalidArgument,
                   "DeltaNet: {} key heads of {} columns cannot be cut at the {}-column blocks of "
                   "ssm_out's format",
                   hk, hd, blk);
    kb = split_bounds(hk / u, shares);
    for (int r = 0; r < R; ++r)
      if (kb[r + 1] <= kb[r])
        return error(Code::kInvalidArgument,
                     "the shares leave rank {} without a DeltaNet key head of the model's {} (cut "
                     "in runs of {}, as ssm_out's format holds {} columns per block; key heads per "
                     "rank: {}); give it a larger share, or use fewer ranks",
                     r, hk, u, blk, per_part(kb, u));
    for (int64_t& b : kb) b *= u;
  }

  std::vector<TensorShard> out(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) {
    TensorShard& s = out[static_cast<size_t>(r)];
    s.rank = r;
    s.n_ranks = R;
    s.sub_group = d;
    s.head_begin = static_cast<int>(hb[r] * d);
    s.head_end = static_cast<int>(hb[r + 1] * d);
    s.kv_begin = s.head_begin / group;
    s.kv_end = (s.head_end - 1) / group + 1;
    s.o_by_columns = o_cols;
    s.ff_begin = c.is_moe() ? 0 : fb[r] * g.down_block;
    s.ff_end = c.is_moe() ? n_ff : fb[r + 1] * g.down_block;
    if (c.is_moe()) {
      s.expert_begin = static_cast<int>(eb[r]);
      s.expert_end = static_cast<int>(eb[r + 1]);
    }
    s.vocab_begin = split_head ? vb[r] : 0;
    s.vocab_end = split_head ? vb[r + 1] : (r == 0 ? c.n_vocab : 0);
    if (c.is_hybrid()) {
      s.ssm_k_begin = static_cast<int>(kb[r]);
      s.ssm_k_end = static_cast<int>(kb[r + 1]);
    }
  }
  return out;
}

ArchConfig shard_config(const ArchConfig& c, const TensorShard& s) {
  ArchConfig l = c;
  l.n_head = static_cast<uint32_t>(s.n_heads());
  l.n_head_kv = static_cast<uint32_t>(s.n_kv_cached());
  l.n_ff = static_cast<uint32_t>(s.n_ff());
  if (c.is_hybrid() && c.ssm_n_k_heads > 0) {
    const uint32_t per_key = c.ssm_n_v_heads / c.ssm_n_k_heads;
    l.ssm_n_k_heads = static_cast<uint32_t>(s.n_ssm_k());
    l.ssm_n_v_heads = l.ssm_n_k_heads * per_key;
    l.ssm_inner = l.ssm_n_v_heads * c.ssm_head_dim;
  }
  return l;
}

std::string describe(const TensorShard& s) {
  return fmt::format(
      "query heads {}-{} (KV heads {}-{}{}), {}{}, attn_output {}, {}", s.head_begin,
      s.head_end - 1, s.kv_begin, s.kv_end - 1,
      s.expands_kv() ? fmt::format(", cached as {}", s.n_kv_cached()) : "",
      s.n_ssm_k() > 0 ? fmt::format("DeltaNet key heads {}-{} with their value heads, ",
                                    s.ssm_k_begin, s.ssm_k_end - 1)
                      : std::string(),
      s.n_experts() > 0 ? fmt::format("experts {}-{}", s.expert_begin, s.expert_end - 1)
                        : fmt::format("FFN columns {}-{}", s.ff_begin, s.ff_end - 1),
      s.o_by_columns ? "by columns" : "whole (heads gathered)",
      s.n_vocab() > 0 ? fmt::format("output rows {}-{}", s.vocab_begin, s.vocab_end - 1)
                      : std::string("no output rows"));
}

}  // namespace sustain
