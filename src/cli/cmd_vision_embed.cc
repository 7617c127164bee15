// `sustain vision-embed --mmproj P --image FILE -o OUT.f32`: the image
// embeddings a projector makes of an image (n_tokens × width float32,
// little-endian) plus OUT.f32.json with the shapes, the letterbox and the
// encode time, for comparisons with other engines.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/thread_pool.h"
#include "cli/commands.h"
#include "vision/preprocess.h"
#include "vision/projector.h"

namespace sustain::cli {
namespace {

struct VisionEmbedArgs {
  std::string mmproj, image, out;
  int threads = 0;
  int repeat = 1;
};

int run_vision_embed(const VisionEmbedArgs& a) {
  auto p = vision::Projector::open(a.mmproj);
  if (!p) return fail(p.status().message());
  auto img = vision::load_image(a.image);
  if (!img) return fail(img.status().message());
  ThreadPool pool(a.threads > 0 ? a.threads : default_threads());
  std::vector<float> embd;
  std::vector<double> ms;
  for (int r = 0; r < a.repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    embd = p->encode(*img, pool);
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  {
    std::ofstream f(a.out, std::ios::binary);
    if (!f) return fail(fmt::format("cannot write '{}'", a.out));
    f.write(reinterpret_cast<const char*>(embd.data()),
            static_cast<std::streamsize>(embd.size() * sizeof(float)));
    if (!f) return fail(fmt::format("writing '{}' failed", a.out));
  }
  const auto& hp = p->hparams();
  const auto g =
      vision::letterbox_geometry(img->width, img->height, static_cast<int>(hp.image_size));
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  nlohmann::ordered_json j;
  j["mmproj"] = a.mmproj;
  j["projector_type"] = hp.projector_type;
  j["image"] = a.image;
  j["image_size"] = {img->width, img->height};
  j["preprocessing"] = {{"target", hp.image_size},
                        {"resized", {g.resized_w, g.resized_h}},
                        {"pad_offset_xy", {g.offset_x, g.offset_y}}};
  j["n_image_tokens"] = p->n_tokens();
  j["n_embd"] = p->out_dim();
  j["embd_file"] = a.out;
  j["layout"] = "float32 little-endian [n_image_tokens][n_embd]; row t = image token t";
  j["threads"] = pool.size();
  j["encode_ms"] = ms;
  j["encode_ms_p50"] = sorted[sorted.size() / 2];
  const std::string side = a.out + ".json";
  std::ofstream js(side);
  js << j.dump(1) << "\n";
  if (!js) return fail(fmt::format("cannot write '{}'", side));
  std::fprintf(stderr,
               "wrote %lld x %lld image embeddings to %s (+ %s); encode %.2f ms (P50 of %d)\n",
               static_cast<long long>(p->n_tokens()), static_cast<long long>(p->out_dim()),
               a.out.c_str(), side.c_str(), sorted[sorted.size() / 2], a.repeat);
  return 0;
}

}  // namespace

Runner add_vision_embed(CLI::App& app) {
  auto a = std::make_shared<VisionEmbedArgs>();
  auto* sub = app.add_subcommand(
      "vision-embed", "Write the image embeddings a vision projector (mmproj) makes of an image");
  sub->add_option("--mmproj", a->mmproj, "vision projector GGUF")->required();
  sub->add_option("--image", a->image, "PNG or JPEG file")->required();
  sub->add_option("-o,--output", a->out, "output .f32 file (a .json sidecar is written beside it)")
      ->required();
  sub->add_option("-t,--threads", a->threads, "worker threads (default: every core)")
      ->check(CLI::Range(1, ThreadPool::kMaxThreads));
  sub->add_option("--repeat", a->repeat, "encode this many times and report the median time")
      ->check(CLI::Range(1, 10000));
  return [a] { return run_vision_embed(*a); };
}

}  // namespace sustain::cli
