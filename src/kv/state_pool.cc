#include "kv/state_pool.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace sustain::kv {

Status validate(const StateGeometry& g) {
  if (g.n_layer < 0 || g.conv_rows < 0 || g.conv_channels < 0 || g.n_head < 0 ||
      g.head_dim_k < 0 || g.head_dim_v < 0)
    return error(Code::kInvalidArgument,
                 "state geometry: negative count (layers {}, conv {}x{}, heads {}, dims {}x{})",
                 g.n_layer, g.conv_rows, g.conv_channels, g.n_head, g.head_dim_k, g.head_dim_v);
  if (g.n_layer > 0 && (g.n_head == 0 || g.head_dim_k == 0 || g.head_dim_v == 0))
    return error(Code::kInvalidArgument, "state geometry: {} layers with an empty state matrix",
                 g.n_layer);
  return Status::ok();
}

Expected<StatePool> StatePool::create(const StateGeometry& g, int32_t n_slots) {
  SUSTAIN_TRY(validate(g));
  if (n_slots < 0) return error(Code::kInvalidArgument, "state pool: {} slots", n_slots);
  StatePool p;
  p.g_ = g;
  p.n_slots_ = g.empty() ? 0 : n_slots;
  const uint64_t floats = uint64_t{p.slot_floats()} * static_cast<uint64_t>(p.n_slots_);
  try {
    p.data_.assign(static_cast<size_t>(floats), 0.0f);
  } catch (const std::bad_alloc&) {
    return error(Code::kOutOfMemory,
                 "recurrent state for {} sequences needs {} bytes ({} per sequence), which "
                 "cannot be allocated",
                 p.n_slots_, floats * sizeof(float), g.slot_bytes());
  }
  p.pos_.assign(static_cast<size_t>(p.n_slots_), 0);
  p.used_.assign(static_cast<size_t>(p.n_slots_), 0);
  for (int32_t s = p.n_slots_ - 1; s >= 0; --s) p.free_.push_back(s);
  return p;
}

int32_t StatePool::alloc() {
  if (free_.empty()) return -1;
  const int32_t s = free_.back();
  free_.pop_back();
  used_[static_cast<size_t>(s)] = 1;
  std::fill_n(slot_data(s), slot_floats(), 0.0f);
  pos_[static_cast<size_t>(s)] = 0;
  log({StateOp::kZero, s, 0, 0});
  return s;
}

void StatePool::free(int32_t slot) {
  SUSTAIN_CHECK(slot >= 0 && slot < n_slots_ && used_[static_cast<size_t>(slot)]);
  used_[static_cast<size_t>(slot)] = 0;
  free_.push_back(slot);
}

void StatePool::copy(int32_t from, int32_t to) {
  SUSTAIN_CHECK(from >= 0 && from < n_slots_ && to >= 0 && to < n_slots_);
  if (from == to) return;
  std::memcpy(slot_data(to), slot_data(from), slot_floats() * sizeof(float));
  pos_[static_cast<size_t>(to)] = pos_[static_cast<size_t>(from)];
  log({StateOp::kCopy, from, to, 0});
}

Status StatePool::apply(const StateOp& op, StatePool* snaps) {
  auto in = [](int32_t s, int32_t n) { return s >= 0 && s < n; };
  if (!in(op.slot, n_slots_))
    return error(Code::kInvalidArgument, "state op on slot {} of a pool of {}", op.slot, n_slots_);
  switch (op.kind) {
    case StateOp::kZero:
      std::fill_n(slot_data(op.slot), slot_floats(), 0.0f);
      pos_[static_cast<size_t>(op.slot)] = 0;
      return Status::ok();
    case StateOp::kCopy:
      if (!in(op.other, n_slots_))
        return error(Code::kInvalidArgument, "state copy to slot {} of a pool of {}", op.other,
                     n_slots_);
      std::memcpy(slot_data(op.other), slot_data(op.slot), slot_floats() * sizeof(float));
      pos_[static_cast<size_t>(op.other)] = pos_[static_cast<size_t>(op.slot)];
      return Status::ok();
    case StateOp::kSave:
    case StateOp::kRestore:
      if (snaps == nullptr || !in(op.other, snaps->n_slots_) ||
          snaps->slot_floats() != slot_floats())
        return error(Code::kInvalidArgument, "state snapshot {} outside the snapshot pool",
                     op.other);
      if (op.kind == StateOp::kSave) {
        std::copy_n(slot_data(op.slot), slot_floats(), snaps->slot_data(op.other));
        snaps->set_pos(op.other, op.pos);
      } else {
        std::copy_n(snaps->slot_data(op.other), slot_floats(), slot_data(op.slot));
        set_pos(op.slot, op.pos);
      }
      return Status::ok();
    default:
      return error(Code::kInvalidArgument, "state op of kind {}", op.kind);
  }
}

}  // namespace sustain::kv
