#include "cli/spec_flags.h"

#include "cli/model_session.h"

namespace sustain::cli {

void add_spec_flags(CLI::App* sub, SpecArgs& a) {
  sub->add_option(
      "--spec", a.spec,
      "speculative decoding: proposers, comma-separated, the first that drafts wins "
      "(ngram: prompt lookup; draft: --draft-model; mtp: the model's own MTP head, "
      "--spec-mtp-depth tokens a step; oracle:ALPHA: for measurement only, the target's own greedy "
      "continuation from an earlier pass with each token wrong with probability "
      "1-ALPHA); a server request opts out with \"speculative\": false");
  sub->add_option("--spec-gate", a.gate,
                  "on: each step drafts only as many tokens per sequence as the measured step "
                  "cost and acceptance say will pay (none at long context or under load when "
                  "they do not); off: always --draft-max")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  sub->add_option("--draft-model,--model-draft", a.draft_model,
                  "--spec draft: a smaller GGUF with the same vocabulary (alias -md)");
  sub->add_option("--cache-type-k-draft", a.cache_type_k_draft,
                  "K cache format of the draft model or the MTP block (alias -ctkd)")
      ->capture_default_str();
  sub->add_option("--cache-type-v-draft", a.cache_type_v_draft,
                  "V cache format of the draft model or the MTP block (alias -ctvd)")
      ->capture_default_str();
  sub->add_option("--draft-max", a.draft_max, "tokens drafted per step at most (1..16)")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  sub->add_option("--draft-min", a.draft_min, "shorter drafts are not verified")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  sub->add_option("--draft-p-min", a.draft_p_min,
                  "draft: stop drafting where the draft model's top probability (temperature 1) "
                  "is below this (0 = never)")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 1.0f));
  sub->add_option("--spec-mtp-depth", a.mtp_depth,
                  "mtp: draft up to this many tokens a step by feeding the MTP block's own "
                  "output back (each one more pass of the block and its LM head; capped by "
                  "--draft-max)")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  sub->add_option("--spec-ngram-max", a.ngram_max, "ngram: longest suffix looked up")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  sub->add_option("--spec-ngram-pool-mb", a.ngram_pool_mb,
                  "ngram: MiB of the n-gram pool all requests share, filled by every completed "
                  "request (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
}

Expected<spec::Config> spec_config(const SpecArgs& a) {
  spec::Config c;
  if (!a.spec.empty()) {
    SUSTAIN_ASSIGN_OR_RETURN(c.types, spec::parse_types(a.spec));
  }
  c.draft_max = a.draft_max;
  c.draft_min = a.draft_min;
  c.ngram_max = a.ngram_max;
  c.ngram_pool_mb = a.ngram_pool_mb;
  c.gate = a.gate != "off";
  c.draft_model = a.draft_model;
  c.draft_p_min = a.draft_p_min;
  c.mtp_depth = a.mtp_depth;
  SUSTAIN_ASSIGN_OR_RETURN(c.draft_k_type, kv_type(a.cache_type_k_draft, "--cache-type-k-draft"));
  SUSTAIN_ASSIGN_OR_RETURN(c.draft_v_type, kv_type(a.cache_type_v_draft, "--cache-type-v-draft"));
  SUSTAIN_TRY(spec::validate(c));
  return c;
}

}  // namespace sustain::cli
