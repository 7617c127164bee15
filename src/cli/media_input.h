// Images in a prompt on the command line: `--mmproj P --image FILE` (the
// image flag repeatable, in the order of the prompt's <__media__> markers),
// shared by `run` and `logits`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/model_session.h"
#include "engine/media_prompt.h"

namespace sustain::cli {

struct MediaArgs {
  std::string mmproj;
  std::vector<std::string> images;
  bool given() const { return !mmproj.empty() || !images.empty(); }
};

void add_media_flags(CLI::App* sub, MediaArgs& a);

// What the images cost, for the report: encode time per image.
struct MediaStats {
  std::vector<double> encode_ms;
};

// Loads the projector, checks its width against the model's, decodes and
// encodes every image and lays out the prompt; refuses a prompt (with
// `reserve_after` positions to generate) longer than the context.
Expected<engine::MediaPrompt> media_prompt(Session& s, const ModelArgs& m, const MediaArgs& a,
                                           int64_t reserve_after, MediaStats* stats);

// The prompt of -p/-f: with --image, laid out with the images; without,
// tokenized as tokenize_prompt does.
struct PromptInput {
  std::vector<int32_t> ids;                  // media->ids when there are images
  std::optional<engine::MediaPrompt> media;  // set with --image
};
Expected<PromptInput> prompt_input(Session& s, const ModelArgs& m, const MediaArgs& a,
                                   int64_t reserve_after, MediaStats* stats);
// feed() or feed_media(), as the prompt has images or not.
Status feed_prompt(Session& s, kv::PageTable& table, const PromptInput& p, int64_t batch,
                   std::vector<float>* all_logits, std::vector<float>* last_logits);

// feed() for a prompt with images: forward chunks of at most min(batch,
// the workspace) positions that never cut an image.
Status feed_media(Session& s, kv::PageTable& table, const engine::MediaPrompt& mp, int64_t batch,
                  std::vector<float>* all_logits, std::vector<float>* last_logits);

}  // namespace sustain::cli
