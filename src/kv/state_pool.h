// Recurrent state of hybrid models (qwen35's Gated DeltaNet layers), kept
// beside the KV pages: a fixed number of slots, allocated once, each holding
// one sequence's state for every recurrent layer — the last conv_rows inputs
// of the causal convolution ([conv_rows][conv_channels] f32) and one
// [head_dim_k][head_dim_v] f32 matrix per value head — plus the number of
// positions the state has absorbed. Unlike KV, the state cannot be rewound:
// restoring an earlier position means copying a snapshot back (prefix reuse,
// preemption, speculative rollback do exactly that).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "base/status.h"

namespace sustain::kv {

struct StateGeometry {
  int n_layer = 0;        // recurrent layers (0: the model keeps no state)
  int conv_rows = 0;      // conv kernel - 1
  int conv_channels = 0;
  int n_head = 0;         // value heads
  int head_dim_k = 0;
  int head_dim_v = 0;

  bool empty() const { return n_layer == 0; }
  size_t conv_floats() const { return size_t(conv_rows) * conv_channels; }
  size_t ssm_floats() const { return size_t(n_head) * head_dim_k * head_dim_v; }
  size_t layer_floats() const { return conv_floats() + ssm_floats(); }
  // Bytes of one slot: what one sequence's state costs.
  size_t slot_bytes() const { return size_t(n_layer) * layer_floats() * sizeof(float); }
};

// kInvalidArgument naming the field when a count is out of range.
Status validate(const StateGeometry& g);

// What changed a slot's contents outside a forward step, as a cache that
// mirrors this one (an engine over ranks) must replay it: a slot handed out
// zeroed, a slot copied to another, a slot saved to / restored from a
// prefix-cache snapshot at position `pos`. The mirror replays them in order
// and between the same two forward steps as they happened (the engine sends
// them with the next step), so a snapshot is of the same state on both.
struct StateOp {
  enum Kind : int32_t { kZero = 0, kCopy = 1, kSave = 2, kRestore = 3 };
  int32_t kind = kZero;
  int32_t slot = 0;   // the cache's slot (kCopy: the source)
  int32_t other = 0;  // kCopy: the destination slot; kSave / kRestore: the snapshot
  int64_t pos = 0;    // kSave / kRestore: the position the state stands at
};

class StatePool {
 public:
  StatePool() = default;
  // Allocates n_slots slots up front (zeroed, so touched: a pool that does
  // not fit fails here). kOutOfMemory names the bytes.
  static Expected<StatePool> create(const StateGeometry& g, int32_t n_slots);

  const StateGeometry& geometry() const { return g_; }
  int32_t n_slots() const { return n_slots_; }
  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
  size_t bytes_allocated() const { return data_.size() * sizeof(float); }

  // A free slot, zeroed, at position 0; -1 when none is free.
  int32_t alloc();
  void free(int32_t slot);

  // Positions absorbed by the state of `slot`.
  int64_t pos(int32_t slot) const { return pos_[static_cast<size_t>(slot)]; }
  void set_pos(int32_t slot, int64_t p) { pos_[static_cast<size_t>(slot)] = p; }

  float* conv(int32_t slot, int layer) { return base(slot, layer); }
  float* ssm(int32_t slot, int layer) { return base(slot, layer) + g_.conv_floats(); }
  const float* conv(int32_t slot, int layer) const { return base(slot, layer); }
  const float* ssm(int32_t slot, int layer) const { return base(slot, layer) + g_.conv_floats(); }

  // The whole state of a slot (every layer), for snapshots.
  const float* slot_data(int32_t slot) const { return base(slot, 0); }
  float* slot_data(int32_t slot) { return base(slot, 0); }
  size_t slot_floats() const { return size_t(g_.n_layer) * g_.layer_floats(); }

  // Copies state and position of `from` into `to` (same pool).
  void copy(int32_t from, int32_t to);

  // While logging, alloc() and copy() record what they changed (kZero,
  // kCopy), and log() what others did (the prefix cache's snapshots), in
  // order; take_log() hands the record over.
  void set_logging(bool on) { logging_ = on; }
  void log(const StateOp& op) {
    if (logging_) log_.push_back(op);
  }
  std::vector<StateOp> take_log() { return std::exchange(log_, {}); }
  // Replays `op` on this pool (a mirror); kSave / kRestore go to or from
  // `snaps`, the mirror's snapshot pool. kInvalidArgument for a slot out
  // of range or a snapshot op without a snapshot pool.
  Status apply(const StateOp& op, StatePool* snaps);

 private:
  float* base(int32_t slot, int layer) {
    return data_.data() + slot_floats() * static_cast<size_t>(slot) +
           g_.layer_floats() * static_cast<size_t>(layer);
  }
  const float* base(int32_t slot, int layer) const {
    return data_.data() + slot_floats() * static_cast<size_t>(slot) +
           g_.layer_floats() * static_cast<size_t>(layer);
  }

  StateGeometry g_;
  int32_t n_slots_ = 0;
  std::vector<float> data_;
  std::vector<int64_t> pos_;
  std::vector<int32_t> free_;   // stack of free slots
  std::vector<uint8_t> used_;
  bool logging_ = false;
  std::vector<StateOp> log_;
};

}  // namespace sustain::kv
