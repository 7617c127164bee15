#include "eval/runner.h"

#include <algorithm>
#include <utility>

#include "tensor/kv_names.h"

namespace sustain::eval {

const char* kv_type_names() { return kv_cache_type_names(); }

Expected<QType> parse_kv_type(const std::string& name, const char* flag) {
  return kv_cache_type(name, flag);
}

Expected<std::unique_ptr<ModelRunner>> ModelRunner::open(const RunnerOptions& opt) {
  if (opt.ctx < 1) return error(Code::kInvalidArgument, "context size {} must be positive", opt.ctx);
  if (opt.batch < 1) return error(Code::kInvalidArgument, "batch size {} must be positive", opt.batch);
  SUSTAIN_ASSIGN_OR_RETURN(QType kt, parse_kv_type(opt.cache_k, "--cache-type-k"));
  SUSTAIN_ASSIGN_OR_RETURN(QType vt, parse_kv_type(opt.cache_v, "--cache-type-v"));
  std::unique_ptr<ModelRunner> r(new ModelRunner());
  r->opt_ = opt;
  SUSTAIN_ASSIGN_OR_RETURN(r->model_, Model::load(opt.model));
  kv::KvGeometry g = r->model_->kv_geometry(kt, vt);
  g.tiled = opt.kv_tiled;
  g.window_step = static_cast<int32_t>(std::min<int64_t>(opt.ctx, opt.batch));
  auto cache = kv::KvCache::create(g, opt.ctx);
  if (!cache)
    return cache.status().with_context(fmt::format("{} with K {} / V {}", opt.model, opt.cache_k, opt.cache_v));
  r->cache_ = std::make_unique<kv::KvCache>(std::move(*cache));
  r->pool_ = std::make_unique<ThreadPool>(std::max(1, opt.threads));
  r->ws_ = r->model_->make_workspace(std::min(opt.batch, opt.ctx), r->pool_->size());
  return r;
}

void ModelRunner::reset() { cache_->release(table_); }

Status ModelRunner::feed(const int32_t* ids, int64_t n, bool all_logits, std::vector<float>* out) {
  const int64_t nv = n_vocab();
  if (n <= 0) return error(Code::kInvalidArgument, "no tokens to feed");
  if (table_.n_tokens + n > opt_.ctx)
    return error(Code::kInvalidArgument,
                 "{} tokens after {} already in the sequence exceed the context of {} (raise -c)", n,
                 table_.n_tokens, opt_.ctx);
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= nv)
      return error(Code::kInvalidArgument, "token id {} at index {} is outside the vocabulary [0, {})",
                   ids[i], i, nv);
  out->assign(static_cast<size_t>((all_logits ? n : 1) * nv), 0.0f);
  for (int64_t b0 = 0; b0 < n; b0 += opt_.batch) {
    const int64_t b1 = std::min(n, b0 + opt_.batch);
    const int64_t start = table_.n_tokens;
    SUSTAIN_TRY(cache_->reserve(table_, b1 - b0));
    batch_.seqs.assign(1, &table_);
    batch_.tokens.clear();
    for (int64_t i = b0; i < b1; ++i)
      batch_.tokens.push_back({ids[i], 0, start + (i - b0), all_logits || i == n - 1});
    float* dst = nullptr;
    if (all_logits) {
      dst = out->data() + b0 * nv;
    } else if (b1 == n) {
      dst = out->data();
    }
    SUSTAIN_TRY(model_->forward(batch_, *cache_, ws_, *pool_, dst));
  }
  return Status::ok();
}

}  // namespace sustain::eval
