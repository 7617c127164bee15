#include "engine/image_input.h"

#include <algorithm>

#include "vision/image.h"
#include "vision/projector.h"

namespace sustain::engine {

Expected<std::shared_ptr<ImageInput>> ImageInput::open(const std::string& mmproj_path,
                                                        int threads) {
  SUSTAIN_ASSIGN_OR_RETURN(auto p, vision::Projector::open(mmproj_path));
  SUSTAIN_ASSIGN_OR_RETURN(auto style, media_style(p.hparams().projector_type));
  std::shared_ptr<ImageInput> in(new ImageInput());
  in->proj_ = std::make_shared<const vision::Projector>(std::move(p));
  in->style_ = std::move(style);
  in->threads_ = std::max(1, threads);
  return in;
}

ImageInput::~ImageInput() = default;

int64_t ImageInput::tokens_per_image() const { return proj_->n_tokens(); }
int64_t ImageInput::out_dim() const { return proj_->out_dim(); }
uint64_t ImageInput::max_file_bytes() const { return vision::DecodeLimits{}.max_file_bytes; }

Expected<std::vector<float>> ImageInput::encode(const uint8_t* data, size_t size,
                                                const std::string& what) {
  SUSTAIN_ASSIGN_OR_RETURN(auto img, vision::decode_image(data, size, what));
  std::lock_guard<std::mutex> l(mu_);
  if (!pool_) pool_ = std::make_unique<ThreadPool>(threads_);
  return proj_->encode(img, *pool_);
}

}  // namespace sustain::engine
