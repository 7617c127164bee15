#include "spec/proposer.h"

#include "spec/ngram.h"

namespace sustain::spec {

Status validate(const Config& c) {
  if (c.draft_max < 1 || c.draft_max > 16)
    return error(Code::kInvalidArgument, "--draft-max {} is out of range (1..16)", c.draft_max);
  if (c.draft_min < 1 || c.draft_min > c.draft_max)
    return error(Code::kInvalidArgument, "--draft-min {} is out of range (1..--draft-max {})",
                 c.draft_min, c.draft_max);
  if (c.ngram_max < 1 || c.ngram_max > 16)
    return error(Code::kInvalidArgument, "--spec-ngram-max {} is out of range (1..16)",
                 c.ngram_max);
  for (const std::string& t : c.types)
    if (t != "ngram" && t != "draft" && t != "mtp")
      return error(Code::kInvalidArgument,
                   "--spec: unknown proposer `{}` (available: ngram, draft, mtp)", t);
  if (c.uses("draft") && c.draft_model.empty())
    return error(Code::kInvalidArgument, "--spec draft needs --draft-model FILE");
  if (!c.uses("draft") && !c.draft_model.empty())
    return error(Code::kInvalidArgument,
                 "--draft-model {} is given but --spec does not name `draft`", c.draft_model);
  if (!(c.draft_p_min >= 0.0f && c.draft_p_min <= 1.0f))
    return error(Code::kInvalidArgument, "--draft-p-min {} is out of range (0..1)", c.draft_p_min);
  return Status::ok();
}

Expected<std::vector<std::string>> parse_types(const std::string& list) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= list.size()) {
    const size_t j = std::min(list.find(',', i), list.size());
    std::string t = list.substr(i, j - i);
    if (t.empty())
      return error(Code::kInvalidArgument, "--spec '{}': an empty proposer name", list);
    out.push_back(std::move(t));
    i = j + 1;
  }
  for (const std::string& t : out)
    if (t != "ngram" && t != "draft" && t != "mtp")
      return error(Code::kInvalidArgument,
                   "--spec: unknown proposer `{}` (available: ngram, draft, mtp)", t);
  return out;
}

Expected<std::vector<std::unique_ptr<Proposer>>> make_proposers(const Config& c) {
  SUSTAIN_TRY(validate(c));
  std::vector<std::unique_ptr<Proposer>> out;
  for (const std::string& t : c.types)
    if (t == "ngram") out.push_back(std::make_unique<NgramProposer>(c.ngram_max));
  return out;
}

}  // namespace sustain::spec
