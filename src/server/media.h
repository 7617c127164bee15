// Images in chat requests: each image part's URL to bytes (a data: URI, or
// file:// under --image-dir; remote URLs are refused, the server fetches
// nothing), decoded and encoded by the vision projector, and laid out with
// the rendered prompt (engine/media_prompt.h). Every error is a 400 naming
// the part ("messages[1].content[2]").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/media_prompt.h"
#include "server/request.h"
#include "server/server.h"

namespace sustain::server {

// RFC 4648 base64 (padding optional, no whitespace); errors name the
// offset of the first bad character.
Expected<std::vector<uint8_t>> base64_decode(std::string_view s);

// The bytes an image URL stands for; `name` prefixes errors.
Expected<std::vector<uint8_t>> image_url_bytes(const std::string& url, const std::string& name,
                                               const std::string& image_dir, size_t max_bytes);

// Decodes and encodes every image part of `r` (c.images), then lays `text`
// (the rendered prompt, with one marker per part) out with them.
Expected<std::shared_ptr<const engine::MediaPrompt>> image_prompt(const ServerConfig& c,
                                                                  const tokenizer::Tokenizer& tok,
                                                                  const std::string& text,
                                                                  const CompletionRequest& r,
                                                                  int64_t n_embd, int64_t n_ctx);

}  // namespace sustain::server
