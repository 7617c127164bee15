#include "plan/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <unordered_set>

#include <fmt/format.h>

#include "base/checked_math.h"
#include "model/weights.h"

namespace sustain::plan {
namespace {

using u128 = unsigned __int128;

bool contains(const std::string& s, const char* sub) {
  return s.find(sub) != std::string::npos;
}

// The block index of "blk.N.<...>", or -1.
int layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  const char* p = name.c_str() + 4;
  char* end = nullptr;
  const long v = std::strtol(p, &end, 10);
  if (end == p || *end != '.' || v < 0 || v > std::numeric_limits<int>::max()) return -1;
  return static_cast<int>(v);
}

struct Layout {
  std::vector<DeviceUse> dev;
  std::vector<TensorShard> shards;  // a dense model's tensor split
  size_t logits_dev = 0;
  int64_t state_snapshots = 0;     // state slots beyond those of the sequences
  int64_t window_seq_tokens = 0;       // sliding-window pool: tokens per sequence at most
  int64_t window_snapshot_tokens = 0;  // and of every prefix-cache snapshot
  int64_t state_per_sequence = 1;  // 2 with speculation (the state before a verify step)
  int64_t logits_rows = 1;         // logits rows per sequence (1 + draft_max with speculation)
};

// Bytes of `rows` of a tensor's first dimension (a matrix's rows, a
// vector's elements).
uint64_t rows_bytes(const TensorEntry& t, int64_t rows) {
  if (t.shape.empty() || t.shape[0] <= 0) return 0;
  return t.bytes / static_cast<uint64_t>(t.shape[0]) * static_cast<uint64_t>(rows);
}

// A tensor's bytes on one rank of a tensor split, as Model::load cuts it:
// rows of Q/K/V and gate/up, columns of attn_output and ffn_down, rows of
// the output matrix; vectors other than the biases whole on every rank.
uint64_t shard_bytes(const ArchConfig& c, const TensorShard& s, const TensorEntry& t) {
  auto is = [&](const char* suffix) { return t.name.ends_with(suffix); };
  const int64_t hk = c.head_dim_k, hv = c.head_dim_v;
  const int64_t kv = s.kv_end - s.kv_begin;
  auto cols = [&](int64_t n) {
    return t.shape.size() == 2 ? qtype_row_bytes(t.type, static_cast<uint64_t>(n)) *
                                     static_cast<uint64_t>(t.shape[0])
                               : t.bytes;
  };
  // qwen35: attn_q's rows hold each head's query and its gate.
  if (is(".attn_q.weight") || is(".attn_q.bias"))
    return rows_bytes(t, s.n_heads() * hk * (c.has_attn_gate() ? 2 : 1));
  // Gated DeltaNet: the rank's key heads and the value heads that read them.
  const int64_t hd = c.ssm_head_dim;
  const int64_t vh =
      c.ssm_n_k_heads > 0 ? int64_t{s.n_ssm_k()} * (c.ssm_n_v_heads / c.ssm_n_k_heads) : 0;
  if (is(".attn_qkv.weight") || is(".ssm_conv1d.weight"))
    return rows_bytes(t, (2 * int64_t{s.n_ssm_k()} + vh) * hd);
  if (is(".attn_gate.weight")) return rows_bytes(t, vh * hd);
  if (is(".ssm_beta.weight") || is(".ssm_alpha.weight") || is(".ssm_dt.bias") || is(".ssm_a"))
    return rows_bytes(t, vh);
  if (is(".ssm_out.weight")) return cols(vh * hd);
  // Mixture of experts: the rank's whole experts of each stack.
  if (c.is_moe() && is_expert_stack(t.name))
    return t.bytes / c.n_expert * static_cast<uint64_t>(s.n_experts());
  if (is(".attn_k.weight") || is(".attn_k.bias")) return rows_bytes(t, kv * hk);
  if (is(".attn_v.weight") || is(".attn_v.bias")) return rows_bytes(t, kv * hv);
  if (is(".attn_output.weight")) return s.o_by_columns ? cols(s.n_heads() * hv) : t.bytes;
  if (is(".ffn_gate.weight") || is(".ffn_up.weight")) return rows_bytes(t, s.n_ff());
  if (is(".ffn_down.weight")) return cols(s.n_ff());
  if (t.name == "output.weight" || (t.name == "token_embd.weight" && c.tied_output))
    return rows_bytes(t, s.n_vocab());
  return t.bytes;
}

}  // namespace

const char* group_name(Group g) {
  switch (g) {
    case Group::kTransformer:
      return "transformer";
    case Group::kProjector:
      return "projector";
    case Group::kMtp:
      return "mtp";
    case Group::kOther:
      return "other";
  }
  return "?";
}

const char* split_name(Split s) {
  return s == Split::kTensor ? "tensor" : "layer";
}

Group classify_tensor(const std::string& name, bool in_weight_table) {
  if (in_weight_table) return Group::kTransformer;
  // GGUF names of multimodal projectors (llama.cpp's mmproj files and merged
  // files) and of multi-token-prediction / next-n heads.
  if (name.rfind("mm.", 0) == 0 || name.rfind("v.", 0) == 0 || contains(name, "mmproj"))
    return Group::kProjector;
  if (contains(name, "mtp") || contains(name, "nextn")) return Group::kMtp;
  return Group::kOther;
}

HostCosts default_host_costs(const ArchConfig& arch, const std::vector<TensorEntry>& tensors) {
  HostCosts h;
  // Measured on `sustain run` (docs/plan.md, "Host costs"): the process with
  // its libraries (11.7 MB for `--version` since OpenMPI is linked in; it
  // was 4.7 MB when first measured) plus what a loaded run adds beyond its
  // model buffers (allocator arenas, thread pool, batch: 6-7.5 MB on
  // smollm2-135m and qwen2.5-0.5b), and the tokenizer's tables per
  // vocabulary entry (360 B on both).
  h.runtime_bytes = uint64_t{13} << 20;
  h.tokenizer_bytes = uint64_t{arch.n_vocab} * 360;
  for (const TensorEntry& t : tensors)
    if (t.shape.size() == 1) {
      uint64_t n = 1;
      for (int64_t d : t.shape) n *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
      h.norm_bytes += n * sizeof(float);
    }
  return h;
}

uint64_t workspace_bytes(const ArchConfig& c, int64_t ubatch, uint64_t kernel_scratch_bytes) {
  // The f32 buffers Model::make_workspace sizes, per token: x, cur and
  // logits_in (n_embd each), q, k, v, attn_out, and gate, up, hidden (the
  // FFN width each: n_ff, or one expert's n_ff_exp). A mixture of experts adds
  // router logits (n_expert), each token's expert weights and ids (n_expert_used
  // each, and its slots in the per-expert order), the gathered rows and their
  // output (n_embd each), and the per-expert offsets (n_expert + 1, twice).
  const uint64_t n = static_cast<uint64_t>(std::max<int64_t>(ubatch, 1));
  uint64_t per_token = 3ull * c.n_embd + c.q_dim() + c.k_dim() + c.v_dim() +
                       uint64_t{c.n_head} * c.head_dim_v + 3ull * c.ffn_width();
  uint64_t fixed = 0;
  if (c.is_moe()) {
    per_token += c.n_expert + 3ull * c.n_expert_used + 2ull * c.n_embd;
    fixed += (2ull * c.n_expert + 1) * sizeof(int32_t);
  }
  // qwen35: the query-and-gate projection and the gates (3 q_dim), and the
  // DeltaNet channels before and after the convolution, z and the outputs,
  // β and the decay.
  if (c.has_attn_gate()) per_token += 3ull * c.q_dim();
  if (c.is_hybrid())
    per_token += 2ull * c.ssm_conv_channels() + 2ull * c.ssm_inner + 2ull * c.ssm_n_v_heads;
  return n * per_token * sizeof(float) + fixed + kernel_scratch_bytes;
}

std::string format_bytes(uint64_t b) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.2f} {}", v, kUnits[u]);
}

namespace {

Status validate_input(const PlanInput& in) {
  SUSTAIN_TRY(validate_arch_config(in.arch));
  if (in.n_ctx < 1)
    return error(Code::kInvalidArgument, "context size (-c) must be at least 1, got {}", in.n_ctx);
  if (in.n_parallel < 1)
    return error(Code::kInvalidArgument, "--parallel must be at least 1, got {}", in.n_parallel);
  if (in.ubatch < 1)
    return error(Code::kInvalidArgument, "ubatch must be at least 1, got {}", in.ubatch);
  if (in.kv_budget_bytes < 0)
    return error(Code::kInvalidArgument, "--kv-budget must not be negative, got {}",
                 in.kv_budget_bytes);
  if (!(in.headroom >= 0.0 && in.headroom < 1.0))
    return error(Code::kInvalidArgument, "--headroom must be at least 0% and below 100%, got {}%",
                 in.headroom * 100.0);
  if (in.devices.empty() && in.host_capacity == 0)
    return error(Code::kInvalidArgument, "no memory size to plan for (give --devices)");
  for (size_t d = 0; d < in.devices.size(); ++d) {
    const Device& dv = in.devices[d];
    if (dv.capacity == 0)
      return error(Code::kInvalidArgument, "--devices: device {} ({}) has a size of 0 bytes", d,
                   dv.name);
    if (!(dv.ratio > 0.0) || !std::isfinite(dv.ratio))
      return error(Code::kInvalidArgument, "--ratio: device {} ({}) has ratio {}, must be > 0", d,
                   dv.name, dv.ratio);
    if (!(dv.bandwidth_gbps >= 0.0) || !std::isfinite(dv.bandwidth_gbps))
      return error(Code::kInvalidArgument, "--bandwidth: device {} ({}) has {} GB/s", d, dv.name,
                   dv.bandwidth_gbps);
  }
  for (const TensorEntry& t : in.tensors)
    for (int64_t s : t.shape)
      if (s < 0)
        return error(Code::kInvalidArgument, "tensor `{}` has a negative dimension {}", t.name, s);
  return Status::ok();
}

// Places every tensor and the per-device buffers (everything but the KV pool
// and the logits, which depend on the context and the sequence count).
Expected<Layout> place(const PlanInput& in, const kv::KvGeometry& g, Plan& p) {
  const ArchConfig& c = in.arch;
  Layout L;
  if (in.devices.empty()) {
    DeviceUse d;
    d.name = "cpu";
    d.capacity = in.host_capacity;
    d.bandwidth_gbps = in.host_bandwidth_gbps;
    L.dev.push_back(d);
  } else {
    for (const Device& dv : in.devices) {
      DeviceUse d;
      d.name = dv.name;
      d.capacity = dv.capacity;
      d.bandwidth_gbps = dv.bandwidth_gbps;
      L.dev.push_back(d);
    }
  }
  const size_t n_dev = L.dev.size();
  const size_t last = n_dev - 1;
  const bool row = in.split == Split::kTensor && n_dev > 1;
  std::vector<double> ratios;
  for (const Device& dv : in.devices) ratios.push_back(dv.ratio);
  if (ratios.empty()) ratios.push_back(1.0);

  // A tensor split is cut as a run cuts it (model/shard.h): query heads
  // with their KV heads, attn_output columns, DeltaNet key heads with their
  // value heads, FFN columns or whole experts, and output rows, at the
  // formats' block boundaries.
  std::vector<TensorShard> shards;
  if (row) {
    ShardGranules gr;
    for (const TensorEntry& t : in.tensors) {
      const bool o = t.name.ends_with(".attn_output.weight");
      const bool ssm = t.name.ends_with(".ssm_out.weight");
      if (!o && !ssm && !t.name.ends_with(".ffn_down.weight")) continue;
      const int64_t blk = qtype_traits(t.type).block_elems;
      int64_t& dst = o ? gr.o_block : ssm ? gr.ssm_out_block : gr.down_block;
      dst = std::max(dst, blk);
    }
    SUSTAIN_ASSIGN_OR_RETURN(shards, tensor_shards(c, ratios, gr));
  }
  L.shards = shards;
  for (size_t d = 0; d < shards.size(); ++d) L.dev[d].cut = describe(shards[d]);

  // Layers per device (layer split); under a tensor split every device
  // has every layer and its shard's heads.
  const std::vector<int64_t> lb =
      row ? std::vector<int64_t>{0, c.n_layer} : split_bounds(c.n_main_layer(), ratios);
  const uint64_t kv_row = g.k_row_bytes() + g.v_row_bytes();
  // Hybrid models: only full-attention blocks keep KV, DeltaNet blocks keep
  // a state per sequence (a shard's heads' part under a tensor split).
  const uint64_t conv_layer =
      c.is_hybrid() ? uint64_t{c.ssm_conv_kernel - 1} * c.ssm_conv_channels() : 0;
  const uint64_t ssm_head = uint64_t{c.ssm_head_dim} * c.ssm_head_dim;
  for (size_t d = 0; d < n_dev; ++d) {
    DeviceUse& u = L.dev[d];
    u.layer_begin = static_cast<int>(row ? 0 : lb[d]);
    u.layer_end = static_cast<int>(row ? c.n_layer : lb[d + 1]);
    u.kv_heads = static_cast<int>(!shards.empty() ? shards[d].n_kv_cached() : c.n_head_kv);
    uint64_t kv_layers = 0, window_layers = 0, state_layers = 0;
    for (int il = u.layer_begin; il < u.layer_end; ++il) {
      const auto l = static_cast<uint32_t>(il);
      const bool kv = c.kv_layer(l) >= 0 && l < c.n_main_layer();
      kv_layers += kv && !c.is_sliding(l);
      window_layers += kv && c.is_sliding(l);
      state_layers += c.is_recurrent(l);
    }
    u.kv_bytes_per_token = kv_layers * uint64_t(u.kv_heads) * kv_row;
    u.window_bytes_per_token = window_layers * uint64_t(u.kv_heads) * kv_row;
    if (c.is_hybrid() && !shards.empty()) {
      // Each rank's DeltaNet heads: their channels of the conv rows and
      // their S matrices (the rank's config, as its cache sizes them).
      const ArchConfig rc = shard_config(c, shards[d]);
      const uint64_t conv = uint64_t{rc.ssm_conv_kernel - 1} * rc.ssm_conv_channels();
      u.state_per_sequence = state_layers * (conv + rc.ssm_n_v_heads * ssm_head) * sizeof(float);
    } else if (c.is_hybrid()) {
      u.state_per_sequence =
          state_layers * (conv_layer + c.ssm_n_v_heads * ssm_head) * sizeof(float);
    }
  }
  auto owner_of_layer = [&](int layer) {
    for (size_t d = 0; d < n_dev; ++d)
      if (layer < L.dev[d].layer_end) return d;
    return last;
  };

  std::unordered_set<std::string> table;
  for (const WeightSpec& s : weight_table(c, in.rope_freqs)) table.insert(s.name);

  auto add = [&](size_t d, uint64_t bytes, uint64_t step) {
    L.dev[d].weights += bytes;
    L.dev[d].step_weights += step;
  };
  auto add_tensor = [&](const TensorEntry& t, Group grp) -> Status {
    auto sum = checked_add(p.weights_bytes, t.bytes);
    if (!sum) return error(Code::kInvalidArgument, "weight bytes overflow at tensor `{}`", t.name);
    p.weights_bytes = *sum;
    switch (grp) {
      case Group::kTransformer:
        p.transformer_bytes += t.bytes;
        break;
      case Group::kProjector:
        p.projector_bytes += t.bytes;
        ++p.projector_tensors;
        break;
      case Group::kMtp:
        p.mtp_bytes += t.bytes;
        ++p.mtp_tensors;
        break;
      case Group::kOther:
        p.other_bytes += t.bytes;
        ++p.other_tensors;
        break;
    }
    if (grp != Group::kTransformer) {
      // Not read by a text decode step; projectors sit with the input, MTP
      // heads with the output — or on the first device, which runs them
      // when they draft (--spec mtp).
      add(grp == Group::kMtp && !row && !in.spec.mtp ? last : 0, t.bytes, 0);
      return Status::ok();
    }
    // A decode step reads every matrix once, but of the embedding table only
    // one row per token — unless it is also the output matrix (tied).
    uint64_t step = t.bytes;
    // A mixture of experts reads only the experts a token uses: of the
    // stacked expert tensors, n_expert_used / n_expert per decode step.
    if (c.is_moe() && is_expert_stack(t.name)) step = t.bytes / c.n_expert * c.n_expert_used;
    const bool embd = t.name == "token_embd.weight";
    if (embd && !c.tied_output && t.shape.size() == 2 && t.shape[0] > 0)
      step = t.bytes / static_cast<uint64_t>(t.shape[0]);
    const int layer = layer_of(t.name);
    const bool output = t.name == "output.weight" || (embd && c.tied_output);
    if (!shards.empty() && (layer >= 0 || output || t.name == "output_norm.weight")) {
      // Each device's part of the tensor, as Model::load cuts it.
      for (size_t d = 0; d < n_dev; ++d) {
        const uint64_t b = shard_bytes(c, shards[d], t);
        // A decode step reads the experts the token chose, as many of the
        // rank's as fall there on average.
        add(d, b, c.is_moe() && is_expert_stack(t.name) ? b / c.n_expert * c.n_expert_used : b);
      }
      // The embedding rows a step reads (the tied table's other use).
      if (output && embd)
        add(0, 0, t.bytes / static_cast<uint64_t>(std::max<int64_t>(1, t.shape[0])));
    } else if (layer >= 0) {
      add(owner_of_layer(layer), t.bytes, step);
    } else if (row) {
      add(0, t.bytes, step);  // embeddings, output and norms stay on the main device
    } else if (output || t.name == "output_norm.weight") {
      add(last, t.bytes, step);  // the output head runs after the last layer
    } else {
      add(0, t.bytes, step);
    }
    // --spec mtp: the block's head is the whole output matrix, read on the
    // first device — beside its share of a tensor split's rows, or as a
    // copy of the layer split's last device's (its final norm too).
    if (in.spec.mtp && n_dev > 1 && (output || t.name == "output_norm.weight")) {
      if (!shards.empty() && output)
        add(0, t.bytes - shard_bytes(c, shards[0], t), 0);
      else if (!row && !(embd && c.tied_output))
        add(0, t.bytes, 0);
    }
    p.step_weight_bytes += step;
    return Status::ok();
  };
  for (const TensorEntry& t : in.tensors) {
    Group grp = classify_tensor(t.name, table.count(t.name) != 0);
    // The NextN/MTP blocks' attention and FFN are in the weight table but
    // not in the main forward: they belong with the MTP head.
    const int layer = layer_of(t.name);
    if (c.n_nextn > 0 && layer >= 0 && c.is_nextn(static_cast<uint32_t>(layer))) grp = Group::kMtp;
    SUSTAIN_TRY(add_tensor(t, grp));
  }
  for (const TensorEntry& t : in.sidecar) SUSTAIN_TRY(add_tensor(t, Group::kProjector));

  p.scratch_bytes = workspace_bytes(c, in.ubatch, in.kernel_scratch_bytes);
  for (DeviceUse& u : L.dev) u.scratch = p.scratch_bytes;
  p.projector_scratch_bytes = in.projector_scratch_bytes;
  L.dev[0].scratch += in.projector_scratch_bytes;
  L.state_snapshots = in.state_snapshots;
  if (g.windowed()) {
    L.window_seq_tokens = g.window_pages_per_seq() * g.page_tokens;
    L.window_snapshot_tokens = int64_t{g.window_snapshots} * g.window_pages_per_snapshot() * g.page_tokens;
  }
  L.state_per_sequence = in.spec.on ? 2 : 1;
  L.logits_rows = in.spec.on ? 1 + in.spec.draft_max : 1;
  L.logits_dev = row ? 0 : last;
  // Bytes each device sends per decoded token (docs/split.md): the layer
  // split hands the hidden state on and the logits back; the tensor split
  // sends its share of each all-reduce (a ring: 2 (R-1)/R of the buffer),
  // of the head gathers, and of the logits.
  if (n_dev > 1) {
    const double R = static_cast<double>(n_dev);
    const double embd = 4.0 * c.n_embd, vocab = 4.0 * c.n_vocab;
    if (!row) {
      p.comm_bytes_per_token = static_cast<uint64_t>(embd * (R - 1) + vocab);
    } else if (!shards.empty()) {
      // Two all-reduces per main block (after attention or DeltaNet, after
      // the FFN); attention heads gathered where attn_output is not cut.
      double b = c.n_main_layer() * 2.0 * embd * 2.0 * (R - 1) / R;
      if (!shards[0].o_by_columns) b += c.n_kv_layer() * 4.0 * c.q_dim() * (R - 1) / R;
      b += vocab * (R - 1) / R;
      p.comm_bytes_per_token = static_cast<uint64_t>(b);
    }
  }
  p.host = in.host;
  p.host_bytes =
      in.host.runtime_bytes + in.host.tokenizer_bytes + in.host.metadata_bytes + in.host.norm_bytes;
  if (in.devices.empty()) L.dev[0].host = p.host_bytes;
  for (DeviceUse& u : L.dev)
    u.usable =
        static_cast<uint64_t>(std::floor(static_cast<double>(u.capacity) * (1.0 - in.headroom)));
  return L;
}

uint64_t logits_bytes(const ArchConfig& c, int64_t n_seq, int64_t rows_per_seq = 1) {
  // One row of f32 logits per sequence that decodes in a step (and one per
  // draft it verifies).
  return static_cast<uint64_t>(std::max<int64_t>(n_seq, 1)) * static_cast<uint64_t>(rows_per_seq) *
         c.n_vocab * sizeof(float);
}

// Bytes of everything but the KV pool on device d.
u128 fixed_bytes(const Layout& L, size_t d, const ArchConfig& c, int64_t n_seq) {
  const DeviceUse& u = L.dev[d];
  return u128(u.weights) + u.scratch + u.host + u.spec +
         (d == L.logits_dev ? logits_bytes(c, n_seq, L.logits_rows) : 0) +
         u128(u.state_per_sequence) * u128(n_seq * L.state_per_sequence + L.state_snapshots) +
         // The sliding-window pool at its largest for n_seq sequences.
         u128(u.window_bytes_per_token) * u128(n_seq * L.window_seq_tokens + L.window_snapshot_tokens);
}

// The most KV pages every device can hold beside its fixed bytes with
// `n_seq` sequences; -1 when the fixed bytes alone exceed a device's usable
// memory. `limit` caps the answer (a device holding no KV has no bound).
int64_t max_pages(const Layout& L, const ArchConfig& c, int page_tokens, int64_t n_seq,
                  int64_t limit) {
  int64_t best = limit;
  for (size_t d = 0; d < L.dev.size(); ++d) {
    const u128 fixed = fixed_bytes(L, d, c, n_seq);
    if (fixed > L.dev[d].usable) return -1;
    const u128 page = u128(L.dev[d].kv_bytes_per_token) * u128(page_tokens);
    if (page == 0) continue;
    const u128 pages = (u128(L.dev[d].usable) - fixed) / page;
    if (pages < u128(best)) best = static_cast<int64_t>(pages);
  }
  return best;
}

std::vector<int64_t> speed_contexts(int64_t max_ctx, int64_t n_ctx) {
  std::set<int64_t> pts{0, n_ctx};
  for (int64_t x : {4096, 16384, 32768, 131072})
    if (x <= max_ctx) pts.insert(x);
  for (int64_t x = 262144; x <= max_ctx && x > 0; x *= 2) pts.insert(x);
  if (max_ctx > 0) pts.insert(max_ctx);
  return {pts.begin(), pts.end()};
}

void speed_curve(const PlanInput& in, const Layout& L, Plan& p) {
  for (const DeviceUse& u : L.dev)
    if (!(u.bandwidth_gbps > 0.0)) return;
  const bool row = in.split == Split::kTensor && L.dev.size() > 1;
  auto step_seconds = [&](int64_t tokens_per_device_step, int64_t seqs_per_step,
                          uint64_t* bytes_total) {
    double t = 0.0;
    uint64_t total = 0;
    for (const DeviceUse& u : L.dev) {
      // A hybrid's state is read and written once per step and sequence.
      // A sliding-window layer reads at most its window per sequence.
      const int64_t window_tokens =
          std::min<int64_t>(tokens_per_device_step / std::max<int64_t>(1, seqs_per_step),
                            int64_t{in.arch.sliding_window}) *
          seqs_per_step;
      const uint64_t b = u.step_weights + u.kv_bytes_per_token * uint64_t(tokens_per_device_step) +
                         u.window_bytes_per_token * uint64_t(window_tokens) +
                         2 * u.state_per_sequence * uint64_t(seqs_per_step);
      total += b;
      const double s = static_cast<double>(b) / (u.bandwidth_gbps * 1e9);
      // Layers run one device after another; tensor shards run side by side.
      t = row ? std::max(t, s) : t + s;
    }
    if (bytes_total) *bytes_total = total;
    return t;
  };
  for (int64_t ctx : speed_contexts(p.max_ctx, in.n_ctx)) {
    SpeedPoint sp;
    sp.ctx = ctx;
    const double t1 = step_seconds(ctx, 1, &sp.bytes_per_step);
    sp.tok_s = t1 > 0 ? 1.0 / t1 : 0.0;
    const double tn = step_seconds(ctx * in.n_parallel, in.n_parallel, nullptr);
    sp.aggregate_tok_s = tn > 0 ? in.n_parallel / tn : 0.0;
    p.speed.push_back(sp);
  }
}

std::string seqs(int64_t n) {
  return n == 1 ? "1 sequence" : fmt::format("{} sequences", n);
}

std::string verdict(const PlanInput& in, const Layout& L, const Plan& p) {
  const int hr = static_cast<int>(std::lround(in.headroom * 100.0));
  const std::string what =
      in.kv_budget_bytes > 0 ? fmt::format("a KV budget of {} ({} tokens) with {}",
                                           format_bytes(static_cast<uint64_t>(in.kv_budget_bytes)),
                                           p.kv_tokens, seqs(in.n_parallel))
                             : fmt::format("{} tokens × {}", in.n_ctx, seqs(in.n_parallel));
  std::string s;
  if (in.kv_budget_bytes > 0 && p.budget_tokens < in.n_ctx) {
    // The engine refuses a pool that cannot hold one full context.
    s = fmt::format(
        "does not fit: the KV budget of {} holds {} tokens, fewer than one context of "
        "{} tokens (lower -c or raise --kv-budget)",
        format_bytes(static_cast<uint64_t>(in.kv_budget_bytes)), p.budget_tokens, in.n_ctx);
  } else if (p.fits) {
    if (L.dev.size() == 1) {
      s = fmt::format("fits: {} use {} of {} (headroom {}%)", what, format_bytes(L.dev[0].total),
                      format_bytes(L.dev[0].capacity), hr);
    } else {
      std::string per;
      for (const DeviceUse& u : L.dev)
        per += fmt::format("{}{} {} of {}", per.empty() ? "" : ", ", u.name, format_bytes(u.total),
                           format_bytes(u.capacity));
      s = fmt::format("fits: {} use {} (headroom {}%)", what, per, hr);
    }
  } else {
    // Name the first device that overflows.
    const DeviceUse* bad = &L.dev[0];
    for (const DeviceUse& u : L.dev)
      if (!u.fits) {
        bad = &u;
        break;
      }
    s = fmt::format("does not fit: {} need {} on {}, have {} ({} less {}% headroom)", what,
                    format_bytes(bad->total), bad->name, format_bytes(bad->usable),
                    format_bytes(bad->capacity), hr);
  }
  if (p.max_ctx > 0) {
    s += fmt::format("; largest context{}: {} tokens × {}", p.fits ? "" : " that fits", p.max_ctx,
                     seqs(in.n_parallel));
    if (p.max_ctx > int64_t{in.arch.n_ctx_train} && in.arch.n_ctx_train > 0)
      s += fmt::format(" (the model was trained for {})", in.arch.n_ctx_train);
    s += fmt::format("; at {} tokens, up to {}", in.n_ctx, seqs(p.max_parallel));
  } else {
    s += "; no context fits: the weights and buffers alone exceed the usable memory";
  }
  if (in.kv_budget_bytes > 0)
    s += fmt::format("; the KV budget holds {} tokens ({} per sequence)", p.budget_tokens,
                     p.budget_tokens_per_sequence);
  return s;
}

}  // namespace

Expected<Plan> make_plan(const PlanInput& in) {
  SUSTAIN_TRY(validate_input(in));
  Plan p;
  kv::KvGeometry& g = p.geometry;
  g.n_layer = static_cast<int>(in.arch.n_kv_layer());
  p.kv_layers = g.n_layer;
  if (in.arch.is_hybrid()) {
    const ArchConfig& a = in.arch;
    g.state.n_layer = static_cast<int>(a.n_recurrent_layer());
    g.state.conv_rows = static_cast<int>(a.ssm_conv_kernel) - 1;
    g.state.conv_channels = static_cast<int>(a.ssm_conv_channels());
    g.state.n_head = static_cast<int>(a.ssm_n_v_heads);
    g.state.head_dim_k = g.state.head_dim_v = static_cast<int>(a.ssm_head_dim);
    g.state_slots = in.n_parallel * (in.spec.on ? 2 : 1) + in.state_snapshots;
    p.state_bytes_per_sequence = g.state.slot_bytes();
    p.state_slots = g.state_slots;
    p.state_bytes = p.state_bytes_per_sequence * static_cast<uint64_t>(p.state_slots);
  }
  g.n_head_kv = static_cast<int>(in.arch.n_head_kv);
  g.head_dim_k = static_cast<int>(in.arch.head_dim_k);
  g.head_dim_v = static_cast<int>(in.arch.head_dim_v);
  g.k_type = in.k_type;
  g.v_type = in.v_type;
  g.page_tokens = in.page_tokens;
  // Sliding-window layers in a pool of their own, sized as the engine sizes
  // it (engine.cc): n_parallel sequences that each add at most a step's
  // tokens at once, plus the prefix cache's window snapshots.
  if (in.arch.sliding_window > 0) {
    g.window = static_cast<int32_t>(in.arch.sliding_window);
    g.window_layers = in.arch.kv_window_layers();
    g.window_seqs = in.n_parallel;
    g.window_step = static_cast<int32_t>(std::min<int64_t>(
        std::max<int64_t>(in.batch, int64_t{in.spec.on ? in.spec.draft_max : 0} + 1), in.n_ctx));
    g.window_snapshots = in.state_snapshots;
    p.window_layers = g.n_window_layers();
  }
  SUSTAIN_TRY(kv::validate(g));
  p.kv_bytes_per_token = g.bytes_per_token();
  p.kv_page_bytes = g.page_bytes();
  p.split = !in.devices.empty();

  SUSTAIN_ASSIGN_OR_RETURN(Layout L, place(in, g, p));

  // The pool, as the engine sizes it.
  if (in.kv_budget_bytes > 0) {
    p.kv_pages = static_cast<int64_t>(static_cast<uint64_t>(in.kv_budget_bytes) / p.kv_page_bytes);
    p.budget_tokens = p.kv_pages * g.page_tokens;
    p.budget_tokens_per_sequence = p.budget_tokens / in.n_parallel;
  } else {
    const auto tokens = checked_mul(static_cast<uint64_t>(in.n_ctx), uint64_t(in.n_parallel));
    if (!tokens || *tokens > uint64_t{1} << 50)
      return error(Code::kInvalidArgument, "a pool of {} tokens × {} sequences is too large",
                   in.n_ctx, in.n_parallel);
    p.kv_pages = g.pool_pages(static_cast<int64_t>(*tokens));
  }
  p.kv_tokens = p.kv_pages * g.page_tokens;
  const auto kv_bytes = checked_mul(static_cast<uint64_t>(p.kv_pages), p.kv_page_bytes);
  if (!kv_bytes)
    return error(Code::kInvalidArgument, "the KV pool of {} pages of {} bytes overflows",
                 p.kv_pages, p.kv_page_bytes);
  p.window_pages = g.window_pool_pages(p.kv_tokens);
  p.window_page_bytes = g.window_page_bytes();
  p.window_bytes = g.window_pool_bytes(p.kv_tokens);
  p.kv_bytes = *kv_bytes + p.window_bytes;
  p.logits_bytes = logits_bytes(in.arch, in.n_parallel, L.logits_rows);
  if (in.spec.on && in.spec.pool_geometry.n_layer > 0) {
    // The engine sizes the mirror pool from the tokens it asked of the
    // target's (the budget's pages, or context × sequences), plus room for
    // each sequence's draft.
    const kv::KvGeometry& sg = in.spec.pool_geometry;
    SUSTAIN_TRY(kv::validate(sg));
    const int64_t target_tokens =
        in.kv_budget_bytes > 0 ? p.kv_pages * g.page_tokens : in.n_ctx * in.n_parallel;
    p.spec_pool = in.spec.pool_name;
    p.spec_kv_pages =
        sg.pool_pages(target_tokens + in.n_parallel * in.spec.pool_extra_tokens_per_sequence);
    p.spec_kv_bytes =
        static_cast<uint64_t>(p.spec_kv_pages) * (sg.page_bytes() + in.spec.pool_page_extra_bytes);
  }
  p.spec_weights_bytes = in.spec.draft_weights_bytes;
  p.spec_scratch_bytes = in.spec.draft_scratch_bytes;
  L.dev[0].spec = p.spec_kv_bytes + p.spec_weights_bytes + p.spec_scratch_bytes;

  p.fits = true;
  p.total_bytes = p.split ? p.host_bytes : 0;
  for (size_t d = 0; d < L.dev.size(); ++d) {
    DeviceUse& u = L.dev[d];
    u.kv = static_cast<uint64_t>(p.kv_tokens) * u.kv_bytes_per_token +
           static_cast<uint64_t>(p.window_pages * g.page_tokens) * u.window_bytes_per_token;
    u.state = u.state_per_sequence * static_cast<uint64_t>(p.state_slots);
    u.logits = d == L.logits_dev ? p.logits_bytes : 0;
    const u128 total = u128(u.weights) + u.kv + u.state + u.scratch + u.logits + u.host + u.spec;
    if (total > std::numeric_limits<uint64_t>::max())
      return error(Code::kInvalidArgument, "the bytes on {} overflow", u.name);
    u.total = static_cast<uint64_t>(total);
    u.fits = u.total <= u.usable;
    p.fits = p.fits && u.fits;
    p.total_bytes += u.total;
  }
  if (in.kv_budget_bytes > 0 && p.budget_tokens < in.n_ctx) p.fits = false;

  // Largest context at n_parallel: the pool of ctx × n_parallel tokens is
  // ceil(ctx × n / page_tokens) pages, so ctx ≤ pages × page_tokens / n.
  constexpr int64_t kMaxTokens = int64_t{1} << 40;
  const int64_t pages_n =
      max_pages(L, in.arch, g.page_tokens, in.n_parallel, kMaxTokens / g.page_tokens);
  p.max_ctx = pages_n < 0 ? 0 : pages_n * g.page_tokens / in.n_parallel;
  // Most sequences at n_ctx (logits grow with the count too): binary search.
  int64_t lo = 0, hi = kMaxTokens / in.n_ctx;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    const int64_t pages = max_pages(L, in.arch, g.page_tokens, mid, kMaxTokens / g.page_tokens);
    if (pages >= 0 && g.pool_pages(in.n_ctx * mid) <= pages) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  p.max_parallel = lo;

  speed_curve(in, L, p);
  p.verdict = verdict(in, L, p);
  p.devices = std::move(L.dev);
  return p;
}

}  // namespace sustain::plan
