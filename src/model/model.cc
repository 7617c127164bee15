#include "model/model.h"
#include "model/repack.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/delta_rule.h"
#include "model/transformer.h"
#include "model/weights.h"

namespace sustain {
namespace {

kernels::WeightView view_of(const gguf::TensorInfo& t) {
  kernels::WeightView v;
  v.type = t.type;
  v.n_out = t.shape.size() == 2 ? t.shape[0] : 1;
  v.n_in = t.shape.back();
  v.data = t.data;
  v.row_bytes = qtype_row_bytes(t.type, static_cast<uint64_t>(v.n_in));
  return v;
}

// Expert e of a stacked [n_expert, out, in] tensor, as a matrix view.
kernels::WeightView expert_view(const gguf::TensorInfo& t, int64_t e) {
  kernels::WeightView v;
  v.type = t.type;
  v.n_out = t.shape[1];
  v.n_in = t.shape[2];
  v.row_bytes = qtype_row_bytes(t.type, static_cast<uint64_t>(v.n_in));
  v.data = static_cast<const uint8_t*>(t.data) + static_cast<size_t>(e * v.n_out) * v.row_bytes;
  return v;
}

std::vector<kernels::WeightView> expert_views(const gguf::TensorInfo& t) {
  std::vector<kernels::WeightView> out;
  for (int64_t e = 0; e < t.shape[0]; ++e) out.push_back(expert_view(t, e));
  return out;
}

// 1-D tensors (norm gains, biases, rope factors) are small: keep them as f32.
Expected<std::vector<float>> to_f32(const gguf::File& f, const gguf::TensorInfo& t) {
  const auto& tr = qtype_traits(t.type);
  if (!tr.dequantize)
    return error(Code::kUnsupported, "{}: tensor `{}` is {}, which sustain cannot read", f.path(),
                 t.name, qtype_name(t.type));
  std::vector<float> out(t.n_elements);
  tr.dequantize(t.data, out.data(), static_cast<int64_t>(t.n_elements));
  for (float x : out)
    if (!std::isfinite(x))
      return error(Code::kBadFile, "{}: tensor `{}` holds a non-finite value", f.path(), t.name);
  return out;
}

// Rows [r0, r1) of a matrix: a view into the same bytes.
kernels::WeightView rows_of(kernels::WeightView v, int64_t r0, int64_t r1) {
  v.data = static_cast<const uint8_t*>(v.data) + static_cast<size_t>(r0) * v.row_bytes;
  v.n_out = r1 - r0;
  return v;
}

// Index ranges [begin, end) of a matrix's rows or columns, or a vector's
// entries, in the order the rank keeps them.
using Ranges = std::vector<std::pair<int64_t, int64_t>>;

int64_t count(const Ranges& rs) {
  int64_t n = 0;
  for (const auto& [b, e] : rs) n += e - b;
  return n;
}

// Input columns `cols` of a matrix, each range starting on a block boundary
// of its format, copied row by row into `store` so the rank's share is
// contiguous: a view over the whole rows read half of every row and
// measured 2x slower than the whole matrix (decode, streaming every layer
// once; Zen 4), and it kept every page of the matrix resident on every rank.
kernels::WeightView cols_of(kernels::WeightView v, const Ranges& cols,
                            std::vector<std::unique_ptr<uint8_t[]>>& store) {
  const size_t row = qtype_row_bytes(v.type, static_cast<uint64_t>(count(cols)));
  auto buf = std::make_unique_for_overwrite<uint8_t[]>(row * static_cast<size_t>(v.n_out));
  const auto* src = static_cast<const uint8_t*>(v.data);
  for (int64_t r = 0; r < v.n_out; ++r) {
    uint8_t* dst = buf.get() + static_cast<size_t>(r) * row;
    for (const auto& [c0, c1] : cols) {
      const size_t off = qtype_row_bytes(v.type, static_cast<uint64_t>(c0));
      const size_t n = qtype_row_bytes(v.type, static_cast<uint64_t>(c1 - c0));
      std::memcpy(dst, src + static_cast<size_t>(r) * v.row_bytes + off, n);
      dst += n;
    }
  }
  hand_back_pages(v);  // the rank reads only its copy from now on
  v.data = buf.get();
  v.n_in = count(cols);
  v.row_bytes = row;
  store.push_back(std::move(buf));
  return v;
}

kernels::WeightView cols_of(kernels::WeightView v, int64_t c0, int64_t c1,
                            std::vector<std::unique_ptr<uint8_t[]>>& store) {
  return cols_of(v, Ranges{{c0, c1}}, store);
}

// Rows `rows` of a matrix: a view into the same bytes where they are one
// range, else copied together into `store`.
kernels::WeightView rows_of(kernels::WeightView v, const Ranges& rows,
                            std::vector<std::unique_ptr<uint8_t[]>>& store) {
  if (rows.size() == 1) return rows_of(v, rows[0].first, rows[0].second);
  auto buf =
      std::make_unique_for_overwrite<uint8_t[]>(static_cast<size_t>(count(rows)) * v.row_bytes);
  uint8_t* dst = buf.get();
  for (const auto& [r0, r1] : rows) {
    const size_t n = static_cast<size_t>(r1 - r0) * v.row_bytes;
    std::memcpy(dst, static_cast<const uint8_t*>(v.data) + static_cast<size_t>(r0) * v.row_bytes,
                n);
    dst += n;
  }
  hand_back_pages(v);  // the rank reads only its copy from now on
  v.data = buf.get();
  v.n_out = count(rows);
  store.push_back(std::move(buf));
  return v;
}

std::vector<float> slice(const std::vector<float>& v, int64_t b, int64_t e) {
  if (v.empty()) return v;
  return {v.begin() + b, v.begin() + e};
}

// Entries `rs` of a vector whose items are `width` floats each.
std::vector<float> gather(const std::vector<float>& v, const Ranges& rs, int64_t width = 1) {
  std::vector<float> out;
  out.reserve(static_cast<size_t>(count(rs) * width));
  for (const auto& [b, e] : rs) out.insert(out.end(), v.begin() + b * width, v.begin() + e * width);
  return out;
}

// A DeltaNet block's cut (TensorShard::ssm_k_begin): the rank's value heads,
// group by group, as ranges of the model's value heads, times `scale`.
Ranges value_heads(const ArchConfig& c, const TensorShard& s, int64_t scale, int64_t offset = 0) {
  Ranges rs;
  const int64_t hk = c.ssm_n_k_heads;
  for (int64_t g = 0; g < int64_t{c.ssm_n_v_heads} / hk; ++g)
    rs.push_back(
        {offset + (g * hk + s.ssm_k_begin) * scale, offset + (g * hk + s.ssm_k_end) * scale});
  return rs;
}

// Its channels of the convolution (and rows of attn_qkv): its key heads' q
// and k channels, then its value heads' v channels.
Ranges conv_channels(const ArchConfig& c, const TensorShard& s) {
  const int64_t hk = c.ssm_n_k_heads, hd = c.ssm_head_dim;
  Ranges rs{{s.ssm_k_begin * hd, s.ssm_k_end * hd},
            {(hk + s.ssm_k_begin) * hd, (hk + s.ssm_k_end) * hd}};
  for (const auto& r : value_heads(c, s, hd, 2 * hk * hd)) rs.push_back(r);
  return rs;
}

// Cuts every block's weights to the rank's share (model/shard.h); Model::load
// has checked that the cuts fall where the formats allow. The embedding
// table stays whole (every rank embeds); a tied output matrix is cut as its
// own view.
void apply_shard(const ArchConfig& c, const TensorShard& s, ModelWeights& w,
                 std::vector<std::unique_ptr<uint8_t[]>>& store) {
  w.output = rows_of(w.output, s.vocab_begin, s.vocab_end);
  const int64_t hk = c.head_dim_k, hv = c.head_dim_v;
  // qwen35: attn_q's rows hold each head's query and then its gate.
  const int64_t q_rows = c.has_attn_gate() ? 2 * hk : hk;
  // An MTP block stays as mapped: speculation does not run over ranks, so
  // no rank reads it.
  for (uint32_t il = 0; il < c.n_main_layer(); ++il) {
    LayerWeights& L = w.layers[il];
    if (c.is_moe()) {
      // The rank's experts stay views into the mapping; the others are
      // dropped (their pages are never touched).
      for (auto* exps : {&L.gate_exps, &L.up_exps, &L.down_exps})
        for (int e = 0; e < static_cast<int>(exps->size()); ++e)
          if (e < s.expert_begin || e >= s.expert_end) (*exps)[static_cast<size_t>(e)] = {};
    } else {
      L.w_gate = rows_of(L.w_gate, s.ff_begin, s.ff_end);
      L.w_up = rows_of(L.w_up, s.ff_begin, s.ff_end);
      L.w_down = cols_of(L.w_down, s.ff_begin, s.ff_end, store);
    }
    if (c.is_recurrent(il)) {
      const int64_t hd = c.ssm_head_dim;
      const Ranges ch = conv_channels(c, s);
      L.ssm_qkv = rows_of(L.ssm_qkv, ch, store);
      L.ssm_conv = gather(L.ssm_conv, ch, c.ssm_conv_kernel);
      L.ssm_gate = rows_of(L.ssm_gate, value_heads(c, s, hd), store);
      L.ssm_beta = rows_of(L.ssm_beta, value_heads(c, s, 1), store);
      L.ssm_alpha = rows_of(L.ssm_alpha, value_heads(c, s, 1), store);
      L.ssm_dt_bias = gather(L.ssm_dt_bias, value_heads(c, s, 1));
      L.ssm_a = gather(L.ssm_a, value_heads(c, s, 1));
      L.ssm_out = cols_of(L.ssm_out, value_heads(c, s, hd), store);
      continue;
    }
    L.wq = rows_of(L.wq, s.head_begin * q_rows, s.head_end * q_rows);
    L.bq = slice(L.bq, s.head_begin * hk, s.head_end * hk);
    L.wk = rows_of(L.wk, s.kv_begin * hk, s.kv_end * hk);
    L.bk = slice(L.bk, s.kv_begin * hk, s.kv_end * hk);
    L.wv = rows_of(L.wv, s.kv_begin * hv, s.kv_end * hv);
    L.bv = slice(L.bv, s.kv_begin * hv, s.kv_end * hv);
    if (s.o_by_columns) L.wo = cols_of(L.wo, s.head_begin * hv, s.head_end * hv, store);
  }
}

// Whether `s` is a cut tensor_shards could have made for this file: its
// ranges inside the model and on the formats' block boundaries.
bool cut_fits(const ArchConfig& c, const ShardGranules& g, const TensorShard& s) {
  const bool heads = s.head_begin >= 0 && s.n_heads() >= 1 && s.sub_group >= 1 &&
                     s.head_end <= static_cast<int>(c.n_head) && c.n_head_kv > 0 &&
                     (c.n_head / c.n_head_kv) % s.sub_group == 0 &&
                     s.n_heads() % s.sub_group == 0 &&
                     (!s.o_by_columns || (s.head_begin * int64_t{c.head_dim_v}) % g.o_block == 0);
  const bool vocab = s.vocab_begin >= 0 && s.n_vocab() >= 0 && s.vocab_end <= int64_t{c.n_vocab};
  const bool ffn = c.is_moe() ? s.expert_begin >= 0 && s.n_experts() >= 1 &&
                                    s.expert_end <= static_cast<int>(c.n_expert)
                              : s.n_experts() == 0 && s.ff_begin >= 0 && s.n_ff() >= 1 &&
                                    s.ff_end <= int64_t{c.n_ff} && s.ff_begin % g.down_block == 0 &&
                                    s.n_ff() % g.down_block == 0;
  const int64_t hd = c.ssm_head_dim, blk = g.ssm_out_block;
  const bool ssm =
      !c.is_hybrid() ||
      (s.ssm_k_begin >= 0 && s.n_ssm_k() >= 1 && s.ssm_k_end <= static_cast<int>(c.ssm_n_k_heads) &&
       c.ssm_n_v_heads % c.ssm_n_k_heads == 0 && (s.ssm_k_begin * hd) % blk == 0 &&
       (s.ssm_k_end * hd) % blk == 0 && (int64_t{c.ssm_n_k_heads} * hd) % blk == 0);
  return heads && vocab && ffn && ssm;
}

}  // namespace

Expected<std::unique_ptr<Model>> Model::load(const std::string& path, const TensorShard* shard) {
  std::unique_ptr<Model> m(new Model());
  SUSTAIN_ASSIGN_OR_RETURN(m->file_, gguf::File::open(path));
  const gguf::File& f = m->file_;
  SUSTAIN_ASSIGN_OR_RETURN(m->cfg_, arch_config_from_gguf(f));
  SUSTAIN_TRY(validate_weights(m->cfg_, f));
  const ArchConfig& c = m->cfg_;
  ModelWeights& w = m->w_;
  w.layers.resize(c.n_layer);

  // Walk the one weight table; each entry lands in its slot by role.
  for (const WeightSpec& spec : weight_table(c, f.find_tensor("rope_freqs.weight") != nullptr)) {
    const gguf::TensorInfo* t = f.find_tensor(spec.name);
    if (!t) continue;  // optional and absent (validate_weights checked the required ones)
    if (spec.is_matrix() && !kernels::matmul_supported(t->type))
      return error(Code::kUnsupported, "{}: tensor `{}` is {}, which sustain cannot multiply yet",
                   path, t->name, qtype_name(t->type));
    auto vec = [&](std::vector<float>& dst) -> Status {
      SUSTAIN_ASSIGN_OR_RETURN(dst, to_f32(f, *t));
      return Status::ok();
    };
    LayerWeights* L = spec.layer >= 0 ? &w.layers[static_cast<size_t>(spec.layer)] : nullptr;
    switch (spec.role) {
      case TensorRole::kTokenEmbd: w.token_embd = view_of(*t); break;
      case TensorRole::kOutput: w.output = view_of(*t); break;
      case TensorRole::kOutputNorm: SUSTAIN_TRY(vec(w.output_norm)); break;
      case TensorRole::kRopeFreqs: SUSTAIN_TRY(vec(w.rope_freqs)); break;
      case TensorRole::kAttnNorm: SUSTAIN_TRY(vec(L->attn_norm)); break;
      case TensorRole::kAttnQ: L->wq = view_of(*t); break;
      case TensorRole::kAttnK: L->wk = view_of(*t); break;
      case TensorRole::kAttnV: L->wv = view_of(*t); break;
      case TensorRole::kAttnQBias: SUSTAIN_TRY(vec(L->bq)); break;
      case TensorRole::kAttnKBias: SUSTAIN_TRY(vec(L->bk)); break;
      case TensorRole::kAttnVBias: SUSTAIN_TRY(vec(L->bv)); break;
      case TensorRole::kAttnQNorm: SUSTAIN_TRY(vec(L->q_norm)); break;
      case TensorRole::kAttnKNorm: SUSTAIN_TRY(vec(L->k_norm)); break;
      case TensorRole::kAttnOutput: L->wo = view_of(*t); break;
      case TensorRole::kFfnNorm: SUSTAIN_TRY(vec(L->ffn_norm)); break;
      case TensorRole::kFfnGate: L->w_gate = view_of(*t); break;
      case TensorRole::kFfnUp: L->w_up = view_of(*t); break;
      case TensorRole::kFfnDown: L->w_down = view_of(*t); break;
      case TensorRole::kFfnGateInp: L->router = view_of(*t); break;
      case TensorRole::kFfnGateExps: L->gate_exps = expert_views(*t); break;
      case TensorRole::kFfnUpExps: L->up_exps = expert_views(*t); break;
      case TensorRole::kFfnDownExps: L->down_exps = expert_views(*t); break;
      case TensorRole::kAttnPostNorm: SUSTAIN_TRY(vec(L->attn_post_norm)); break;
      case TensorRole::kFfnPostNorm: SUSTAIN_TRY(vec(L->ffn_post_norm)); break;
      case TensorRole::kSsmQkv: L->ssm_qkv = view_of(*t); break;
      case TensorRole::kSsmGate: L->ssm_gate = view_of(*t); break;
      case TensorRole::kSsmBeta: L->ssm_beta = view_of(*t); break;
      case TensorRole::kSsmAlpha: L->ssm_alpha = view_of(*t); break;
      case TensorRole::kSsmOut: L->ssm_out = view_of(*t); break;
      case TensorRole::kSsmDtBias: SUSTAIN_TRY(vec(L->ssm_dt_bias)); break;
      case TensorRole::kSsmA: SUSTAIN_TRY(vec(L->ssm_a)); break;
      case TensorRole::kSsmConv1d: SUSTAIN_TRY(vec(L->ssm_conv)); break;
      case TensorRole::kSsmNorm: SUSTAIN_TRY(vec(L->ssm_norm)); break;
      case TensorRole::kNextnEhProj: L->nextn_eh_proj = view_of(*t); break;
      case TensorRole::kNextnEmbedTokens: L->nextn_embed = view_of(*t); break;
      case TensorRole::kNextnSharedHeadHead: L->nextn_head = view_of(*t); break;
      case TensorRole::kNextnEnorm: SUSTAIN_TRY(vec(L->nextn_enorm)); break;
      case TensorRole::kNextnHnorm: SUSTAIN_TRY(vec(L->nextn_hnorm)); break;
      case TensorRole::kNextnSharedHeadNorm: SUSTAIN_TRY(vec(L->nextn_head_norm)); break;
    }
  }
  if (c.tied_output) w.output = w.token_embd;
  if (!kernels::matmul_supported(w.output.type))
    return error(Code::kUnsupported, "{}: output matrix is {}, which sustain cannot multiply yet",
                 path, qtype_name(w.output.type));
  m->file_cfg_ = c;
  if (shard) {
    SUSTAIN_ASSIGN_OR_RETURN(const ShardGranules g, shard_granules(c, f));
    if (!cut_fits(c, g, *shard))
      return error(Code::kInvalidArgument, "{}: a tensor split cut the file's formats cannot take ({})",
                   path, describe(*shard));
    apply_shard(c, *shard, w, m->owned_);
    m->shard_ = *shard;
    m->cfg_ = shard_config(c, *shard);
  }
  // After the cut: a rank repacks only its share.
  if (weight_repack()) m->repack_ = repack_weights(w, m->owned_);
  return m;
}

kv::KvGeometry Model::kv_geometry(QType k_type, QType v_type, int page_tokens,
                                  int state_slots) const {
  kv::KvGeometry g;
  g.n_layer = static_cast<int>(cfg_.n_kv_layer());
  if (cfg_.is_hybrid()) {
    g.state.n_layer = static_cast<int>(cfg_.n_recurrent_layer());
    g.state.conv_rows = static_cast<int>(cfg_.ssm_conv_kernel) - 1;
    g.state.conv_channels = static_cast<int>(cfg_.ssm_conv_channels());
    g.state.n_head = static_cast<int>(cfg_.ssm_n_v_heads);
    g.state.head_dim_k = static_cast<int>(cfg_.ssm_head_dim);
    g.state.head_dim_v = static_cast<int>(cfg_.ssm_head_dim);
    g.state_slots = state_slots;
  }
  g.n_head_kv = static_cast<int>(cfg_.n_head_kv);
  g.head_dim_k = static_cast<int>(cfg_.head_dim_k);
  g.head_dim_v = static_cast<int>(cfg_.head_dim_v);
  g.k_type = k_type;
  g.v_type = v_type;
  g.page_tokens = page_tokens;
  // Sliding-window blocks keep their K/V in the window pool; the caller
  // sizes it (window_seqs, window_step, window_snapshots).
  if (cfg_.sliding_window > 0) {
    g.window = static_cast<int32_t>(cfg_.sliding_window);
    g.window_layers = cfg_.kv_window_layers();
  }
  return g;
}

Workspace Model::make_workspace(int64_t max_tokens, int n_threads) const {
  const ArchConfig& c = cfg_;
  Workspace ws;
  ws.max_tokens = std::max<int64_t>(1, max_tokens);
  const auto n = static_cast<size_t>(ws.max_tokens);
  ws.x.resize(n * c.n_embd);
  ws.cur.resize(n * c.n_embd);
  ws.q.resize(n * c.q_dim());
  ws.k.resize(n * c.k_dim());
  ws.v.resize(n * c.v_dim());
  ws.attn_out.resize(n * c.n_head * c.head_dim_v);
  ws.rope_table.reserve(n * c.rope_dim);  // resized by the forward, never past this
  ws.rope_pos.reserve(n);
  if (shard_ && !shard_->o_by_columns) ws.attn_all.resize(n * file_cfg_.n_head * c.head_dim_v);
  if (shard_ && shard_->n_vocab() < c.n_vocab)
    ws.logits_part.resize(n * static_cast<size_t>(std::max<int64_t>(shard_->n_vocab(), 1)));
  const size_t ffw = c.ffn_width();
  ws.gate.resize(n * ffw);
  ws.up.resize(n * ffw);
  ws.hidden.resize(n * ffw);
  if (c.is_moe()) {
    // Experts run in groups of up to this many routed rows: every expert of
    // a step of up to 64 tokens at once, and never fewer rows than one
    // expert can get (max_tokens).
    const auto K = static_cast<int64_t>(c.n_expert_used);
    ws.expert_group_rows = std::max(ws.max_tokens, std::min<int64_t>(ws.max_tokens * K, 64 * K));
    const auto g = static_cast<size_t>(ws.expert_group_rows);
    for (auto* b : {&ws.gate, &ws.up, &ws.hidden}) b->resize(std::max(b->size(), g * c.n_ff_exp));
    ws.expert_jobs.reserve(2 * c.n_expert);
    ws.router_logits.resize(n * c.n_expert);
    ws.expert_weight.resize(n * c.n_expert_used);
    ws.expert_id.resize(n * c.n_expert_used);
    ws.expert_rows.resize(n * c.n_expert_used);
    ws.expert_start.resize(c.n_expert + 1);
    ws.expert_next.resize(c.n_expert);
    ws.expert_in.resize(g * c.n_embd);
    ws.expert_out.resize(g * c.n_embd);
    if (shard_) ws.moe_partial.resize(n * c.n_embd);
  }
  ws.logits_in.resize(n * c.n_embd);
  if (c.has_attn_gate()) {
    ws.q_gate.resize(n * 2 * c.q_dim());
    ws.attn_gate.resize(n * c.q_dim());
  }
  if (c.n_nextn > 0) ws.mtp_in.resize(n * 2 * c.n_embd);
  if (c.is_hybrid()) {
    ws.ssm_mixed.resize(n * c.ssm_conv_channels());
    ws.ssm_conv.resize(n * c.ssm_conv_channels());
    ws.ssm_z.resize(n * c.ssm_inner);
    ws.ssm_o.resize(n * c.ssm_inner);
    ws.ssm_beta.resize(n * c.ssm_n_v_heads);
    ws.ssm_g.resize(n * c.ssm_n_v_heads);
    ws.ssm_scratch_floats = kernels::delta_rule_scratch_floats(
        kDeltaRuleChunk, static_cast<int>(c.ssm_head_dim), static_cast<int>(c.ssm_head_dim));
    ws.ssm_scratch.resize(ws.ssm_scratch_floats * static_cast<size_t>(std::max(1, n_threads)));
  }
  // Matmul scratch: the largest activation row set of any matrix in the model.
  size_t ms = 0;
  auto need = [&](const kernels::WeightView& v) {
    if (v.data) ms = std::max(ms, kernels::matmul_scratch_bytes(v.type, v.n_in, ws.max_tokens));
  };
  if (w_.output.n_out > 0) need(w_.output);
  for (const auto& L : w_.layers) {
    for (const auto* v : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.router,
                          &L.ssm_qkv, &L.ssm_gate, &L.ssm_beta, &L.ssm_alpha, &L.ssm_out,
                          &L.nextn_eh_proj, &L.nextn_head})
      need(*v);
    // q, k, v and gate, up run as batches of one input (transformer.cc),
    // each quantizing the input once per activation format at worst.
    auto group = [&](std::initializer_list<const kernels::WeightView*> vs) {
      size_t sum = 0;
      for (const auto* v : vs)
        if (v->data) sum += kernels::matmul_scratch_bytes(v->type, v->n_in, ws.max_tokens);
      ms = std::max(ms, sum);
    };
    group({&L.wq, &L.wk, &L.wv});
    group({&L.w_gate, &L.w_up});
    // Expert products run in batches (kernels::matmul_batch) of up to
    // expert_group_rows rows; a gate and up batch quantizes the rows twice
    // at worst (when the two differ in activation format).
    for (const auto* exps : {&L.gate_exps, &L.up_exps, &L.down_exps})
      for (const auto& v : *exps)
        if (v.data)
          ms =
              std::max(ms, kernels::matmul_scratch_bytes(v.type, v.n_in, 2 * ws.expert_group_rows));
  }
  ws.matmul_scratch.resize(std::max<size_t>(ms, 64));
  attention::AttnParams ap = attn_params(c);
  ws.attn_scratch.resize(
      std::max<size_t>(attention::attention_scratch_bytes(ap, ws.max_tokens, n_threads), 64));
  ws.queries.reserve(n);
  return ws;
}

namespace {

Status check_batch(const ArchConfig& cfg, const Batch& batch) {
  for (const auto& t : batch.tokens) {
    if (t.embd == nullptr && (t.id < 0 || static_cast<uint32_t>(t.id) >= cfg.n_vocab))
      return error(Code::kInvalidArgument, "token id {} is outside the vocabulary (0..{})", t.id,
                   cfg.n_vocab - 1);
    if (t.seq < 0 || static_cast<size_t>(t.seq) >= batch.seqs.size() || !batch.seqs[t.seq])
      return error(Code::kInvalidArgument, "batch token refers to sequence {} of {}", t.seq,
                   batch.seqs.size());
    if (t.pos < 0 || t.pos >= batch.seqs[t.seq]->n_tokens)
      return error(Code::kInvalidArgument,
                   "token at position {} has no KV slot (sequence has room for {})", t.pos,
                   batch.seqs[t.seq]->n_tokens);
    if (t.n_visible != 0 && (t.n_visible <= t.pos || t.n_visible > batch.seqs[t.seq]->n_tokens))
      return error(Code::kInvalidArgument,
                   "token at position {} would see {} positions (at least {}, at most the {} its "
                   "sequence has room for)",
                   t.pos, t.n_visible, t.pos + 1, batch.seqs[t.seq]->n_tokens);
  }
  return Status::ok();
}

// The end of the forward chunk from b0: at most max_tokens tokens, moved
// back to the start of a non-causal block it would cut (unless that block
// starts the chunk: check_noncausal then names the problem).
int64_t chunk_end(const Batch& batch, int64_t b0, int64_t max_tokens) {
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  const int64_t b1 = std::min(n, b0 + max_tokens);
  auto same_block = [&](int64_t i) {  // tokens i-1 and i are one block
    const BatchToken& a = batch.tokens[static_cast<size_t>(i - 1)];
    const BatchToken& b = batch.tokens[static_cast<size_t>(i)];
    return a.seq == b.seq && b.pos == a.pos + 1 && a.n_visible > a.pos + 1 &&
           a.n_visible == b.n_visible;
  };
  int64_t c = b1;
  while (c < n && c > b0 && same_block(c)) --c;
  return c > b0 ? c : b1;
}

// A token that sees later positions (a non-causal block) needs them in the
// same forward chunk, in order, so their K/V is stored before it attends.
Status check_noncausal(const ArchConfig& cfg, const Batch& batch, int64_t b0, int64_t b1) {
  for (int64_t i = b0; i < b1; ++i) {
    const BatchToken& t = batch.tokens[static_cast<size_t>(i)];
    if (t.n_visible <= t.pos + 1) continue;
    if (cfg.n_recurrent_layer() > 0)
      return error(Code::kUnsupported,
                   "non-causal tokens in a model with recurrent (linear-attention) layers");
    const int64_t j = i + (t.n_visible - 1 - t.pos);
    const BatchToken* last = j < b1 ? &batch.tokens[static_cast<size_t>(j)] : nullptr;
    if (!last || last->seq != t.seq || last->pos != t.n_visible - 1)
      return error(Code::kInvalidArgument,
                   "the non-causal block of the token at position {} (to position {}) is not in "
                   "one forward chunk of at most {} tokens",
                   t.pos, t.n_visible - 1, b1 - b0);
  }
  return Status::ok();
}

}  // namespace

kv::KvGeometry Model::mtp_kv_geometry(QType k_type, QType v_type, int page_tokens) const {
  kv::KvGeometry g = kv_geometry(k_type, v_type, page_tokens);
  g.n_layer = static_cast<int>(cfg_.n_nextn);
  g.state = {};
  return g;
}

Status Model::forward_mtp(const Batch& batch, const float* h_prev, kv::KvCache& mtp_cache,
                          Workspace& ws, ThreadPool& pool, float* logits, float* x_rows) const {
  if (cfg_.n_nextn == 0)
    return error(Code::kUnsupported, "{}: the model has no MTP/NextN block", file_.path());
  SUSTAIN_TRY(check_batch(cfg_, batch));
  if (mtp_cache.geometry().n_layer < 1 || mtp_cache.has_state())
    return error(Code::kInvalidArgument, "forward_mtp needs a cache of mtp_kv_geometry()");
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  int64_t logit_row = 0;
  for (int64_t b0 = 0; b0 < n; b0 += ws.max_tokens) {
    const int64_t b1 = std::min(n, b0 + ws.max_tokens);
    TokenSpan span{batch, b0, b1};
    float* out = logits ? logits + logit_row * static_cast<int64_t>(cfg_.n_vocab) : nullptr;
    SUSTAIN_TRY(forward_qwen35_mtp(*this, span, h_prev, mtp_cache, ws, pool, out));
    const int64_t d = cfg_.n_embd;
    for (int64_t i = b0; i < b1; ++i) {
      if (!batch.tokens[static_cast<size_t>(i)].logits) continue;
      if (x_rows) std::copy_n(ws.x.data() + (i - b0) * d, d, x_rows + logit_row * d);
      ++logit_row;
    }
  }
  return Status::ok();
}

Status Model::mtp_head(const float* x_rows, int64_t rows, Workspace& ws, ThreadPool& pool,
                       float* logits, float* normed) const {
  if (cfg_.n_nextn == 0)
    return error(Code::kUnsupported, "{}: the model has no MTP/NextN block", file_.path());
  const LayerWeights& L = w_.layers[cfg_.n_main_layer()];
  const float* gain = (L.nextn_head_norm.empty() ? w_.output_norm : L.nextn_head_norm).data();
  const kernels::WeightView& head = L.nextn_head.data ? L.nextn_head : w_.output;
  const int64_t d = cfg_.n_embd;
  for (int64_t r0 = 0; r0 < rows; r0 += ws.max_tokens) {
    const int64_t n = std::min(rows - r0, ws.max_tokens);
    for (int64_t i = 0; i < n; ++i)
      kernels::rms_norm(x_rows + (r0 + i) * d, gain, ws.logits_in.data() + i * d, d, cfg_.rms_eps);
    if (normed) std::copy_n(ws.logits_in.data(), n * d, normed + r0 * d);
    float* out = logits + r0 * head.n_out;
    kernels::matmul(head, ws.logits_in.data(), d, n, out, head.n_out, pool,
                    ws.matmul_scratch.data());
    if (const float cap = cfg_.final_logit_softcap; cap > 0.0f)
      for (int64_t i = 0; i < n * head.n_out; ++i) out[i] = cap * std::tanh(out[i] / cap);
  }
  return Status::ok();
}

void Model::size_record(RecurrentRecord& rec, int64_t n) const {
  rec.n_max = n;
  rec.width = int64_t{cfg_.ssm_conv_channels()} + 2 * int64_t{cfg_.ssm_n_v_heads};
  rec.rows.resize(static_cast<size_t>(int64_t{cfg_.n_recurrent_layer()} * n * rec.width));
}

Status Model::replay_recurrent(const RecurrentRecord& rec, int64_t n, kv::KvCache& cache,
                               Workspace& ws, ThreadPool& pool) const {
  if (!cfg_.is_hybrid() || !cache.has_state())
    return error(Code::kInvalidArgument, "replay_recurrent: the model keeps no recurrent state");
  if (n < 0 || n > rec.n_max || n > ws.max_tokens ||
      rec.width != int64_t{cfg_.ssm_conv_channels()} + 2 * int64_t{cfg_.ssm_n_v_heads} ||
      rec.rows.size() <
          static_cast<size_t>(int64_t{cfg_.n_recurrent_layer()} * rec.n_max * rec.width))
    return error(Code::kInvalidArgument,
                 "replay_recurrent: a record of {} positions cannot give {}", rec.n_max, n);
  kv::StatePool& states = cache.states();
  if (states.pos(rec.slot) != rec.pos0)
    return error(Code::kInvalidArgument,
                 "replay_recurrent: state {} stands at position {}, the record starts at {}",
                 rec.slot, states.pos(rec.slot), rec.pos0);
  int state_layer = 0;
  for (uint32_t l = 0; l < cfg_.n_main_layer(); ++l)
    if (cfg_.is_recurrent(l))
      delta_net_replay(*this, static_cast<int>(l), state_layer++, rec, n, cache, ws, pool);
  states.set_pos(rec.slot, rec.pos0 + n);
  return Status::ok();
}

kv::KvGeometry Model::stage_kv_geometry(PipelineStage& stage, QType k_type, QType v_type,
                                        int page_tokens) const {
  kv::KvGeometry g = kv_geometry(k_type, v_type, page_tokens);
  int before = 0, own = 0, own_state = 0;
  for (int b = 0; b < static_cast<int>(cfg_.n_layer); ++b) {
    const auto l = static_cast<uint32_t>(b);
    const bool kv = cfg_.kv_layer(l) >= 0;
    const bool mine = b >= stage.layer_begin && b < stage.layer_end;
    before += kv && b < stage.layer_begin;
    own += kv && mine;
    own_state += cfg_.is_recurrent(l) && mine;
  }
  stage.kv_layer_begin = before;
  g.n_layer = own;
  if (!g.window_layers.empty())
    g.window_layers = std::vector<uint8_t>(g.window_layers.begin() + before,
                                           g.window_layers.begin() + before + own);
  // A hybrid stage keeps the recurrent state of its own DeltaNet blocks only.
  g.state.n_layer = own_state;
  if (own_state == 0) g.state = {};
  return g;
}

Status Model::forward(const Batch& batch, kv::KvCache& cache, Workspace& ws, ThreadPool& pool,
                      float* logits, float* hidden, float* hidden_all,
                      const PipelineStage* stage) const {
  SUSTAIN_TRY(check_batch(cfg_, batch));
  if (hidden && !logits)
    return error(Code::kInvalidArgument, "forward: hidden states come with logits");
  if (stage) {
    // The main blocks (an MTP block runs only in forward_mtp).
    const int n = static_cast<int>(cfg_.n_main_layer());
    if (stage->layer_begin < 0 || stage->layer_end > n || stage->layer_begin >= stage->layer_end)
      return error(Code::kInvalidArgument, "pipeline stage of blocks [{}, {}) of a {}-block model",
                   stage->layer_begin, stage->layer_end, n);
    if ((stage->layer_begin > 0 && !stage->recv) || (stage->layer_end < n && !stage->send))
      return error(Code::kInvalidArgument, "pipeline stage [{}, {}) has no hand-off",
                   stage->layer_begin, stage->layer_end);
    // Hidden states come from a stage that holds the whole residual stream
    // after the last block and computes the logits: the last stage of a
    // layer split, or rank 0 of a tensor split (every rank's partial sums
    // are added there).
    if ((hidden || hidden_all) && (stage->layer_end != n || !stage->head))
      return error(Code::kInvalidArgument,
                   "forward: hidden states come only from the stage that ends with the last block "
                   "and computes the logits, not from blocks [{}, {}){}",
                   stage->layer_begin, stage->layer_end, stage->head ? "" : " without the head");
  }
  if (shard_ && shard_->n_ranks > 1 &&
      (!stage || !stage->all_reduce || (!shard_->o_by_columns && !stage->gather_heads) ||
       (stage->head && shard_->n_vocab() < cfg_.n_vocab && !stage->gather_vocab)))
    return error(Code::kInvalidArgument,
                 "forward: rank {} of a tensor split runs only beside the other ranks", shard_->rank);
  // The stage is the workspace's for this call only.
  struct StageScope {
    Workspace& ws;
    ~StageScope() { ws.stage = nullptr; }
  } scope{ws};
  ws.stage = stage;
  ws.comm_status = Status::ok();
  // Process in workspace-sized chunks; a token's K/V is in the cache before
  // any later chunk attends to it.
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  int64_t chunk = ws.max_tokens;
  if (stage && stage->micro_batches > 1 && n >= 2 * PipelineStage::kMinMicroBatch) {
    // Micro-batches to fill a layer split's pipeline (a non-causal block
    // must stay in one chunk: then the workspace's chunks only).
    bool causal = true;
    for (const BatchToken& t : batch.tokens) causal &= t.n_visible <= t.pos + 1;
    const int64_t m = stage->micro_batches;
    if (causal) chunk = std::min(chunk, std::max(PipelineStage::kMinMicroBatch, (n + m - 1) / m));
  }
  int64_t logit_row = 0;
  for (int64_t b0 = 0, b1 = 0; b0 < n; b0 = b1) {
    b1 = chunk_end(batch, b0, chunk);
    TokenSpan span{batch, b0, b1};
    float* out = logits ? logits + logit_row * static_cast<int64_t>(cfg_.n_vocab) : nullptr;
    SUSTAIN_TRY(check_noncausal(cfg_, batch, b0, b1));
    SUSTAIN_TRY(forward_llama_family(*this, span, cache, ws, pool, out));
    int64_t rows = 0;
    for (int64_t i = b0; i < b1; ++i) rows += batch.tokens[static_cast<size_t>(i)].logits;
    if (hidden)
      std::copy_n(ws.logits_in.data(), rows * cfg_.n_embd, hidden + logit_row * cfg_.n_embd);
    if (hidden_all) {
      // ws.x holds the chunk's final residual stream (output_head reads it).
      const int64_t d = cfg_.n_embd;
      for (int64_t i = b0; i < b1; ++i)
        kernels::rms_norm(ws.x.data() + (i - b0) * d, w_.output_norm.data(), hidden_all + i * d,
                          d, cfg_.rms_eps);
    }
    logit_row += rows;
  }
  return Status::ok();
}

}  // namespace sustain
