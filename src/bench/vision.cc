#include "bench/vision.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>

#include "bench/workloads.h"
#include "engine/image_input.h"

namespace sustain::bench {
namespace {

using json = nlohmann::json;

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Time to the first token of a one-token request (the prompt's prefill).
Expected<double> ttft_ms(engine::Engine& e, engine::Request r) {
  r.max_tokens = 1;
  r.ignore_eos = true;
  r.sampling = bench_sampler();
  SUSTAIN_ASSIGN_OR_RETURN(engine::Stream s, e.submit(std::move(r)));
  const engine::Event ev = s.wait();
  if (ev.finish == engine::Finish::kError) return ev.error;
  return std::chrono::duration<double, std::milli>(ev.t_first_token - ev.t_submit).count();
}

}  // namespace

Expected<json> run_vision(engine::Engine& e, const VisionOptions& o) {
  SUSTAIN_ASSIGN_OR_RETURN(auto in, engine::ImageInput::open(o.mmproj, o.threads));
  const int64_t n_embd = e.model().config().n_embd;
  if (in->out_dim() != n_embd)
    return error(Code::kInvalidArgument,
                 "--mmproj {}: the projector makes embeddings of width {}, but the model's width "
                 "is {}",
                 o.mmproj, in->out_dim(), n_embd);
  json out = {{"mmproj", o.mmproj},
              {"tokens_per_image", in->tokens_per_image()},
              {"reps", o.reps},
              {"threads", o.threads},
              {"images", json::array()}};
  constexpr int64_t kPrefix = 8;  // random text before the image: no two prompts share a page
  for (size_t k = 0; k < o.images.size(); ++k) {
    const std::string& path = o.images[k];
    std::ifstream f(path, std::ios::binary);
    if (!f) return error(Code::kIo, "--image {}: cannot open", path);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)),
                                     std::istreambuf_iterator<char>());
    std::vector<double> enc;
    std::vector<float> embd;
    for (int r = 0; r < o.reps + 1; ++r) {  // the first is a warm-up
      const auto t0 = std::chrono::steady_clock::now();
      SUSTAIN_ASSIGN_OR_RETURN(embd, in->encode(bytes.data(), bytes.size(), path));
      if (r > 0) enc.push_back(ms_since(t0));
    }
    SUSTAIN_ASSIGN_OR_RETURN(auto base, engine::build_media_prompt(e.tokenizer(), "", true, false,
                                                                   {embd}, n_embd, in->style()));
    std::vector<double> img_ms, text_ms;
    for (int r = 0; r < o.reps + 1; ++r) {
      const uint64_t seed = o.seed + 1000 * (k + 1) + static_cast<uint64_t>(r);
      // [BOS] random text, then the image as laid out.
      std::vector<int32_t> rnd = random_prompt(e, kPrefix + 1, seed);
      const bool bos = !base.ids.empty() && base.ids[0] == e.tokenizer().bos() &&
                       e.tokenizer().add_bos();
      auto mp = std::make_shared<engine::MediaPrompt>(base);
      mp->ids.assign(rnd.begin(), rnd.end());
      if (!bos) mp->ids.erase(mp->ids.begin());
      const int64_t shift = static_cast<int64_t>(mp->ids.size()) - (bos ? 1 : 0);
      mp->ids.insert(mp->ids.end(), base.ids.begin() + (bos ? 1 : 0), base.ids.end());
      for (auto& im : mp->images) im.begin += shift, im.end += shift;
      engine::Request ri;
      ri.prompt = mp->ids;
      ri.media = mp;
      SUSTAIN_ASSIGN_OR_RETURN(const double ti, ttft_ms(e, std::move(ri)));
      engine::Request rt;
      rt.prompt = random_prompt(e, mp->size(), seed + 500000);
      SUSTAIN_ASSIGN_OR_RETURN(const double tt, ttft_ms(e, std::move(rt)));
      if (r > 0) img_ms.push_back(ti), text_ms.push_back(tt);
      if (r == o.reps) out["positions"] = mp->size();
    }
    out["images"].push_back({{"file", path},
                             {"encode_ms", enc},
                             {"encode_ms_p50", median(enc)},
                             {"prefill_image_ms", img_ms},
                             {"prefill_image_ms_p50", median(img_ms)},
                             {"prefill_text_ms", text_ms},
                             {"prefill_text_ms_p50", median(text_ms)}});
  }
  return out;
}

}  // namespace sustain::bench
