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
#include <span>
#include <vector>

#include "base/batch_invariant.h"
#include "base/status.h"
#include "kernels/cpu/kernels.h"
#include "kernels/ops.h"
#include "kernels/ref.h"
#include "tensor/blocks.h"
#include "tensor/fp16.h"
#include "tensor/row_tiles.h"

namespace sustain::kernels {
namespace {

constexpr size_t kAlign = 64;
// Weight bytes per tile in prefill: well inside the 1 MiB L2 of the target
// machines, leaving room for the activation rows streaming past.
constexpr size_t kTileBytes = 192 * 1024;
// From this many tokens on, unpacking a row tile once (cpu/packed-inl.h) pays
// (measured with bench_matmul's Batch family, docs/kernels.md): the 32-element
// formats' tiles are cheap to pack (one scale per block) and beat the row
// kernel from 4 tokens; the K-quants' sub-block scales make packing dearer,
// and the row kernel's one group of 8 tokens keeps level up to 8 — from 9 it
// would take two passes over every row.
constexpr int64_t kPackedMinTokensLegacy = 4;
constexpr int64_t kPackedMinTokensKQuant = 9;
// Repacked K-quants (row_tiles_packed_tile): from this many tokens on, the
// packed kernel fed from the groups beats the tile kernel's passes of 8
// tokens (bench_matmul's Repacked family, docs/kernels.md). Below it the
// tile kernel keeps every token's sums as its one-token call computes them.
constexpr int64_t kTilesPackedMinTokens = 32;

// The kernel for repacked weights and this many tokens: the tile kernel,
// batch invariant, unless many tokens and no batch invariance asked for.
cpu::TileFn tiles_kernel(QType t, int64_t n_tokens, bool one_row_order) {
  cpu::TileFn f = nullptr;
  if (!one_row_order && n_tokens >= kTilesPackedMinTokens) f = cpu::row_tiles_packed_tile(t);
  if (f == nullptr) f = cpu::row_tiles_tile(t);
  SUSTAIN_CHECK(f != nullptr);
  return f;
}

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

// The code offset whose lane sums the kernel for w reads with Q8_0
// activations: the row kernels' (cpu::q8_0_code_offset); none for repacked
// rows, whose kernel starts from the block sums.
int code_offset(const WeightView& w) {
  return w.tiled ? 0 : cpu::q8_0_code_offset(w.type);
}

// One activation row as the kernels read it: ref's layout, plus for Q8_0 the
// per-block sums, f32 scales and offset lane sums (see cpu::q8_0_sums_offset).
void quantize_row(const WeightView& w, const float* x, uint8_t* out) {
  if (activation_type(w.type) == QType::Q8_0) {
    cpu::quantize_q8_0_activation(x, out, w.n_in, code_offset(w));
    return;
  }
  if (activation_type(w.type) == QType::Q8_K) {
    cpu::quantize_q8_k_activation(x, out, w.n_in);
    return;
  }
  ref::quantize_activation(w.type, x, out, w.n_in);
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

bool row_tiles_available(QType t) {
  return row_tiles_format(t) && cpu::row_tiles_tile(t) != nullptr;
}

WeightView repack_rows(const WeightView& w, void* dst) {
  SUSTAIN_CHECK(!w.tiled && row_tiles_format(w.type));
  to_row_tiles(w.type, w.data, w.row_bytes, w.n_out, w.n_in, dst);
  WeightView t = w;
  t.data = dst;
  t.row_bytes = qtype_row_bytes(w.type, static_cast<uint64_t>(w.n_in));
  t.tiled = true;
  return t;
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
      for (size_t t = t0; t < t1; ++t) quantize_row(w, x + t * ldx, act + t * stride);
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
  // Batch invariance: every row as a one-row call computes it (the packed
  // kernels sum a row's blocks in another order).
  const bool one_row_order = batch_invariant();
  if (w.tiled) packed = tiles_kernel(w.type, n_tokens, one_row_order);
  if (packed == nullptr && !one_row_order && n_tokens >= kPackedMinTokensLegacy)
    packed = cpu::legacy_packed_tile(w.type);
  if (!one_row_order && packed == nullptr && n_tokens >= kPackedMinTokensKQuant)
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

namespace {

// Weight bytes per work unit of matmul_batch when the job is one token (the
// row kernel reads each row once). Units are the grain of the split into
// per-thread runs (adjacent units of one job run as one call), so this only
// bounds how unevenly the threads' runs can end: about 3 us of work here.
constexpr size_t kBatchUnitBytes = 64 * 1024;

// Fewest rows for which matmul_batch shares a row prologue's work over the
// threads. Below it the rows are made and quantized on the caller: on the
// 2-core Zen 4 VM a region of two rows made a two-sequence decode step of
// smollm2-135m 6 % slower (the other thread's row crosses cores twice for
// ~1 us of work), while from 4 rows up the shared work is the gain
// (docs/serving.md, "Norms and SwiGLU inside the quantization region").
constexpr int64_t kPrologueMinRows = 4;

// One job of a batch, ready to run: its kernel arguments, its kernel, and
// how its rows go into units.
struct BatchJob {
  cpu::MatmulArgs a;
  cpu::TileFn fn = nullptr;
  int64_t n_tokens = 0, n_out = 0, unit_rows = 0;
  bool packed = false;    // fn is a packed kernel (rows in tiles of 16)
  size_t first_unit = 0;  // index of the job's first unit in the batch
};

// Whether job j reads the same activation rows as job j - 1 (so the rows are
// quantized once): same x, stride, token count, length and format.
bool shares_activations(std::span<const MatmulJob> jobs, size_t j) {
  if (j == 0) return false;
  const MatmulJob &p = jobs[j - 1], &c = jobs[j];
  return p.n_tokens > 0 && p.w.n_out > 0 && p.x == c.x && p.ldx == c.ldx &&
         p.n_tokens == c.n_tokens && p.w.n_in == c.w.n_in &&
         activation_type(p.w.type) == activation_type(c.w.type) &&
         code_offset(p.w) == code_offset(c.w);
}

}  // namespace

size_t matmul_batch_scratch_bytes(std::span<const MatmulJob> jobs) {
  size_t total = kAlign;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const MatmulJob& m = jobs[j];
    if (m.n_tokens <= 0 || m.w.n_out <= 0 || reads_x_directly(m.w.type) ||
        shares_activations(jobs, j))
      continue;
    total += static_cast<size_t>(m.n_tokens) * act_stride(m.w.type, m.w.n_in);
  }
  return total;
}

void matmul_batch(std::span<const MatmulJob> jobs, ThreadPool& pool, void* scratch,
                  size_t scratch_bytes, RowPrologue prologue) {
  SUSTAIN_CHECK(scratch_bytes >= matmul_batch_scratch_bytes(jobs));
  const bool one_row_order = batch_invariant();  // as matmul: no packed kernels
  // Reused from call to call (a batch is a few hundred jobs at most). The
  // workers must reach the caller's vectors, not their own thread_local
  // ones: the lambdas below use these references.
  thread_local std::vector<BatchJob> prepared_tls;
  thread_local std::vector<size_t> quant_rows_tls;  // job index << 32 | token, per row
  std::vector<BatchJob>& prepared = prepared_tls;
  std::vector<size_t>& quant_rows = quant_rows_tls;
  thread_local std::vector<double> before_tls;
  thread_local std::vector<size_t> quant_jobs_tls;  // jobs whose rows are quantized
  std::vector<size_t>& quant_jobs = quant_jobs_tls;
  prepared.clear();
  quant_rows.clear();
  quant_jobs.clear();
  int64_t prologue_rows = 0;  // rows the prologue makes: every job's tokens
  auto base = reinterpret_cast<uintptr_t>(scratch);
  auto* act = reinterpret_cast<uint8_t*>((base + kAlign - 1) / kAlign * kAlign);
  size_t n_units = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const MatmulJob& m = jobs[j];
    SUSTAIN_CHECK(matmul_supported(m.w.type));
    BatchJob b;
    b.n_tokens = m.n_tokens;
    b.n_out = m.w.n_out;
    b.a.type = m.w.type;
    b.a.w = static_cast<const uint8_t*>(m.w.data);
    b.a.w_stride = m.w.row_bytes;
    b.a.n_in = m.w.n_in;
    b.a.y = m.y;
    b.a.ldy = m.ldy;
    if (m.n_tokens <= 0 || m.w.n_out <= 0) {
      b.first_unit = n_units;
      prepared.push_back(b);
      continue;
    }
    if (reads_x_directly(m.w.type)) {
      b.a.act = reinterpret_cast<const uint8_t*>(m.x);
      b.a.act_stride = static_cast<size_t>(m.ldx) * sizeof(float);
    } else if (shares_activations(jobs, j)) {
      b.a.act = prepared.back().a.act;
      b.a.act_stride = prepared.back().a.act_stride;
    } else {
      b.a.act = act;
      b.a.act_stride = act_stride(m.w.type, m.w.n_in);
      act += static_cast<size_t>(m.n_tokens) * b.a.act_stride;
      for (int64_t t = 0; t < m.n_tokens; ++t)
        quant_rows.push_back(j << 32 | static_cast<size_t>(t));
      quant_jobs.push_back(j);
    }
    prologue_rows = std::max(prologue_rows, m.n_tokens);
    // The kernel matmul would pick for this many tokens, and units of rows
    // that keep its tiling: 16-row tiles for the packed kernel, prefill tiles
    // of about kTileBytes for the row kernel, and for one token row ranges of
    // about kBatchUnitBytes.
    cpu::TileFn packed = nullptr;
    if (m.w.tiled) packed = tiles_kernel(m.w.type, m.n_tokens, one_row_order);
    if (packed == nullptr && !one_row_order && m.n_tokens >= kPackedMinTokensLegacy)
      packed = cpu::legacy_packed_tile(m.w.type);
    if (!one_row_order && packed == nullptr && m.n_tokens >= kPackedMinTokensKQuant)
      packed = cpu::kquant_packed_tile(m.w.type);
    const auto row_bytes = static_cast<int64_t>(std::max<size_t>(m.w.row_bytes, 1));
    if (packed != nullptr) {
      b.fn = packed;
      b.packed = true;
      b.unit_rows = 16;
    } else {
      b.fn = tile_for(m.w.type);
      SUSTAIN_CHECK(b.fn != nullptr);
      const int64_t unit_bytes = m.n_tokens == 1 ? static_cast<int64_t>(kBatchUnitBytes)
                                                 : static_cast<int64_t>(kTileBytes);
      b.unit_rows = std::max<int64_t>(8, unit_bytes / row_bytes / 8 * 8);
    }
    b.first_unit = n_units;
    n_units += static_cast<size_t>((b.n_out + b.unit_rows - 1) / b.unit_rows);
    prepared.push_back(b);
  }
  SUSTAIN_CHECK(act <= static_cast<uint8_t*>(scratch) + scratch_bytes);

  auto quantize = [&](size_t i0, size_t i1, int) {
    for (size_t i = i0; i < i1; ++i) {
      const size_t j = quant_rows[i] >> 32;
      const auto t = static_cast<int64_t>(quant_rows[i] & 0xffffffffu);
      const MatmulJob& m = jobs[j];
      quantize_row(m.w, m.x + t * m.ldx,
                   const_cast<uint8_t*>(prepared[j].a.act) + t * prepared[j].a.act_stride);
    }
  };
  if (prologue.fn != nullptr && prologue_rows > 0) {
    // Token by token: the prologue makes row t of the input, then row t is
    // quantized for every job that needs it (the region's split is by
    // tokens, so a row never leaves the thread that made it before the
    // region ends).
    auto make_rows = [&](size_t t0, size_t t1, int) {
      for (auto t = static_cast<int64_t>(t0); t < static_cast<int64_t>(t1); ++t) {
        prologue.fn(prologue.ctx, t);
        for (const size_t j : quant_jobs) {
          const MatmulJob& m = jobs[j];
          if (t >= m.n_tokens) continue;
          quantize_row(m.w, m.x + t * m.ldx,
                       const_cast<uint8_t*>(prepared[j].a.act) + t * prepared[j].a.act_stride);
        }
      }
    };
    if (prologue_rows < kPrologueMinRows) {
      make_rows(0, static_cast<size_t>(prologue_rows), 0);
    } else {
      pool.parallel_for(static_cast<size_t>(prologue_rows), make_rows);
    }
  } else if (quant_rows.size() <= 2) {
    quantize(0, quant_rows.size(), 0);  // not worth waking the pool
  } else {
    pool.parallel_for(quant_rows.size(), quantize);
  }
  if (n_units == 0) return;

  // A static split of the units in batch order into one contiguous run per
  // thread, of equal estimated cost: weight bytes times (tokens + the cost of
  // reading the bytes, counted as kReadCostTokens tokens). Contiguous runs
  // keep each thread streaming adjacent rows of one matrix (the hardware
  // prefetcher's best case, which a dynamic hand-out of units interleaved
  // between threads loses); the pool's claim-based join still lets the
  // caller take a run whose worker is late.
  constexpr double kReadCostTokens = 2.0;
  std::vector<double>& before = before_tls;  // cost of the units before unit u
  before.resize(n_units + 1);
  before[0] = 0.0;
  for (const BatchJob& b : prepared) {
    const double per_row =
        static_cast<double>(b.a.w_stride) * (static_cast<double>(b.n_tokens) + kReadCostTokens);
    const size_t n =
        b.unit_rows > 0 ? static_cast<size_t>((b.n_out + b.unit_rows - 1) / b.unit_rows) : 0;
    for (size_t k = 0; k < n; ++k) {
      const int64_t rows = std::min(b.unit_rows, b.n_out - static_cast<int64_t>(k) * b.unit_rows);
      before[b.first_unit + k + 1] = before[b.first_unit + k] + per_row * static_cast<double>(rows);
    }
  }
  const double total = before[n_units];
  const int n_slots = static_cast<int>(std::min<size_t>(static_cast<size_t>(pool.size()), n_units));
  auto first_unit_at = [&](int slot) -> size_t {
    if (slot >= n_slots) return n_units;
    const double target = total * slot / n_slots;
    return static_cast<size_t>(std::lower_bound(before.begin(), before.end() - 1, target) -
                               before.begin());
  };
  auto run_units = [&](size_t u0, size_t u1) {
    while (u0 < u1) {
      // The job owning unit u0: the last whose first unit is <= u0.
      auto it = std::upper_bound(prepared.begin(), prepared.end(), u0,
                                 [](size_t v, const BatchJob& b) { return v < b.first_unit; });
      const BatchJob& b = *(it - 1);
      const size_t job_end =
          b.first_unit + static_cast<size_t>((b.n_out + b.unit_rows - 1) / b.unit_rows);
      const size_t stop = std::min(u1, job_end);
      const int64_t r_begin = static_cast<int64_t>(u0 - b.first_unit) * b.unit_rows;
      const int64_t r_end =
          std::min(static_cast<int64_t>(stop - b.first_unit) * b.unit_rows, b.n_out);
      if (b.n_tokens > 1 && !b.packed) {
        // The row kernel's prefill tiles, each dotted with every token.
        for (int64_t r0 = r_begin; r0 < r_end; r0 += b.unit_rows)
          b.fn(b.a, r0, std::min(r0 + b.unit_rows, r_end), 0, b.n_tokens);
      } else {
        b.fn(b.a, r_begin, r_end, 0, b.n_tokens);
      }
      u0 = stop;
    }
  };
  if (n_slots <= 1) {
    run_units(0, n_units);
    return;
  }
  pool.parallel_for(static_cast<size_t>(n_slots), [&](size_t s0, size_t s1, int) {
    for (auto s = static_cast<int>(s0); s < static_cast<int>(s1); ++s)
      run_units(first_unit_at(s), first_unit_at(s + 1));
  });
}

}  // namespace sustain::kernels
