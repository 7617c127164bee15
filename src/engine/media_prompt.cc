#include "engine/media_prompt.h"

#include <algorithm>

#include "base/fnv1a.h"

namespace sustain::engine {

Expected<MediaStyle> media_style(std::string_view projector_type) {
  // Gemma 3 (llama.cpp mtmd.cpp): <start_of_image>, the image, <end_of_image>;
  // the image batch is decoded with non-causal attention.
  if (projector_type == "gemma3")
    return MediaStyle{"<start_of_image>", "<end_of_image>", /*non_causal=*/true};
  return error(Code::kUnsupported,
               "image input for projector type '{}' is not supported (supported: gemma3)",
               projector_type);
}

const MediaPrompt::Image* MediaPrompt::image_at(int64_t p) const {
  auto it = std::upper_bound(images.begin(), images.end(), p,
                             [](int64_t v, const Image& im) { return v < im.begin; });
  if (it == images.begin()) return nullptr;
  --it;
  return p < it->end ? &*it : nullptr;
}

Expected<int64_t> MediaPrompt::chunk_end(int64_t b0, int64_t max_tokens) const {
  const int64_t n = size();
  int64_t b1 = std::min(n, b0 + max_tokens);
  if (b1 == n) return b1;
  // b1 is the first position of the next chunk: it must not be inside an
  // image that started in this one.
  if (const Image* im = image_at(b1); im != nullptr && im->begin < b1) {
    if (im->begin > b0) return im->begin;
    return error(Code::kInvalidArgument,
                 "an image of {} positions does not fit in a forward chunk of {} tokens (raise "
                 "-b and -ub to at least {})",
                 im->end - im->begin, max_tokens, im->end - im->begin);
  }
  return b1;
}

BatchToken MediaPrompt::token(int64_t p, int32_t seq, int64_t pos0, bool logits) const {
  BatchToken t{ids[static_cast<size_t>(p)], seq, pos0 + p, logits};
  if (const Image* im = image_at(p)) {
    t.embd = embd.data() + (im->row + (p - im->begin)) * n_embd;
    if (non_causal) t.n_visible = pos0 + im->end;
  }
  return t;
}

std::vector<const float*> MediaPrompt::position_rows() const {
  std::vector<const float*> rows(ids.size(), nullptr);
  for (const Image& im : images)
    for (int64_t p = im.begin; p < im.end; ++p)
      rows[static_cast<size_t>(p)] = embd.data() + (im.row + (p - im.begin)) * n_embd;
  return rows;
}

namespace {

Expected<int32_t> single_token(const tokenizer::Tokenizer& tok, const std::string& text) {
  SUSTAIN_ASSIGN_OR_RETURN(auto ids, tok.encode(text, false, true));
  if (ids.size() != 1)
    return error(Code::kBadFile,
                 "the vocabulary has no single token for '{}' (it tokenizes to {} tokens), which "
                 "this projector type puts around an image",
                 text, ids.size());
  return ids[0];
}

// FNV-1a over the rows' bytes, then a mix per index (splitmix64's
// finalizer), folded to a negative int32.
uint64_t hash_rows(const std::vector<float>& e) {
  return fnv1a_bytes(e.data(), e.size() * sizeof(float));
}

int32_t image_key(uint64_t h, int64_t index) {
  uint64_t z = h + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return -1 - static_cast<int32_t>(z & 0x3fffffff);
}

}  // namespace

Expected<MediaPrompt> build_media_prompt(const tokenizer::Tokenizer& tok, std::string_view text,
                                         bool add_bos, bool parse_special,
                                         const std::vector<std::vector<float>>& images,
                                         int64_t n_embd, const MediaStyle& style) {
  if (n_embd <= 0) return error(Code::kInvalidArgument, "image embeddings need a width");
  // Split at the markers.
  std::vector<std::string_view> parts;
  for (size_t at = 0;;) {
    const size_t m = text.find(kMediaMarker, at);
    if (m == std::string_view::npos) {
      parts.push_back(text.substr(at));
      break;
    }
    parts.push_back(text.substr(at, m - at));
    at = m + kMediaMarker.size();
  }
  const size_t n_markers = parts.size() - 1;
  if (n_markers > images.size())
    return error(Code::kInvalidArgument, "the prompt has {} {} markers but {} {} given",
                 n_markers, kMediaMarker, images.size(), images.size() == 1 ? "image is" : "images are");
  if (n_markers != 0 && n_markers < images.size())
    return error(Code::kInvalidArgument,
                 "the prompt has {} {} marker{} but {} images are given (mark every image's "
                 "place, or none to put them all before the text)",
                 n_markers, kMediaMarker, n_markers == 1 ? "" : "s", images.size());
  if (n_markers == 0 && !images.empty())  // all images first, then the text
    parts.insert(parts.begin(), images.size(), std::string_view{});

  MediaPrompt mp;
  mp.n_embd = n_embd;
  mp.non_causal = style.non_causal;
  int32_t begin_id = -1, end_id = -1;
  if (!images.empty()) {
    if (!style.begin.empty()) {
      SUSTAIN_ASSIGN_OR_RETURN(begin_id, single_token(tok, style.begin));
    }
    if (!style.end.empty()) {
      SUSTAIN_ASSIGN_OR_RETURN(end_id, single_token(tok, style.end));
    }
  }
  if (add_bos && tok.add_bos() && tok.bos() >= 0) mp.ids.push_back(tok.bos());
  for (size_t i = 0; i < parts.size(); ++i) {
    SUSTAIN_ASSIGN_OR_RETURN(auto ids, tok.encode(parts[i], false, parse_special));
    mp.ids.insert(mp.ids.end(), ids.begin(), ids.end());
    if (i == images.size()) continue;  // the text after the last image
    const std::vector<float>& e = images[i];
    if (e.empty() || e.size() % static_cast<size_t>(n_embd) != 0)
      return error(Code::kInvalidArgument,
                   "image {} has {} embedding values, not a whole number of rows of {}", i + 1,
                   e.size(), n_embd);
    const int64_t rows = static_cast<int64_t>(e.size()) / n_embd;
    if (begin_id >= 0) mp.ids.push_back(begin_id);
    MediaPrompt::Image im;
    im.begin = mp.size();
    im.end = im.begin + rows;
    im.row = static_cast<int64_t>(mp.embd.size()) / n_embd;
    mp.images.push_back(im);
    mp.embd.insert(mp.embd.end(), e.begin(), e.end());
    const uint64_t h = hash_rows(e);
    for (int64_t r = 0; r < rows; ++r) mp.ids.push_back(image_key(h, r));
    if (end_id >= 0) mp.ids.push_back(end_id);
  }
  if (mp.ids.empty()) return error(Code::kInvalidArgument, "the prompt is empty");
  return mp;
}

}  // namespace sustain::engine
