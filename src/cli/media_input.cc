#include "cli/media_input.h"

#include <algorithm>
#include <chrono>

#include "vision/image.h"
#include "vision/projector.h"

namespace sustain::cli {

void add_media_flags(CLI::App* sub, MediaArgs& a) {
  sub->add_option("--mmproj", a.mmproj, "vision projector GGUF (llama.cpp's mmproj file)");
  sub->add_option("--image", a.images,
                  "PNG or JPEG file for the prompt's next <__media__> marker (repeatable; without "
                  "markers the images go before the text); needs --mmproj");
}

Expected<engine::MediaPrompt> media_prompt(Session& s, const ModelArgs& m, const MediaArgs& a,
                                           int64_t reserve_after, MediaStats* stats) {
  if (a.mmproj.empty())
    return error(Code::kInvalidArgument, "--image needs --mmproj (the vision projector)");
  SUSTAIN_ASSIGN_OR_RETURN(auto proj, vision::Projector::open(a.mmproj));
  const int64_t n_embd = s.model->config().n_embd;
  if (proj.out_dim() != n_embd)
    return error(Code::kInvalidArgument,
                 "{}: the projector makes embeddings of width {}, but the model's width is {}",
                 a.mmproj, proj.out_dim(), n_embd);
  SUSTAIN_ASSIGN_OR_RETURN(auto style, engine::media_style(proj.hparams().projector_type));
  SUSTAIN_ASSIGN_OR_RETURN(std::string text, prompt_text(m));
  std::vector<std::vector<float>> embd;
  // A session without a cache (run --spec: the engine has its own) has no pool.
  std::unique_ptr<ThreadPool> own;
  if (!s.pool)
    own = std::make_unique<ThreadPool>(m.threads > 0 ? m.threads : ThreadPool::hardware_threads());
  ThreadPool& pool = s.pool ? *s.pool : *own;
  for (const std::string& path : a.images) {
    SUSTAIN_ASSIGN_OR_RETURN(auto img, vision::load_image(path));
    const auto t0 = std::chrono::steady_clock::now();
    embd.push_back(proj.encode(img, pool));
    if (stats)
      stats->encode_ms.push_back(std::chrono::duration<double, std::milli>(
                                     std::chrono::steady_clock::now() - t0)
                                     .count());
  }
  SUSTAIN_ASSIGN_OR_RETURN(
      auto mp, engine::build_media_prompt(*s.tok, text, !m.no_bos, m.special, embd, n_embd, style));
  if (mp.size() + reserve_after > s.ctx)
    return error(Code::kInvalidArgument,
                 "the prompt is {} positions ({} of them image tokens){}, more than the context "
                 "of {} tokens (raise -c)",
                 mp.size(), static_cast<int64_t>(mp.embd.size()) / n_embd,
                 reserve_after ? fmt::format(" plus {} to generate", reserve_after) : "", s.ctx);
  return mp;
}

Expected<PromptInput> prompt_input(Session& s, const ModelArgs& m, const MediaArgs& a,
                                   int64_t reserve_after, MediaStats* stats) {
  PromptInput p;
  if (a.given()) {
    SUSTAIN_ASSIGN_OR_RETURN(auto mp, media_prompt(s, m, a, reserve_after, stats));
    p.ids = mp.ids;
    p.media = std::move(mp);
  } else {
    SUSTAIN_ASSIGN_OR_RETURN(p.ids, tokenize_prompt(s, m, reserve_after));
  }
  return p;
}

Status feed_prompt(Session& s, kv::PageTable& table, const PromptInput& p, int64_t batch,
                   std::vector<float>* all_logits, std::vector<float>* last_logits) {
  return p.media ? feed_media(s, table, *p.media, batch, all_logits, last_logits)
                 : feed(s, table, p.ids, batch, all_logits, last_logits);
}

Status feed_media(Session& s, kv::PageTable& table, const engine::MediaPrompt& mp, int64_t batch,
                  std::vector<float>* all_logits, std::vector<float>* last_logits) {
  const int64_t n_vocab = s.model->config().n_vocab;
  const int64_t n = mp.size();
  const int64_t chunk = std::min(batch, s.ws.max_tokens);
  if (all_logits) all_logits->assign(static_cast<size_t>(n * n_vocab), 0.0f);
  if (last_logits) last_logits->resize(static_cast<size_t>(n_vocab));
  const int64_t pos0 = table.n_tokens;
  for (int64_t b0 = 0; b0 < n;) {
    SUSTAIN_ASSIGN_OR_RETURN(const int64_t b1, mp.chunk_end(b0, chunk));
    SUSTAIN_TRY(s.cache->reserve(table, b1 - b0));
    Batch& b = s.batch;
    b.seqs.assign(1, &table);
    b.tokens.clear();
    for (int64_t i = b0; i < b1; ++i)
      b.tokens.push_back(mp.token(i, 0, pos0, all_logits != nullptr || i == n - 1));
    float* out = nullptr;
    if (all_logits)
      out = all_logits->data() + b0 * n_vocab;
    else if (b1 == n)
      out = last_logits->data();
    SUSTAIN_TRY(s.model->forward(b, *s.cache, s.ws, *s.pool, out));
    b0 = b1;
  }
  return Status::ok();
}

}  // namespace sustain::cli
