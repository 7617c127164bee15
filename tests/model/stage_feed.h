// Feeding one sequence through a model, a pipeline stage or a tensor shard
// (tests of model/stage.h and model/shard.h).
#pragma once

#include <vector>

#include "model/model.h"

namespace sustain::test {

// Feeds `ids` at the table's next positions, all logits wanted (and with
// `hidden_all`, every position's normed final hidden state).
inline Status feed(const Model& m, kv::KvCache& cache, kv::PageTable& t, Workspace& ws,
                   ThreadPool& pool, const std::vector<int32_t>& ids, std::vector<float>* logits,
                   const PipelineStage* stage, std::vector<float>* hidden_all = nullptr) {
  const int64_t start = t.n_tokens;
  SUSTAIN_TRY(cache.reserve(t, static_cast<int64_t>(ids.size())));
  Batch b;
  b.seqs.push_back(&t);
  for (size_t i = 0; i < ids.size(); ++i)
    b.tokens.push_back({ids[i], 0, start + static_cast<int64_t>(i), true});
  logits->assign(ids.size() * m.config().n_vocab, 0.0f);
  if (hidden_all) hidden_all->assign(ids.size() * m.config().n_embd, 0.0f);
  return m.forward(b, cache, ws, pool, logits->data(), nullptr,
                   hidden_all ? hidden_all->data() : nullptr, stage);
}

}  // namespace sustain::test
