#include "spec/proposer.h"

#include "spec/ngram.h"
#include "spec/oracle.h"

namespace sustain::spec {
namespace {

Status check_type(const std::string& t) {
  if (t == "ngram" || t == "draft" || t == "mtp") return Status::ok();
  if (t.rfind("oracle", 0) == 0) return parse_oracle_alpha(t).status();
  return error(Code::kInvalidArgument,
               "--spec: unknown proposer `{}` (available: ngram, draft, mtp, oracle:ALPHA)", t);
}

}  // namespace

Status validate(const Config& c) {
  if (c.draft_max < 1 || c.draft_max > 16)
    return error(Code::kInvalidArgument, "--draft-max {} is out of range (1..16)", c.draft_max);
  if (c.draft_min < 1 || c.draft_min > c.draft_max)
    return error(Code::kInvalidArgument, "--draft-min {} is out of range (1..--draft-max {})",
                 c.draft_min, c.draft_max);
  if (c.mtp_depth < 1 || c.mtp_depth > 16)
    return error(Code::kInvalidArgument, "--spec-mtp-depth {} is out of range (1..16)",
                 c.mtp_depth);
  if (c.ngram_max < 1 || c.ngram_max > 16)
    return error(Code::kInvalidArgument, "--spec-ngram-max {} is out of range (1..16)",
                 c.ngram_max);
  if (c.ngram_pool_mb < 0 || c.ngram_pool_mb > 4096)
    return error(Code::kInvalidArgument, "--spec-ngram-pool-mb {} is out of range (0..4096)",
                 c.ngram_pool_mb);
  for (const std::string& t : c.types) SUSTAIN_TRY(check_type(t));
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
  for (const std::string& t : out) SUSTAIN_TRY(check_type(t));
  return out;
}

Expected<std::vector<std::unique_ptr<Proposer>>> make_proposers(const Config& c, int64_t n_vocab) {
  SUSTAIN_TRY(validate(c));
  std::vector<std::unique_ptr<Proposer>> out;
  for (const std::string& t : c.types) {
    if (t == "ngram")
      out.push_back(
          std::make_unique<NgramProposer>(c.ngram_max, static_cast<size_t>(c.ngram_pool_mb) << 20));
    if (t.rfind("oracle", 0) == 0) {
      SUSTAIN_ASSIGN_OR_RETURN(const double a, parse_oracle_alpha(t));
      out.push_back(std::make_unique<OracleProposer>(a, n_vocab));
    }
  }
  return out;
}

}  // namespace sustain::spec
