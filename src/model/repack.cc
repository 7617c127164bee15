#include "model/repack.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "kernels/ops.h"
#include "model/model.h"
#include "tensor/row_tiles.h"

namespace sustain {
namespace {

std::atomic<bool> g_repack{false};

}  // namespace

void hand_back_pages(const kernels::WeightView& v) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto src = reinterpret_cast<uintptr_t>(v.data);
  const auto b = (src + page - 1) / page * page;
  const auto e = (src + static_cast<size_t>(v.n_out) * v.row_bytes) / page * page;
  if (e > b) madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

void set_weight_repack(bool on) {
  g_repack.store(on, std::memory_order_relaxed);
}
bool weight_repack() {
  return g_repack.load(std::memory_order_relaxed);
}

RepackReport repack_weights(ModelWeights& w, std::vector<std::unique_ptr<uint8_t[]>>& store) {
  RepackReport rep;
  std::vector<kernels::WeightView*> todo;
  auto consider = [&](kernels::WeightView& v) {
    if (v.data == nullptr || v.tiled || v.n_out == 0) return;
    if (kernels::row_tiles_available(v.type)) {
      todo.push_back(&v);
    } else {
      ++rep.kept;
    }
  };
  // Tied: the output is the embedding itself. A tensor-split rank's output
  // is a share of the vocabulary rows (the first rank's starts where the
  // embedding does), a matrix of its own.
  const bool tied = w.output.data == w.token_embd.data && w.output.n_out == w.token_embd.n_out &&
                    w.output.n_in == w.token_embd.n_in && !w.output.tiled;
  consider(w.token_embd);
  if (!tied) consider(w.output);
  for (LayerWeights& L : w.layers) {
    for (kernels::WeightView* v : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down,
                                   &L.router, &L.ssm_qkv, &L.ssm_gate, &L.ssm_beta, &L.ssm_alpha,
                                   &L.ssm_out, &L.nextn_eh_proj, &L.nextn_embed, &L.nextn_head})
      consider(*v);
    for (auto* exps : {&L.gate_exps, &L.up_exps, &L.down_exps})
      for (kernels::WeightView& v : *exps) consider(v);
  }
  if (todo.empty()) {
    rep.skipped = kernels::row_tiles_available(QType::Q8_0)
                      ? "no Q4_0, Q5_0, Q8_0, Q4_K or Q6_K matrix in the model"
                      : "this CPU has no AVX-512 VNNI, which the repacked kernels need";
    return rep;
  }
  // One buffer for every copy (one thread), then the copies over the cores.
  // Its pages are asked for huge (transparent huge pages, the kernel's
  // "madvise" mode): memory touched for the first time costs a page fault
  // per page, and on the VMs measured a 4 KiB fault costs ~14 us, so 763 MiB
  // of fresh 4 KiB pages took 2.8 s to first write against 0.1-1.4 s in
  // 2 MiB pages (docs/kernels.md).
  constexpr size_t kAlign = 64, kHuge = size_t{2} << 20;
  std::vector<size_t> offset(todo.size());
  size_t total = 0;
  for (size_t i = 0; i < todo.size(); ++i) {
    const kernels::WeightView& v = *todo[i];
    offset[i] = total;
    total += (row_tiles_bytes(v.type, v.n_out, v.n_in) + kAlign - 1) / kAlign * kAlign;
    rep.bytes += static_cast<int64_t>(v.row_bytes) * v.n_out;
  }
  const size_t huge_total = (total + kHuge - 1) / kHuge * kHuge;
  store.push_back(std::make_unique_for_overwrite<uint8_t[]>(huge_total + kHuge));
  const auto raw = reinterpret_cast<uintptr_t>(store.back().get());
  auto* base = reinterpret_cast<uint8_t*>((raw + kHuge - 1) / kHuge * kHuge);
  madvise(base, huge_total, MADV_HUGEPAGE);  // advice only: 4 KiB pages where refused
  std::vector<uint8_t*> dst(todo.size());
  for (size_t i = 0; i < todo.size(); ++i) dst[i] = base + offset[i];
  std::vector<kernels::WeightView> done(todo.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < todo.size();) {
      done[i] = kernels::repack_rows(*todo[i], dst[i]);
      hand_back_pages(*todo[i]);
    }
  };
  const unsigned n = std::clamp(std::thread::hardware_concurrency(), 1u, 16u);
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < n; ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < todo.size(); ++i) *todo[i] = done[i];
  if (tied) w.output = w.token_embd;
  rep.matrices = static_cast<int64_t>(todo.size());
  return rep;
}

}  // namespace sustain
