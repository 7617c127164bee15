// `sustain logits -m M -p PROMPT -o OUT.f32`: the logits of every prompt
// position (n_tokens × n_vocab float32, little-endian) plus OUT.json with the
// token ids, for comparisons with other engines.
#include <cstdio>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/media_input.h"
#include "cli/model_session.h"
#include "cli/ranks.h"

namespace sustain::cli {
namespace {

struct LogitsArgs {
  ModelArgs m;
  MediaArgs media;
  SplitArgs split;
  std::string out;
};

int logits_main(const LogitsArgs& a, Ranks& ranks) {
  if (ranks.split() && a.media.given())
    return fail(fmt::format("--split {} with --image is not built yet (give one or the other)",
                            ranks.tensor ? "tensor" : "layer"));
  auto s = open_session(a.m, true, &ranks);
  if (!s) return fail(s.status().message());
  Session& sess = **s;
  if (ranks.follower()) {
    Status st = follow_steps(sess);
    return st ? 0 : fail(fmt::format("rank {}: {}", ranks.rank(), st.message()));
  }
  MediaStats ms;
  auto in = prompt_input(sess, a.m, a.media, 0, &ms);
  if (!in) return fail(in.status().message());
  const std::vector<int32_t>* ids = &in->ids;
  const std::optional<engine::MediaPrompt>& mp = in->media;
  kv::PageTable table;
  std::vector<float> logits;
  Status st = feed_prompt(sess, table, *in, a.m.batch, &logits, nullptr);
  if (!st) return fail(st.message());
  {
    std::ofstream f(a.out, std::ios::binary);
    if (!f) return fail(fmt::format("cannot write '{}'", a.out));
    f.write(reinterpret_cast<const char*>(logits.data()),
            static_cast<std::streamsize>(logits.size() * sizeof(float)));
    if (!f) return fail(fmt::format("writing '{}' failed", a.out));
  }
  nlohmann::ordered_json j;
  j["model"] = a.m.model;
  j["n_tokens"] = ids->size();
  j["n_vocab"] = sess.model->config().n_vocab;
  j["token_ids"] = *ids;
  j["logits_file"] = a.out;
  j["layout"] = "float32 little-endian [n_tokens][n_vocab]; row i = logits after token i";
  j["cache_type_k"] = a.m.cache_type_k;
  j["cache_type_v"] = a.m.cache_type_v;
  if (ranks.split() && ranks.tensor) {
    j["split"] = "tensor";
    j["ranks"] = ranks.size();
    auto& sh = j["shards"];  // what each rank held (model/shard.h)
    sh = nlohmann::json::array();
    for (const TensorShard& t : ranks.shards)
      sh.push_back({{"query_heads", {t.head_begin, t.head_end}},
                    {"kv_heads", {t.kv_begin, t.kv_end}},
                    {"kv_heads_cached", t.n_kv_cached()},
                    {"ffn_columns", {t.ff_begin, t.ff_end}},
                    {"output_rows", {t.vocab_begin, t.vocab_end}},
                    {"attn_output", t.o_by_columns ? "columns" : "whole"},
                    {"deltanet_key_heads", {t.ssm_k_begin, t.ssm_k_end}},
                    {"experts", {t.expert_begin, t.expert_end}}});
  } else if (ranks.split()) {
    j["split"] = "layer";
    j["ranks"] = ranks.size();
    j["layer_bounds"] = ranks.bounds;  // rank r ran blocks [bounds[r], bounds[r + 1])
  }
  if (mp) {
    // Image positions hold embeddings, not tokens: their token_ids entries
    // are the negative keys prefix reuse matches on (media_prompt.h).
    j["mmproj"] = a.media.mmproj;
    j["images"] = a.media.images;
    auto& im = j["image_positions"];
    im = nlohmann::json::array();
    for (const auto& i : mp->images) im.push_back({{"first", i.begin}, {"last", i.end - 1}});
    j["image_attention"] = mp->non_causal ? "non-causal within each image" : "causal";
    j["encode_ms"] = ms.encode_ms;
  }
  const std::string side = a.out + ".json";
  std::ofstream js(side);
  js << j.dump(1) << "\n";
  if (!js) return fail(fmt::format("cannot write '{}'", side));
  std::fprintf(stderr, "wrote %zu x %u logits to %s (+ %s)\n", ids->size(),
               sess.model->config().n_vocab, a.out.c_str(), side.c_str());
  return 0;
}

int run_logits(const LogitsArgs& a) {
  auto r = open_ranks(a.split, a.m.model);
  if (!r) return fail_launch(r.status());
  return finish_ranks(**r, logits_main(a, **r));
}

}  // namespace

Runner add_logits(CLI::App& app) {
  auto a = std::make_shared<LogitsArgs>();
  auto* sub = app.add_subcommand("logits", "Write the logits of every prompt position (float32)");
  add_model_flags(sub, a->m, true, true);
  add_media_flags(sub, a->media);
  add_split_flags(sub, a->split);
  sub->add_option("-o,--output", a->out, "output .f32 file (a .json sidecar is written beside it)")
      ->required();
  return [a] { return run_logits(*a); };
}

}  // namespace sustain::cli
