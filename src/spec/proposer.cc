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
    if (t != "ngram")
      return error(Code::kInvalidArgument,
                   "--spec: unknown proposer `{}` (available: ngram; draft and mtp are not "
                   "implemented yet)",
                   t);
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
  Config c;
  c.types = out;
  SUSTAIN_TRY(validate(c));
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
