#include "tools/synth.h"
#include "base/splitmix.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "gguf/gguf.h"
#include "model/weights.h"
#include "tools/tokenizer_json.h"

namespace sustain::tools {
namespace {

// One SplitMix64 state per row chunk.

// Approximately standard normal: the sum of four 16-bit uniforms (Irwin-Hall),
// rescaled to unit variance. One 64-bit draw per value; cheap enough to fill
// billions of weights.
inline float approx_normal(SplitMix64& g) {
  const uint64_t r = g.next();
  const float s = static_cast<float>((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) +
                                     (r >> 48));
  // Mean 4 * 32767.5, variance 4 * (65536^2 - 1) / 12.
  constexpr float kMean = 4.0f * 32767.5f;
  constexpr float kInvStd = 1.0f / 37837.23f;  // sqrt(4 * (65536^2 - 1) / 12)
  return (s - kMean) * kInvStd;
}

uint64_t mix_seed(uint64_t seed, uint64_t tensor, uint64_t chunk) {
  SplitMix64 g{seed ^ (tensor * 0x632be59bd9b4e019ull) ^ (chunk * 0x8cb92ba72f3d8dd7ull)};
  g.next();
  return g.next();
}

// Fills rows [r0, r1) of a tensor with values for its role.
void fill_rows(const WeightSpec& w, uint64_t seed, size_t tensor_index, int64_t r0, int64_t r1,
               int64_t row_len, float* out) {
  const int64_t fan_in = w.is_matrix() ? w.shape.back() : 1;
  float scale = 1.0f / std::sqrt(static_cast<float>(fan_in));
  float offset = 0.0f;
  switch (w.role) {
    case TensorRole::kOutputNorm:
    case TensorRole::kAttnNorm:
    case TensorRole::kFfnNorm:
    case TensorRole::kAttnQNorm:
    case TensorRole::kAttnKNorm:
    case TensorRole::kAttnPostNorm:
    case TensorRole::kFfnPostNorm:
    case TensorRole::kSsmNorm:
    case TensorRole::kNextnEnorm:
    case TensorRole::kNextnHnorm:
    case TensorRole::kNextnSharedHeadNorm:
      // Norm gains around 1, as in a trained model.
      offset = 1.0f;
      scale = 0.05f;
      break;
    case TensorRole::kAttnQBias:
    case TensorRole::kAttnKBias:
    case TensorRole::kAttnVBias: scale = 0.02f; break;
    // Gated DeltaNet: A = -exp(A_log) < 0, so that exp(g) is a decay in
    // (0, 1) (a positive A would grow the state without bound), a dt bias
    // around -0.5 and conv taps of PyTorch's default scale (1/sqrt(K)).
    case TensorRole::kSsmA:
      offset = -0.5f;
      scale = 0.1f;
      break;
    case TensorRole::kSsmDtBias:
      offset = -0.5f;
      scale = 0.5f;
      break;
    case TensorRole::kTokenEmbd:
      // Embedding rows of unit RMS / sqrt(d) like an initialised model; the
      // first RMSNorm rescales them anyway.
      scale = 1.0f / std::sqrt(static_cast<float>(w.shape[1]));
      break;
    default: break;
  }
  // One generator per 64-row chunk keeps the result independent of threading.
  constexpr int64_t kRowsPerChunk = 64;
  for (int64_t r = r0; r < r1;) {
    const int64_t chunk = r / kRowsPerChunk;
    const int64_t chunk_end = std::min(r1, (chunk + 1) * kRowsPerChunk);
    SplitMix64 g{mix_seed(seed, tensor_index, static_cast<uint64_t>(chunk))};
    // Skip the values of rows of this chunk before r (only when a range starts mid-chunk).
    for (int64_t skip = (r - chunk * kRowsPerChunk) * row_len; skip > 0; --skip) g.next();
    for (; r < chunk_end; ++r) {
      float* row = out + (r - r0) * row_len;
      for (int64_t i = 0; i < row_len; ++i) row[i] = offset + scale * approx_normal(g);
    }
  }
}

}  // namespace

Expected<SynthResult> synth_model(const Preset& preset, const std::string& out_path,
                                  const SynthOptions& opt, ThreadPool& pool) {
  ArchConfig cfg = preset.arch;
  const uint32_t n_main = cfg.n_main_layer();
  if (opt.n_layer > n_main)
    return error(Code::kInvalidArgument, "--layers {} is more than preset {}'s {} blocks",
                 opt.n_layer, preset.name, n_main);
  if (opt.n_layer > 0) cfg.n_layer = opt.n_layer + cfg.n_nextn;
  SUSTAIN_TRY(validate_arch_config(cfg));
  const auto table = default_weight_table(cfg, preset.llama3_rope);
  const auto types = plan_tensor_types(cfg, table, opt.type);
  const auto& ft = file_type_info(opt.type);

  gguf::Writer w;
  arch_config_to_gguf(cfg, w);
  w.set_str("general.type", "model");
  const bool cut = cfg.n_main_layer() < n_main;
  w.set_str("general.source",
            fmt::format("sustain synth --preset {} --seed {}{}", preset.name, opt.seed,
                        cut ? fmt::format(" --layers {}", cfg.n_main_layer()) : ""));
  const std::string shape = cut ? fmt::format("{}, cut to its first {} of {} blocks",
                                              preset.hf_name, cfg.n_main_layer(), n_main)
                                : preset.hf_name;
  w.set_str("general.description",
            fmt::format("Random weights in the exact shape of {}; for speed and memory "
                        "measurements only (its text is meaningless).",
                        shape));
  w.set_u32("general.file_type", ft.gguf_file_type);
  w.set_u32("general.quantization_version", 2);
  if (opt.tokenizer_json.empty()) {
    SUSTAIN_TRY(write_synth_vocab(w, preset.vocab));
  } else {
    TokenizerJsonOptions to;
    to.n_vocab = cfg.n_vocab;
    auto imported = import_tokenizer_json(opt.tokenizer_json, w, to);
    if (!imported)
      return imported.status().with_context(
          fmt::format("--tokenizer for preset {} ({}-token embedding)", preset.name, cfg.n_vocab));
    const TokenizerJsonInfo& ti = *imported;
    if (ti.n_vocab != cfg.n_vocab)
      return error(Code::kInvalidArgument,
                   "{}: the tokenizer has {} tokens but preset {} has a {}-token embedding",
                   opt.tokenizer_json, ti.n_vocab, preset.name, cfg.n_vocab);
  }

  std::vector<float> rope_factors;
  if (preset.llama3_rope) rope_factors = llama3_rope_factors(preset);

  SynthResult res;
  res.n_tensors = table.size();
  uint64_t total_bytes = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    SUSTAIN_TRY(w.add_tensor(table[i].name, types[i], table[i].shape, nullptr));
    total_bytes += w.tensor_bytes(i);
    res.n_params += table[i].n_elements();
  }
  SUSTAIN_TRY(w.begin(out_path));

  constexpr uint64_t kChunkFloats = 16ull << 20;  // 64 MiB of f32 per chunk
  std::vector<float> f32;
  std::vector<uint8_t> q;
  uint64_t done_bytes = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    const WeightSpec& spec = table[i];
    const QType t = types[i];
    const auto& tr = qtype_traits(t);
    const int64_t row_len = spec.shape.back();
    const int64_t n_rows = static_cast<int64_t>(spec.n_elements() / row_len);
    const uint64_t row_bytes = qtype_row_bytes(t, row_len);
    if (spec.role == TensorRole::kRopeFreqs) {
      SUSTAIN_TRY(w.write_tensor_data(rope_factors.data(), rope_factors.size() * sizeof(float)));
    } else {
      // The quantized tensor is assembled whole (the writer takes a tensor's
      // bytes in one call); its f32 source is generated a bounded chunk at a time.
      const int64_t rows_per_chunk =
          std::max<int64_t>(1, static_cast<int64_t>(kChunkFloats / static_cast<uint64_t>(row_len)));
      q.resize(static_cast<size_t>(n_rows) * row_bytes);
      for (int64_t r0 = 0; r0 < n_rows; r0 += rows_per_chunk) {
        const int64_t r1 = std::min(n_rows, r0 + rows_per_chunk);
        const int64_t nr = r1 - r0;
        f32.resize(static_cast<size_t>(nr * row_len));
        uint8_t* qchunk = q.data() + static_cast<size_t>(r0) * row_bytes;
        pool.parallel_for_dynamic(static_cast<size_t>(nr), 16, [&](size_t a, size_t b, int) {
          const int64_t ra = r0 + static_cast<int64_t>(a), rb = r0 + static_cast<int64_t>(b);
          float* src = f32.data() + a * row_len;
          fill_rows(spec, opt.seed, i, ra, rb, row_len, src);
          for (size_t r = a; r < b; ++r)
            tr.quantize(f32.data() + r * row_len, qchunk + r * row_bytes, row_len);
        });
      }
      SUSTAIN_TRY(w.write_tensor_data(q.data(), q.size()));
    }
    done_bytes += w.tensor_bytes(i);
    if (opt.progress) opt.progress(i + 1, table.size(), done_bytes, total_bytes);
  }
  SUSTAIN_TRY(w.finish());
  std::error_code ec;
  res.file_bytes = std::filesystem::file_size(out_path, ec);
  return res;
}

}  // namespace sustain::tools
