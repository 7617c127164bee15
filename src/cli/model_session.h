// What the model-running commands (run, logits, tokenize) share: the common
// flags (llama.cpp's names where they mean the same thing) and one loaded
// model with its tokenizer, KV cache, workspace and thread pool.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "base/thread_pool.h"
#include "cli/ranks.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace sustain::cli {

struct ModelArgs {
  std::string model;
  std::string prompt;
  std::string prompt_file;
  int64_t ctx = 4096;
  int threads = 0;
  int64_t batch = 512;   // logical batch: prompt tokens per forward call
  int64_t ubatch = 512;  // physical batch: tokens computed at once (workspace size)
  std::string cache_type_k = "f16", cache_type_v = "f16";
  std::string kv_budget;  // --kv-budget: KV pool size in bytes ("2G", "1.5GiB", ...)
  bool no_bos = false;
  bool special = false;
  // Weights repacked at load (model/repack.h): on where add_model_flags
  // adds the cache flags (the commands that compute), off by --no-repack;
  // repack_asked: --repack given.
  bool repack = false;
  bool repack_asked = false;
};

// --repack / --no-repack on `sub`: `repack` becomes true by default,
// --no-repack sets it false, --repack sets `asked` (and excludes --no-repack).
void add_repack_flags(CLI::App* sub, bool& repack, bool& asked);
// The note a command prints on stderr once a model loaded with repacking on:
// what was repacked, or, where `asked`, why nothing was.
void note_repack(const Model& m, bool asked);

// -m, -c, -t, -b; with_prompt adds -p / -f / --no-bos / --special.
void add_model_flags(CLI::App* sub, ModelArgs& a, bool with_prompt, bool with_cache);

// A --kv-layout style flag: the page layout of the block KV formats, tiled
// (the default) or rows; `side` prefixes the help ("test ", "baseline ").
void add_kv_layout_flag(CLI::App* sub, std::string& layout, const std::string& name,
                        const std::string& side = "");
inline bool kv_tiled(const std::string& layout) { return layout == "tiled"; }

// --kv-budget in bytes (0 when not given); errors name the flag and value.
Expected<int64_t> kv_budget_bytes(const ModelArgs& a);

// A KV cache format by its llama.cpp name (f16, q8_0, ..., fp8); `flag` names
// the option in the error.
Expected<QType> kv_type(const std::string& name, const char* flag);

struct Session {
  std::unique_ptr<Model> model;
  std::optional<tokenizer::Tokenizer> tok;
  std::optional<kv::KvCache> cache;
  std::unique_ptr<ThreadPool> pool;
  Workspace ws;
  Batch batch;  // reused by feed(): no allocation per generated token
  int64_t ctx = 0;
  // With --split: the job's ranks; the cache holds only this rank's blocks
  // and feed() runs rank 0's steps on every rank.
  Ranks* ranks = nullptr;
  const PipelineStage* stage() const { return ranks && ranks->split() ? &ranks->stage : nullptr; }
};

// Loads the model and tokenizer; with `with_cache`, also the KV cache of
// args.ctx tokens (of this rank's blocks, with `ranks` split), the thread
// pool and the workspace.
Expected<std::unique_ptr<Session>> open_session(const ModelArgs& a, bool with_cache,
                                                Ranks* ranks = nullptr);

// The prompt text from -p or -f (exactly one), validated as UTF-8 by the tokenizer.
Expected<std::string> prompt_text(const ModelArgs& a);

// Tokenizes the prompt (BOS unless --no-bos; special-token text parsed only
// with --special) and checks it is non-empty and fits the context.
Expected<std::vector<int32_t>> tokenize_prompt(const Session& s, const ModelArgs& a,
                                               int64_t reserve_after);

// Runs `tokens` through the model at positions [table.n_tokens, ...),
// `batch` tokens per forward call. Logits of every token go to `all_logits`
// (if given), else only the last token's go to `last_logits`.
// Over several ranks, rank 0 calls this: the step goes to every rank first
// and the logits come back from the last.
Status feed(Session& s, kv::PageTable& table, const std::vector<int32_t>& tokens, int64_t batch,
            std::vector<float>* all_logits, std::vector<float>* last_logits);

// A rank other than 0: runs every step rank 0 broadcasts, on its own stage
// and its own KV of the one sequence, until rank 0 says stop.
Status follow_steps(Session& s);

}  // namespace sustain::cli
