// The matmul driver: picks the activation format and the kernel, quantizes the
// activation rows once into scratch, and splits the work over the pool.
//
// Work split: by output rows (each thread one contiguous range), so every
// weight byte is read once per call however many tokens there are. Within a
// thread's range, rows go in tiles of about kTileBytes of weights; a tile is
// dotted with all tokens (in groups of 8 on AVX-512, 4 on AVX2, see
// cpu/quant-inl.h) before the next tile, so in prefill a tile is read from
// memory once and reused from L2. From kPackedMinTokens* tokens on, targets
// with a packed kernel (AVX-512 VNNI, cpu/packed-inl.h) take over: row tiles
// of 16, unpacked once per call.
// Only when there are too few rows to share out does the split go by tokens.
#include <algorithm>
#include <cstring>

#include "base/status.h"
#include "kernels/cpu/kernels.h"
#include "kernels/ops.h"
#include "kernels/ref.h"
#include "tensor/blocks.h"
#include "tensor/fp16.h"

namespace sustain::kernels {
namespace {

constexpr size_t kAlign = 64;
// Weight bytes per tile in prefill: well inside the 1 MiB L2 of the target
// machines, leaving room for the activation rows streaming past.
constexpr size_t kTileBytes = 192 * 1024;
// From this many tokens on, unpacking a row tile once (cpu/packed-inl.h) pays
// (measured with bench_matmul's Batch family, docs/kernels.md): the 32-element
// formats' tiles are cheap to pack (one scale per block) and beat the row
// kernel from about 6 tokens; the K-quants' sub-block scales make packing
// dearer, and the row kernel's 8-token groups stay ahead up to 15.
constexpr int64_t kPackedMinTokensLegacy = 6;
constexpr int64_t kPackedMinTokensKQuant = 16;

size_t align_up(size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

cpu::TileFn tile_for(QType t) {
  if (auto f = cpu::legacy_tile(t)) return f;
  if (auto f = cpu::kquant_tile(t)) return f;
  return cpu::float_tile(t);
}

// Activations the kernels read straight from x (f32), without scratch.
bool reads_x_directly(QType w) {
  return activation_type(w) == QType::F32;
}

size_t act_stride(QType w, int64_t n_in) {
  if (activation_type(w) == QType::Q8_0) return align_up(cpu::q8_0_row_bytes(n_in));
  return align_up(ref::activation_row_bytes(w, n_in));
}

// One activation row as the kernels read it: ref's layout, plus for Q8_0 the
// per-block sums, f32 scales and offset lane sums (see cpu::q8_0_sums_offset).
void quantize_row(QType w, const float* x, uint8_t* out, int64_t n_in) {
  if (activation_type(w) == QType::Q8_0) {
    cpu::quantize_q8_0_activation(x, out, n_in, cpu::q8_0_code_offset(w));
    return;
  }
  ref::quantize_activation(w, x, out, n_in);
}

}  // namespace

QType activation_type(QType w) {
  switch (w) {
    case QType::F32:
      return QType::F32;
    case QType::F16:
      return QType::F16;
    case QType::BF16:
      return QType::BF16;
    case QType::Q4_0:
    case QType::Q5_0:
    case QType::Q8_0:
      return QType::Q8_0;
    case QType::Q4_1:
    case QType::Q5_1:
      return QType::Q8_1;
    case QType::Q2_K:
    case QType::Q3_K:
    case QType::Q4_K:
    case QType::Q5_K:
    case QType::Q6_K:
      return QType::Q8_K;
    default:
      return QType::F32;  // dequantized and dotted in f32
  }
}

bool matmul_supported(QType w) {
  const QTypeTraits* tr = find_qtype(static_cast<uint32_t>(w));
  return tr != nullptr && tr->dequantize != nullptr;
}

size_t matmul_scratch_bytes(QType w, int64_t n_in, int64_t n_tokens) {
  if (reads_x_directly(w)) return 0;
  return static_cast<size_t>(n_tokens) * act_stride(w, n_in) + kAlign;
}

void matmul(const WeightView& w, const float* x, int64_t ldx, int64_t n_tokens, float* y,
            int64_t ldy, ThreadPool& pool, void* scratch) {
  SUSTAIN_CHECK(matmul_supported(w.type));
  if (n_tokens <= 0 || w.n_out <= 0) return;
  cpu::MatmulArgs a;
  a.type = w.type;
  a.w = static_cast<const uint8_t*>(w.data);
  a.w_stride = w.row_bytes;
  a.n_in = w.n_in;
  a.y = y;
  a.ldy = ldy;
  if (reads_x_directly(w.type)) {
    a.act = reinterpret_cast<const uint8_t*>(x);
    a.act_stride = static_cast<size_t>(ldx) * sizeof(float);
  } else {
    auto base = reinterpret_cast<uintptr_t>(scratch);
    auto* act = reinterpret_cast<uint8_t*>((base + kAlign - 1) / kAlign * kAlign);
    const size_t stride = act_stride(w.type, w.n_in);
    a.act = act;
    a.act_stride = stride;
    auto quantize = [&](size_t t0, size_t t1, int) {
      for (size_t t = t0; t < t1; ++t) quantize_row(w.type, x + t * ldx, act + t * stride, w.n_in);
    };
    if (n_tokens == 1) {
      quantize(0, 1, 0);  // not worth waking the pool for one row
    } else {
      pool.parallel_for(static_cast<size_t>(n_tokens), quantize);
    }
  }
  const cpu::TileFn tile = tile_for(w.type);
  SUSTAIN_CHECK(tile != nullptr);
  const int n_threads = pool.size();
  cpu::TileFn packed = nullptr;
  if (n_tokens >= kPackedMinTokensLegacy) packed = cpu::legacy_packed_tile(w.type);
  if (packed == nullptr && n_tokens >= kPackedMinTokensKQuant)
    packed = cpu::kquant_packed_tile(w.type);
  if (packed != nullptr) {
    // Row tiles of 16 (the packed kernel's unit), shared out over threads.
    const int64_t n_tiles = (w.n_out + 15) / 16;
    if (n_tiles < n_threads) {  // too few tiles to share: split the tokens instead
      pool.parallel_for(static_cast<size_t>(n_tokens), [&](size_t t0, size_t t1, int) {
        packed(a, 0, w.n_out, static_cast<int64_t>(t0), static_cast<int64_t>(t1));
      });
      return;
    }
    pool.parallel_for(static_cast<size_t>(n_tiles), [&](size_t b, size_t e, int) {
      packed(a, static_cast<int64_t>(b) * 16,
             std::min<int64_t>(static_cast<int64_t>(e) * 16, w.n_out), 0, n_tokens);
    });
    return;
  }
  if (n_tokens > 1 && w.n_out < 4 * n_threads) {
    pool.parallel_for(static_cast<size_t>(n_tokens), [&](size_t t0, size_t t1, int) {
      tile(a, 0, w.n_out, static_cast<int64_t>(t0), static_cast<int64_t>(t1));
    });
    return;
  }
  const int64_t tile_rows =
      n_tokens == 1 ? w.n_out
                    : std::max<int64_t>(1, static_cast<int64_t>(kTileBytes / w.row_bytes));
  pool.parallel_for(static_cast<size_t>(w.n_out), [&](size_t r_begin, size_t r_end, int) {
    for (auto r0 = static_cast<int64_t>(r_begin); r0 < static_cast<int64_t>(r_end);
         r0 += tile_rows) {
      tile(a, r0, std::min<int64_t>(r0 + tile_rows, static_cast<int64_t>(r_end)), 0, n_tokens);
    }
  });
}

}  // namespace sustain::kernels
