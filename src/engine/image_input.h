// Image input for the engine's users (the server): a vision projector
// (mmproj) with a thread pool of its own, turning image bytes into the
// embedding rows a MediaPrompt places. Encodes one image at a time; safe to
// call from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/media_prompt.h"

namespace sustain::vision {
class Projector;
}

namespace sustain::engine {

class ImageInput {
 public:
  // Opens the projector; an unknown projector type is refused here.
  static Expected<std::shared_ptr<ImageInput>> open(const std::string& mmproj_path, int threads);
  ~ImageInput();

  const MediaStyle& style() const { return style_; }
  int64_t tokens_per_image() const;
  int64_t out_dim() const;  // must equal the text model's n_embd
  uint64_t max_file_bytes() const;

  // Decodes PNG/JPEG bytes and encodes them: [tokens_per_image][out_dim].
  // Errors are the decoder's, naming `what`.
  Expected<std::vector<float>> encode(const uint8_t* data, size_t size, const std::string& what);

 private:
  ImageInput() = default;
  std::shared_ptr<const vision::Projector> proj_;
  MediaStyle style_;
  int threads_ = 1;
  std::mutex mu_;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace sustain::engine
