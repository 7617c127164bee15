// `sustain quantize IN OUT --type T`: convert a model's weights, report the
// error each tensor took on.
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/thread_pool.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "tools/quantize.h"

namespace sustain::cli {
namespace {

struct QuantizeArgs {
  std::string in, out, type;
  int threads = 0;
  bool json = false;
};

int run_quantize(const QuantizeArgs& a) {
  auto ft = tools::file_type_from_name(a.type);
  if (!ft)
    return fail(fmt::format("unknown --type '{}' (known: {})", a.type, tools::file_type_names()));
  ThreadPool pool(a.threads > 0 ? a.threads : default_threads());
  Progress prog(fmt::format("quantize {}", tools::file_type_info(*ft).name));
  tools::QuantizeOptions opt;
  opt.type = *ft;
  opt.progress = [&](size_t i, size_t n, const tools::TensorQuantStats& s) {
    prog.update(static_cast<double>(i + 1) / n, s.name);
  };
  auto r = tools::quantize_file(a.in, a.out, opt, pool);
  if (!r) return fail(r.status().message());
  prog.finish(fmt::format("{} -> {}", a.in, a.out));

  if (a.json) {
    nlohmann::ordered_json j;
    j["input"] = a.in;
    j["output"] = a.out;
    j["type"] = tools::file_type_info(*ft).name;
    j["src_bytes"] = r->src_bytes;
    j["dst_bytes"] = r->dst_bytes;
    j["total_rmse"] = r->total_rmse;
    j["total_rel_rmse"] = r->total_rel_rmse;
    j["seconds"] = r->seconds;
    for (const auto& t : r->tensors)
      j["tensors"].push_back({{"name", t.name},
                              {"shape", t.shape},
                              {"src", qtype_name(t.src)},
                              {"dst", qtype_name(t.dst)},
                              {"dst_bytes", t.dst_bytes},
                              {"rmse", t.rmse},
                              {"rel_rmse", t.rel_rmse},
                              {"copied", t.copied}});
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%-36s %-18s %-6s   %-6s %12s %12s\n", "tensor", "shape", "from", "to", "rmse",
              "rel rmse");
  for (const auto& t : r->tensors) {
    const std::string shape = fmt::format("[{}]", fmt::join(t.shape, ", "));
    if (t.copied) {
      std::printf("%-36s %-18s %-6s = %-6s %12s %12s\n", t.name.c_str(), shape.c_str(),
                  std::string(qtype_name(t.src)).c_str(), std::string(qtype_name(t.dst)).c_str(),
                  "copied", "");
    } else {
      std::printf("%-36s %-18s %-6s > %-6s %12.3e %11.3f%%\n", t.name.c_str(), shape.c_str(),
                  std::string(qtype_name(t.src)).c_str(), std::string(qtype_name(t.dst)).c_str(),
                  t.rmse, 100.0 * t.rel_rmse);
    }
  }
  std::printf("total: %.2f MiB -> %.2f MiB, rmse %.3e (%.3f%% of rms), %.1fs\n",
              r->src_bytes / 1048576.0, r->dst_bytes / 1048576.0, r->total_rmse,
              100.0 * r->total_rel_rmse, r->seconds);
  return 0;
}

}  // namespace

Runner add_quantize(CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  auto* sub = app.add_subcommand(
      "quantize", "Convert a GGUF model's weights (llama.cpp's per-tensor mix) and report the error");
  sub->add_option("input", a->in, "input GGUF (F32, F16, BF16 or quantized)")->required();
  sub->add_option("output", a->out, "output GGUF")->required();
  sub->add_option("--type", a->type, "target: " + tools::file_type_names())->required();
  sub->add_option("-t,--threads", a->threads, "worker threads (default: all cores)")
      ->check(CLI::Range(1, 1024));
  sub->add_flag("--json", a->json, "print the per-tensor report as JSON");
  return [a] { return run_quantize(*a); };
}

}  // namespace sustain::cli
