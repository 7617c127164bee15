// A prompt with images in it: text token ids and image embeddings in one
// position order, as llama.cpp's multimodal library lays them out.
//
// The prompt text marks each image's place with the marker `<__media__>`
// (llama.cpp's); without any marker, every image goes before the text. Each
// image becomes the projector type's opening token, its embedding rows (one
// position each), and its closing token (Gemma 3: `<start_of_image>` …
// `<end_of_image>`). Each text part is tokenized on its own, without BOS;
// BOS (when the vocabulary adds one) opens the prompt.
//
// The engine places the embeddings (BatchToken::embd) and, for projector
// types whose image tokens attend to one another both ways (Gemma 3), makes
// every image position see its whole image (BatchToken::n_visible).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/batch.h"
#include "tokenizer/tokenizer.h"

namespace sustain::engine {

inline constexpr std::string_view kMediaMarker = "<__media__>";

// How a projector type's images sit in the token stream.
struct MediaStyle {
  std::string begin;        // text of the token before an image ("" for none)
  std::string end;          // text of the token after it
  bool non_causal = false;  // image positions see their whole image
};

// The style of a projector type (clip.projector_type), or an error naming a
// type this build does not place.
Expected<MediaStyle> media_style(std::string_view projector_type);

struct MediaPrompt {
  struct Image {
    int64_t begin = 0;  // first position
    int64_t end = 0;    // one past the last
    int64_t row = 0;    // first row of `embd`
  };
  // One per position. An image position holds a negative key made from a
  // hash of the image's rows and the position's index in the image: never a
  // token, and what prefix reuse matches on (the same image at the same
  // place reuses its cached pages; another image never does).
  std::vector<int32_t> ids;
  std::vector<float> embd;   // the images' rows, [n_rows][n_embd], in position order
  std::vector<Image> images;
  int64_t n_embd = 0;
  bool non_causal = false;

  int64_t size() const { return static_cast<int64_t>(ids.size()); }
  // The image holding position p, or nullptr for a text position.
  const Image* image_at(int64_t p) const;
  // The end of a forward chunk that starts at position b0 and holds at most
  // max_tokens positions without cutting an image in two (an image is
  // computed in one piece); an error when an image alone is larger.
  Expected<int64_t> chunk_end(int64_t b0, int64_t max_tokens) const;
  static bool is_image_key(int32_t id) { return id < 0; }
  // The batch token of position p of this prompt, placed at position
  // pos0 + p of sequence `seq`.
  BatchToken token(int64_t p, int32_t seq, int64_t pos0, bool logits) const;
  // One entry per position: its image row, or nullptr for a text position
  // (what a proposer that embeds positions itself, mtp, needs).
  std::vector<const float*> position_rows() const;
};

// Lays out `text` with `images` (each [rows][n_embd], in marker order).
// `what` names the input in errors. Errors: more markers than images, or
// images and markers that do not pair up, a row count that is not a whole
// number of n_embd rows, an empty prompt.
Expected<MediaPrompt> build_media_prompt(const tokenizer::Tokenizer& tok, std::string_view text,
                                         bool add_bos, bool parse_special,
                                         const std::vector<std::vector<float>>& images,
                                         int64_t n_embd, const MediaStyle& style);

}  // namespace sustain::engine
