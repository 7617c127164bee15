// Feeds token ids through a Model with its own KV cache, workspace and thread
// pool: what every eval needs (the KL baseline and test side, each needle
// case). One runner holds one sequence at a time; reset() starts a new one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/model.h"
#include "tensor/qtype.h"

namespace sustain::eval {

struct RunnerOptions {
  std::string model;             // GGUF path
  std::string cache_k = "f16";   // KV formats, spelled like -ctk / -ctv
  std::string cache_v = "f16";
  int64_t ctx = 4096;            // KV capacity in tokens
  int threads = 1;
  int64_t batch = 512;           // tokens per forward call (and workspace size)
  bool kv_tiled = true;          // tiled page layout for the block formats (kv/tiled.h)
};

// "f16", "q4_0", ... (llama.cpp's -ctk spellings; "fp8" is E4M3). Errors name `flag`.
Expected<QType> parse_kv_type(const std::string& name, const char* flag);
// The names parse_kv_type accepts, comma-separated.
const char* kv_type_names();

class ModelRunner {
 public:
  static Expected<std::unique_ptr<ModelRunner>> open(const RunnerOptions& opt);

  const Model& model() const { return *model_; }
  int64_t n_vocab() const { return model_->config().n_vocab; }
  int64_t ctx() const { return opt_.ctx; }
  int64_t n_tokens() const { return table_.n_tokens; }
  const RunnerOptions& options() const { return opt_; }

  // Drops the current sequence (its pages go back to the pool).
  void reset();

  // Appends `n` tokens to the sequence, opt_.batch per forward call. With
  // `all_logits`, out holds n × n_vocab logits (row i after ids[i]); else
  // only the last token's n_vocab. Ids outside the vocabulary and overflowing
  // the context are errors that name the value.
  Status feed(const int32_t* ids, int64_t n, bool all_logits, std::vector<float>* out);

 private:
  ModelRunner() = default;
  RunnerOptions opt_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<kv::KvCache> cache_;
  std::unique_ptr<ThreadPool> pool_;
  Workspace ws_;
  Batch batch_;
  kv::PageTable table_;
};

}  // namespace sustain::eval
