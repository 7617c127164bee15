// Memory plan (`sustain plan`): how many bytes a model needs to run — weights
// by their actual tensor formats, the KV page pool, the forward workspace,
// logits and the process's own tables — on one machine or split over devices,
// the largest context and concurrency that fit under a headroom, and the
// bandwidth model's decode speed at each context (DESIGN.md §6: bytes read
// per decode step = weights + KV at context L).
//
// Pure arithmetic: the inputs are an ArchConfig, the list of tensors with
// their formats (from a GGUF directory, or what the quantizer would write for
// a preset) and the caller's sizes; nothing is loaded or allocated. The KV
// figures use kv::KvGeometry, so they are exactly what KvCache::create
// allocates for the same pool (the engine's pool holds n_ctx × n_parallel
// tokens, or floor(kv_budget / page_bytes) pages).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "kv/kv_cache.h"
#include "model/arch_config.h"
#include "model/shard.h"
#include "tensor/qtype.h"

namespace sustain::plan {

// One tensor as stored: name, format, shape (PyTorch order) and bytes.
struct TensorEntry {
  std::string name;
  QType type = QType::F32;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
};

// What a model-file tensor is for. The transformer is every tensor of the
// architecture's weight table (model/weights.h); vision projectors ("mm.*",
// "v.*", and every tensor of an --mmproj sidecar) and multi-token-prediction
// heads ("*mtp*", "*nextn*") are separate line items; anything else is other.
enum class Group { kTransformer, kProjector, kMtp, kOther };
const char* group_name(Group g);  // "transformer", "projector", "mtp", "other"
Group classify_tensor(const std::string& name, bool in_weight_table);

// layer: contiguous blocks per device (pipeline); tensor: every matrix split
// by rows over the devices (llama.cpp's "row").
enum class Split { kLayer, kTensor };
const char* split_name(Split s);  // "layer", "tensor"

// The layer ranges `plan` prints and the ranges a `--split layer` run
// computes both come from model/shard.h's split_bounds.
using ::sustain::split_bounds;

struct Device {
  std::string name;             // "cpu", "dev0", ...
  uint64_t capacity = 0;        // bytes
  double ratio = 1.0;           // share of the split (any positive scale)
  double bandwidth_gbps = 0.0;  // 0 = unknown (no speed curve)
};

// Bytes the process holds besides the model's own buffers; measured on
// `sustain run` (see docs/plan.md). Counted on the host only.
struct HostCosts {
  uint64_t runtime_bytes = 0;    // binary, libraries, thread stacks, allocator
  uint64_t tokenizer_bytes = 0;  // vocabulary tables on the heap
  uint64_t metadata_bytes = 0;   // mapped GGUF header (vocabulary strings), touched at load
  uint64_t norm_bytes = 0;       // 1-D tensors copied to f32 at load
};
// The estimate used when the caller has no better figure.
HostCosts default_host_costs(const ArchConfig& arch, const std::vector<TensorEntry>& tensors);

struct PlanInput {
  ArchConfig arch;
  std::vector<TensorEntry> tensors;  // the model file's tensors (or the quantizer's plan)
  std::vector<TensorEntry> sidecar;  // a projector file's tensors (all counted as projector)
  // The buffers the projector's encoder allocates for one image at a time
  // (callers compute it: vision::Projector::encode_scratch_bytes), on the
  // first device.
  uint64_t projector_scratch_bytes = 0;
  bool rope_freqs = false;  // the file carries Llama 3 rope_freqs.weight
  QType k_type = QType::F16;
  QType v_type = QType::F16;
  int page_tokens = 32;
  int64_t n_ctx = 4096;         // tokens per sequence
  int n_parallel = 1;           // sequences at once
  int64_t kv_budget_bytes = 0;  // > 0: the pool is floor(budget / page_bytes) pages instead
  int64_t ubatch = 512;         // tokens computed at once (workspace rows)
  int64_t batch = 512;          // tokens a sequence adds in one step at most (the engine's max(-b, -ub))
  // Hybrid models: recurrent-state snapshots kept for prefix reuse, beside
  // the one state per running sequence.
  int state_snapshots = 0;
  // Kernel scratch of one workspace: matmul activation rows, attention
  // scratch and the query list for `ubatch` tokens (callers compute it with
  // kernels::matmul_scratch_bytes / attention::attention_scratch_bytes, as
  // Model::make_workspace does; plan/ may not depend on those modules).
  uint64_t kernel_scratch_bytes = 0;
  HostCosts host;
  // Empty: one device "cpu" that also holds the host costs, capacity
  // `host_capacity`. Otherwise the model is split over these devices and the
  // host costs are reported apart.
  std::vector<Device> devices;
  uint64_t host_capacity = 0;
  double host_bandwidth_gbps = 0.0;
  Split split = Split::kLayer;
  double headroom = 0.15;  // fraction of each device kept free
  // Speculative decoding (--spec), as the engine allocates for it: logits
  // for 1 + draft_max verify rows per sequence, a second recurrent-state
  // slot per sequence on hybrid models (the state before a verify step),
  // and the mirror KV pool of a draft model or of the MTP block (the
  // target's pool tokens plus pool_extra_tokens_per_sequence per sequence;
  // geometry.n_layer 0 = no pool), on the first device.
  struct Spec {
    bool on = false;
    int draft_max = 0;
    std::string pool_name;  // "draft model FILE", "MTP block"
    // The MTP block drafts: it runs on the first device (where the
    // proposer is), so its tensors and the whole output head are read
    // there, whichever device the split gives them.
    bool mtp = false;
    kv::KvGeometry pool_geometry;
    int64_t pool_extra_tokens_per_sequence = 0;
    // Bytes kept per pool page beside it (the MTP block's prefix cache: the
    // hidden state each page boundary's entry reads).
    uint64_t pool_page_extra_bytes = 0;
    uint64_t draft_weights_bytes = 0;  // the draft model's tensors
    uint64_t draft_scratch_bytes = 0;  // its workspace
  } spec;
};

// Bytes on one device.
struct DeviceUse {
  std::string name;
  uint64_t capacity = 0, usable = 0;  // usable = capacity × (1 − headroom)
  uint64_t weights = 0;               // every weight placed here (incl. projector / MTP)
  uint64_t step_weights = 0;          // of those, read by each decode step
  uint64_t kv = 0;                    // this device's share of the KV pool
  uint64_t kv_bytes_per_token = 0;     // the main pool's (sliding-window layers apart)
  uint64_t window_bytes_per_token = 0; // the sliding-window layers' (their own pool)
  // Hybrid models: the recurrent state of this device's DeltaNet layers, per
  // sequence, and for every state slot (sequences + snapshots).
  uint64_t state_per_sequence = 0;
  uint64_t state = 0;
  uint64_t scratch = 0;  // forward workspace
  uint64_t logits = 0;
  uint64_t host = 0;  // host costs (the single-device case only)
  uint64_t spec = 0;  // speculative decoding's draft weights, KV and workspace (first device)
  uint64_t total = 0;
  bool fits = false;
  int layer_begin = 0, layer_end = 0;  // layers held (layer split; all for tensor split)
  int kv_heads = 0;                    // KV heads held per layer (tensor split; all otherwise)
  std::string cut;                     // tensor split of a dense model: model/shard.h's describe()
  double bandwidth_gbps = 0.0;
};

struct SpeedPoint {
  int64_t ctx = 0;
  uint64_t bytes_per_step = 0;   // one sequence: weights read + KV at ctx
  double tok_s = 0.0;            // one sequence at ctx
  double aggregate_tok_s = 0.0;  // n_parallel sequences, each at ctx
};

struct Plan {
  kv::KvGeometry geometry;
  // Weight bytes by group; weights_bytes is their sum.
  uint64_t transformer_bytes = 0, projector_bytes = 0, mtp_bytes = 0, other_bytes = 0;
  uint64_t weights_bytes = 0;
  uint64_t step_weight_bytes = 0;  // read by one decode step (no projector, MTP, embedding table)
  // Of the MTP bytes, the NextN blocks' own attention and FFN tensors (in the
  // weight table, but not run by the main forward).
  int projector_tensors = 0, mtp_tensors = 0, other_tensors = 0;
  // KV pool, exactly as KvCache::create allocates it.
  uint64_t kv_bytes_per_token = 0, kv_page_bytes = 0;
  int64_t kv_pages = 0, kv_tokens = 0;  // kv_tokens = pages × page_tokens
  // Sliding-window layers (KvGeometry::window_layers): their pool's pages
  // and bytes; kv_bytes counts both pools.
  int window_layers = 0;
  int64_t window_pages = 0;
  uint64_t window_page_bytes = 0, window_bytes = 0;
  uint64_t kv_bytes = 0;
  // Recurrent state (hybrid models), exactly as KvCache::create allocates it:
  // state_slots slots of state_bytes_per_sequence.
  uint64_t state_bytes_per_sequence = 0;
  int64_t state_slots = 0;
  uint64_t state_bytes = 0;
  int kv_layers = 0;                     // blocks that keep KV
  uint64_t scratch_bytes = 0;            // one workspace (per device)
  uint64_t projector_scratch_bytes = 0;  // image encoding, one image at a time (first device)
  uint64_t logits_bytes = 0;
  // Speculative decoding's own pool and draft model (PlanInput::spec).
  std::string spec_pool;
  int64_t spec_kv_pages = 0;
  uint64_t spec_kv_bytes = 0, spec_weights_bytes = 0, spec_scratch_bytes = 0;
  HostCosts host;
  uint64_t host_bytes = 0;   // sum of the host costs
  uint64_t total_bytes = 0;  // everything, every device plus host costs
  std::vector<DeviceUse> devices;
  bool split = false;  // devices were given
  bool fits = false;
  // Under the headroom on every device: the largest context at n_parallel
  // sequences, and the most sequences at n_ctx (0 = not even one).
  int64_t max_ctx = 0;
  int64_t max_parallel = 0;
  // --kv-budget: tokens the budget's pool holds, in all and per sequence.
  int64_t budget_tokens = 0, budget_tokens_per_sequence = 0;
  std::vector<SpeedPoint> speed;  // empty without a bandwidth
  // Split over devices: the bytes each device sends per decoded token
  // (layer: hidden state on, logits back; tensor: its share of the ring
  // all-reduces and of the gathers); 0 on one device or where not modelled.
  uint64_t comm_bytes_per_token = 0;
  std::string verdict;
};

// Bytes of one forward workspace for `ubatch` tokens: the f32 activation
// buffers Model::make_workspace allocates plus the caller's kernel scratch.
uint64_t workspace_bytes(const ArchConfig& c, int64_t ubatch, uint64_t kernel_scratch_bytes);

// kInvalidArgument naming the field for an inconsistent input (no devices'
// capacity, a ratio <= 0, a KV format the cache cannot hold, ...).
Expected<Plan> make_plan(const PlanInput& in);

// "9.10 GiB" (binary units; bytes below 1 KiB as "512 B").
std::string format_bytes(uint64_t b);

}  // namespace sustain::plan
