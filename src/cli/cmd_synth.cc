// `sustain synth`: a random-weight GGUF in the exact shape of a real model.
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "base/thread_pool.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "model/weights.h"
#include "tools/needle_retriever.h"
#include "tools/presets.h"
#include "tools/synth.h"

namespace sustain::cli {
namespace {

struct SynthArgs {
  std::string preset = "smollm2-135m";
  std::string type = "Q4_K_M";
  std::string out;
  uint64_t seed = 42;
  std::string tokenizer;
  int threads = 0;
  uint32_t layers = 0;
  bool list = false;
  bool all = false;
  std::string variant = "default";  // needle-retriever only; NaN keeps the variant's value
  double pos_gap = std::nan(""), match_gap = std::nan(""), background = std::nan("");
};

// The hand-built needle retriever (tools/needle_retriever.h): constructed, not random.
int run_needle_retriever(const SynthArgs& a) {
  auto opt = tools::retriever_variant(a.variant);
  if (!opt) return fail(opt.status().message());
  opt->seed = a.seed;
  if (!std::isnan(a.pos_gap)) opt->pos_gap = a.pos_gap;
  if (!std::isnan(a.match_gap)) opt->match_gap = a.match_gap;
  if (!std::isnan(a.background)) opt->background = a.background;
  const std::string out =
      a.out.empty() ? fmt::format("{}-{}.gguf", tools::kNeedleRetrieverPreset, a.variant) : a.out;
  auto r = tools::write_needle_retriever(*opt, out);
  if (!r) return fail(r.status().message());
  std::printf("%s  (%.1f MiB; variant %s, layer 0 uses %d RoPE pairs)\n", out.c_str(),
              r->file_bytes / 1048576.0, a.variant.c_str(), r->pos_pairs);
  return 0;
}

int list_presets(bool all) {
  std::printf("%-14s %-6s %9s %7s %6s %6s %9s %7s %8s  %s\n", "preset", "arch", "params", "layers",
              "d", "heads", "kv heads", "vocab", "ctx", "copies");
  for (const auto& p : tools::presets()) {
    if (p.for_tests && !all) continue;
    const auto& c = p.arch;
    const uint64_t n = parameter_count(default_weight_table(c, p.llama3_rope));
    std::printf("%-14s %-6s %8.3fB %7u %6u %6u %9u %7u %8u  %s\n", p.name.c_str(),
                arch_name(c.arch), n / 1e9, c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.n_vocab,
                c.n_ctx_train, p.hf_name.c_str());
  }
  return 0;
}

int run_synth(const SynthArgs& a) {
  if (a.list) return list_presets(a.all);
  if (a.preset == tools::kNeedleRetrieverPreset) return run_needle_retriever(a);
  const tools::Preset* p = tools::find_preset(a.preset);
  if (!p) return fail(fmt::format("unknown preset '{}' (known: {})", a.preset, tools::preset_names()));
  auto ft = tools::file_type_from_name(a.type);
  if (!ft)
    return fail(fmt::format("unknown --type '{}' (known: {})", a.type, tools::file_type_names()));
  const std::string out =
      a.out.empty() ? fmt::format("{}-{}.gguf", p->name, tools::file_type_info(*ft).name) : a.out;
  ThreadPool pool(a.threads > 0 ? a.threads : default_threads());
  Progress prog(fmt::format("synth {} {}", p->name, tools::file_type_info(*ft).name));
  tools::SynthOptions opt;
  opt.type = *ft;
  opt.seed = a.seed;
  opt.tokenizer_json = a.tokenizer;
  opt.n_layer = a.layers;
  opt.progress = [&](size_t i, size_t n, uint64_t done, uint64_t total) {
    prog.update(total ? static_cast<double>(done) / total : 1.0,
                fmt::format("tensor {}/{}", i, n));
  };
  auto r = tools::synth_model(*p, out, opt, pool);
  if (!r) return fail(r.status().message());
  prog.finish(fmt::format("{} tensors, {:.3f}B parameters", r->n_tensors, r->n_params / 1e9));
  std::printf("%s  (%.1f MiB)\n", out.c_str(), r->file_bytes / 1048576.0);
  return 0;
}

}  // namespace

Runner add_synth(CLI::App& app) {
  auto a = std::make_shared<SynthArgs>();
  auto* sub = app.add_subcommand(
      "synth", "Write a random-weight GGUF with a real architecture's exact shapes and tokenizer");
  sub->add_option("--preset", a->preset, "model shape to copy (see --list)")->capture_default_str();
  sub->add_option("--type", a->type, "weight format: " + tools::file_type_names())
      ->capture_default_str();
  sub->add_option("-o,--output", a->out, "output file (default: <preset>-<type>.gguf)");
  sub->add_option("--seed", a->seed, "random seed; the same seed gives the same file")
      ->capture_default_str();
  sub->add_option("--tokenizer", a->tokenizer,
                  "use a Hugging Face tokenizer.json (byte-level BPE) instead of the synthetic "
                  "vocabulary");
  sub->add_option("-t,--threads", a->threads, "worker threads (default: all cores)")
      ->check(CLI::Range(1, 1024));
  sub->add_option("--layers", a->layers,
                  "write only the first N blocks, each in the preset's exact shape (a stand-in "
                  "for a model too large to measure whole; default: all)")
      ->check(CLI::Range(1u, 1024u));
  sub->add_option("--variant", a->variant,
                  "with --preset needle-retriever: default, control, dense or cut<F> (e.g. cut0.1)")
      ->capture_default_str();
  sub->add_option("--pos-gap", a->pos_gap,
                  "needle-retriever: layer 0's logit gap for the previous token (default 30)");
  sub->add_option("--match-gap", a->match_gap,
                  "needle-retriever: layer 1's logit for a key match (default 30)");
  sub->add_option("--background", a->background,
                  "needle-retriever dense: norm of every key's random background, relative to "
                  "its signal (default 0.05)");
  sub->add_flag("--list", a->list, "list the presets with their parameter counts");
  sub->add_flag("--all", a->all, "with --list: include the tiny presets used by tests");
  return [a] { return run_synth(*a); };
}

}  // namespace sustain::cli
