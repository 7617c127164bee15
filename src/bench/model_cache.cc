#include "bench/model_cache.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "base/thread_pool.h"
#include "tools/presets.h"
#include "tools/quant_mix.h"
#include "tools/synth.h"

namespace sustain::bench {
namespace {

namespace fs = std::filesystem;

fs::path cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "sustain";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "sustain";
  return fs::path(".cache") / "sustain";
}

}  // namespace

Expected<std::string> cached_synth_model(const std::string& preset, const std::string& type,
                                         int threads, Observer& obs) {
  const tools::Preset* p = tools::find_preset(preset);
  if (!p)
    return error(Code::kInvalidArgument, "unknown --preset '{}' (known: {})", preset,
                 tools::preset_names());
  const auto ft = tools::file_type_from_name(type);
  if (!ft)
    return error(Code::kInvalidArgument, "unknown --type '{}' (known: {})", type,
                 tools::file_type_names());
  const fs::path dir = cache_dir();
  const fs::path path = dir / fmt::format("{}-{}.gguf", p->name, tools::file_type_info(*ft).name);
  if (fs::exists(path)) {
    obs.message(fmt::format("bench: model {} (cached)", path.string()));
    return path.string();
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return error(Code::kIo, "cannot create the model cache directory '{}': {}", dir.string(),
                 ec.message());
  obs.message(fmt::format(
      "bench: making the synthetic model {} {} once (random weights, the real shapes); it is "
      "cached at {}",
      p->name, tools::file_type_info(*ft).name, path.string()));
  const fs::path tmp = path.string() + fmt::format(".tmp{}", ::getpid());
  ThreadPool pool(threads);
  const auto bar = obs.bar("bench synth");
  tools::SynthOptions opt;
  opt.type = *ft;
  opt.progress = [&](size_t i, size_t n, uint64_t done, uint64_t total) {
    bar->update(total ? static_cast<double>(done) / total : 1.0, fmt::format("tensor {}/{}", i, n));
  };
  auto r = tools::synth_model(*p, tmp.string(), opt, pool);
  if (!r) {
    fs::remove(tmp, ec);
    return r.status();
  }
  bar->finish(fmt::format("{:.1f} MiB", r->file_bytes / 1048576.0));
  fs::rename(tmp, path, ec);
  if (ec)
    return error(Code::kIo, "cannot move '{}' to '{}': {}", tmp.string(), path.string(),
                 ec.message());
  return path.string();
}

}  // namespace sustain::bench
