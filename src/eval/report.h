// JSON, Markdown and self-contained HTML for eval results. Kept here (not in
// bench/) so eval reports do not depend on the bench report code; the shapes
// follow `sustain bench`: one object with the conditions, then the results.
#pragma once

#include <string>
#include <vector>

#include "eval/kl.h"
#include "eval/needle.h"

namespace sustain::eval {

struct Conditions {
  std::string model;       // the test model
  std::string base_model;  // KL only
  std::string input;       // cases file, text file or generator description
  int threads = 0;
  int64_t batch = 0;
  std::string commit;      // build
};

// A text case's answer (eval/text_needle.h): the value and what the model said.
struct TextNeedleScored {
  std::string key, value, generated;
  int phrasing = 0;
};

struct NeedleRun {
  std::string cache_k, cache_v;
  NeedleTable table;
  std::vector<std::string> tags;        // per case, in order
  std::vector<int32_t> answers;         // token cases
  std::vector<NeedleResult> results;
  std::vector<TextNeedleScored> text;   // text cases (then answers is empty)
  double seconds = 0.0;
};

std::string needle_json(const Conditions& c, const std::vector<NeedleRun>& runs, bool per_case);
std::string needle_markdown(const Conditions& c, const std::vector<NeedleRun>& runs);
// One heatmap (context × depth, colored by accuracy) per KV configuration.
std::string needle_html(const Conditions& c, const std::vector<NeedleRun>& runs);

struct KlRun {
  std::string base_label, test_label;  // e.g. "f16/f16", "q4_0/f16" or model files
  std::vector<BucketStats> buckets;    // the whole range last
  bool from_saved = false;             // KL is a lower bound with kl_high_mean the upper
  int top_k = 0;
  double seconds = 0.0;
};

std::string kl_json(const Conditions& c, const std::vector<KlRun>& runs);
std::string kl_markdown(const Conditions& c, const std::vector<KlRun>& runs);

}  // namespace sustain::eval
