#include "cli/model_session.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "plan/parse.h"
#include "tensor/kv_names.h"

namespace sustain::cli {

void add_kv_layout_flag(CLI::App* sub, std::string& layout, const std::string& name,
                        const std::string& side) {
  sub->add_option(name, layout,
                  side + "page layout of the q8_0/q4_0/q4_1/q5_0/q5_1/fp8 KV formats: tiled (16 "
                         "keys per vector) or rows (one token after another)")
      ->capture_default_str()
      ->check(CLI::IsMember({"tiled", "rows"}));
}

void add_repack_flags(CLI::App* sub, bool& repack, bool& asked) {
  repack = true;
  CLI::Option* on = sub->add_flag(
      "--repack", asked,
      "repack Q4_0, Q5_0, Q8_0, Q4_K and Q6_K weights at load into 16-row tiles that the "
      "AVX-512 VNNI kernels read in place (the default; this flag only makes a CPU without "
      "VNNI say why nothing was repacked): decode and small batches faster, prefill as fast, "
      "a slower load (docs/kernels.md)");
  CLI::Option* off = sub->add_flag_callback(
      "--no-repack", [&repack] { repack = false; },
      "keep the weights in the file's rows: a faster load, slower decode; results are not bit "
      "for bit those of repacked weights (float sums in another order)");
  on->excludes(off);
}

void note_repack(const Model& m, bool asked) {
  if (!weight_repack()) return;
  const RepackReport& r = m.repack_report();
  if (r.matrices == 0) {
    if (asked) std::fprintf(stderr, "sustain: --repack: nothing repacked: %s\n", r.skipped.c_str());
    return;
  }
  std::fprintf(stderr,
               "sustain: repacked %lld matrices (%.1f MiB) into 16-row tiles; %lld left in rows "
               "(formats without tiles; --no-repack keeps all in rows)\n",
               static_cast<long long>(r.matrices), static_cast<double>(r.bytes) / (1 << 20),
               static_cast<long long>(r.kept));
}

void add_model_flags(CLI::App* sub, ModelArgs& a, bool with_prompt, bool with_cache) {
  sub->add_option("-m,--model", a.model, "GGUF model file")->required();
  if (with_prompt) {
    sub->add_option("-p,--prompt", a.prompt, "prompt text");
    sub->add_option("-f,--file", a.prompt_file, "read the prompt from a file");
    sub->add_flag("--no-bos", a.no_bos, "add no BOS/EOS tokens");
    sub->add_flag("--special", a.special,
                  "parse special-token text (e.g. <|im_start|>) in the prompt as control tokens");
  }
  if (with_cache) {
    sub->add_option("-c,--ctx-size", a.ctx, "context size in tokens (KV cache capacity)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
    sub->add_option("-t,--threads", a.threads, "worker threads (default: all cores)")
        ->check(CLI::Range(1, 1024));
    sub->add_option("-b,--batch-size", a.batch, "prompt tokens per forward call")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
    sub->add_option("--ubatch-size", a.ubatch,
                    "tokens computed at once inside a forward call (alias -ub); sizes the workspace")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
    sub->add_option("--cache-type-k", a.cache_type_k, "K cache format (alias -ctk): f16, bf16, f32, q8_0, q4_0, q4_1, q5_0, q5_1, fp8")
        ->capture_default_str();
    sub->add_option("--kv-budget", a.kv_budget,
                    "size the KV pool by bytes (e.g. 2G, 1.5GiB, 800MB) instead of -c; an error "
                    "names the largest context that fits");
    sub->add_option("--cache-type-v", a.cache_type_v, "V cache format (alias -ctv): f16, bf16, f32, q8_0, q4_0, q4_1, q5_0, q5_1, fp8")
        ->capture_default_str();
    add_repack_flags(sub, a.repack, a.repack_asked);
  }
}

Expected<QType> kv_type(const std::string& name, const char* flag) {
  return kv_cache_type(name, flag);
}

Expected<int64_t> kv_budget_bytes(const ModelArgs& a) {
  if (a.kv_budget.empty()) return int64_t{0};
  SUSTAIN_ASSIGN_OR_RETURN(uint64_t b, plan::parse_bytes(a.kv_budget, "--kv-budget"));
  if (b == 0 || b > (uint64_t{1} << 50))
    return error(Code::kInvalidArgument, "--kv-budget '{}' must be between 1 byte and 1 PiB",
                 a.kv_budget);
  return static_cast<int64_t>(b);
}

Expected<std::unique_ptr<Session>> open_session(const ModelArgs& a, bool with_cache, Ranks* ranks) {
  auto s = std::make_unique<Session>();
  s->ranks = ranks;
  set_weight_repack(a.repack);
  SUSTAIN_ASSIGN_OR_RETURN(s->model, Model::load(a.model, ranks ? ranks->shard() : nullptr));
  note_repack(*s->model, a.repack_asked);
  SUSTAIN_ASSIGN_OR_RETURN(auto tok, tokenizer::Tokenizer::from_gguf(s->model->file()));
  s->tok.emplace(std::move(tok));
  s->ctx = a.ctx;
  if (!with_cache) return s;
  SUSTAIN_ASSIGN_OR_RETURN(QType kt, kv_type(a.cache_type_k, "--cache-type-k"));
  SUSTAIN_ASSIGN_OR_RETURN(QType vt, kv_type(a.cache_type_v, "--cache-type-v"));
  kv::KvGeometry g = ranks && ranks->split() ? s->model->stage_kv_geometry(ranks->stage, kt, vt)
                                              : s->model->kv_geometry(kt, vt);
  // One sequence, fed in chunks of -b tokens (or a verify block).
  g.window_step = static_cast<int32_t>(std::min<int64_t>(a.ctx, std::max<int64_t>(a.batch, 32)));
  SUSTAIN_ASSIGN_OR_RETURN(int64_t budget, kv_budget_bytes(a));
  if (budget > 0 && g.page_bytes() > 0) {  // a stage of DeltaNet blocks only has no KV
    const int64_t fit = budget / static_cast<int64_t>(g.page_bytes()) * g.page_tokens;
    if (fit < a.ctx)
      return error(Code::kOutOfMemory,
                   "--kv-budget {} ({} bytes) holds {} tokens of KV ({} bytes per token with K {} "
                   "and V {}), fewer than the context of {} tokens, which needs {} bytes; the "
                   "largest context that fits is {} tokens (use -c {})",
                   a.kv_budget, budget, fit, g.bytes_per_token(), a.cache_type_k, a.cache_type_v,
                   a.ctx, g.pool_bytes(a.ctx), fit, fit);
  }
  SUSTAIN_ASSIGN_OR_RETURN(auto cache, kv::KvCache::create(g, a.ctx));
  s->cache.emplace(std::move(cache));
  s->pool = std::make_unique<ThreadPool>(a.threads > 0 ? a.threads : default_threads());
  s->ws = s->model->make_workspace(std::min({a.batch, a.ubatch, a.ctx}), s->pool->size());
  return s;
}

Expected<std::string> prompt_text(const ModelArgs& a) {
  if (!a.prompt.empty() && !a.prompt_file.empty())
    return error(Code::kInvalidArgument, "give the prompt with -p or -f, not both");
  if (!a.prompt_file.empty()) {
    std::ifstream f(a.prompt_file, std::ios::binary);
    if (!f) return error(Code::kIo, "cannot read prompt file '{}'", a.prompt_file);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  return a.prompt;
}

Expected<std::vector<int32_t>> tokenize_prompt(const Session& s, const ModelArgs& a,
                                               int64_t reserve_after) {
  SUSTAIN_ASSIGN_OR_RETURN(std::string text, prompt_text(a));
  // An empty prompt is refused rather than run from BOS alone: it is almost
  // always a mistake (an empty file, a shell variable that was not set).
  if (text.empty())
    return error(Code::kInvalidArgument, "the prompt is empty (give text with -p or -f)");
  SUSTAIN_ASSIGN_OR_RETURN(auto ids, s.tok->encode(text, !a.no_bos, a.special));
  if (ids.empty())
    return error(Code::kInvalidArgument, "the prompt is empty (give text with -p or -f)");
  if (static_cast<int64_t>(ids.size()) + reserve_after > s.ctx)
    return error(Code::kInvalidArgument,
                 "the prompt is {} tokens{}, more than the context of {} tokens (raise -c)",
                 ids.size(), reserve_after ? fmt::format(" plus {} to generate", reserve_after) : "",
                 s.ctx);
  return ids;
}

namespace {

// feed() on this rank alone (its stage, when split).
Status feed_local(Session& s, kv::PageTable& table, const std::vector<int32_t>& tokens,
                  int64_t batch, std::vector<float>* all_logits, std::vector<float>* last_logits) {
  const int64_t n_vocab = s.model->config().n_vocab;
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (all_logits) all_logits->assign(static_cast<size_t>(n * n_vocab), 0.0f);
  if (last_logits) last_logits->resize(static_cast<size_t>(n_vocab));
  for (int64_t b0 = 0; b0 < n; b0 += batch) {
    const int64_t b1 = std::min(n, b0 + batch);
    const int64_t start = table.n_tokens;
    SUSTAIN_TRY(s.cache->reserve(table, b1 - b0));
    Batch& b = s.batch;
    b.seqs.assign(1, &table);
    b.tokens.clear();
    for (int64_t i = b0; i < b1; ++i) {
      const bool want = all_logits != nullptr || i == n - 1;
      b.tokens.push_back({tokens[static_cast<size_t>(i)], 0, start + (i - b0), want});
    }
    float* out = nullptr;
    if (all_logits) {
      out = all_logits->data() + b0 * n_vocab;
    } else if (b1 == n) {
      out = last_logits->data();
    }
    SUSTAIN_TRY(s.model->forward(b, *s.cache, s.ws, *s.pool, out, nullptr, nullptr, s.stage()));
  }
  if (s.ranks) SUSTAIN_TRY(gather_logits(*s.ranks, all_logits ? all_logits : last_logits));
  return Status::ok();
}

}  // namespace

Status feed(Session& s, kv::PageTable& table, const std::vector<int32_t>& tokens, int64_t batch,
            std::vector<float>* all_logits, std::vector<float>* last_logits) {
  if (s.ranks && s.ranks->size() > 1) {
    Step step;
    step.all_logits = all_logits != nullptr;
    step.batch = batch;
    step.tokens = tokens;
    s.ranks->in_step = true;  // a failure from here on leaves followers mid-step
    SUSTAIN_TRY(broadcast_step(*s.ranks, step));
    SUSTAIN_TRY(feed_local(s, table, tokens, batch, all_logits, last_logits));
    s.ranks->in_step = false;
    return Status::ok();
  }
  return feed_local(s, table, tokens, batch, all_logits, last_logits);
}

Status follow_steps(Session& s) {
  kv::PageTable table;
  std::vector<float> logits;
  while (true) {
    Step step;
    SUSTAIN_TRY(broadcast_step(*s.ranks, step));
    if (step.stop) return Status::ok();
    SUSTAIN_TRY(feed_local(s, table, step.tokens, step.batch, step.all_logits ? &logits : nullptr,
                           step.all_logits ? nullptr : &logits));
  }
}

}  // namespace sustain::cli
