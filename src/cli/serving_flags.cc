#include "cli/serving_flags.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace sustain::cli {

void add_serving_flags(CLI::App* sub, ServingArgs& a) {
  sub->add_option("--tpot-target", a.tpot_target,
                  "time per output token the scheduler keeps for running streams, in ms: each "
                  "step's prefill chunk is cut to what fits (a request's \"tpot_target_ms\" may "
                  "tighten it). auto = 4x the step without prefill; 0 = off (prefill takes the "
                  "whole --batch-size)")
      ->capture_default_str();
  sub->add_option("--prefill-age-bound", a.prefill_age_bound_s,
                  "seconds: prompts are admitted and prefilled shortest first, except that one "
                  "waiting this long goes first")
      ->capture_default_str();
  sub->add_flag("--batch-invariant", a.batch_invariant, kBatchInvariantHelp);
}

const char* const kBatchInvariantHelp =
    "compute every token as it would be alone: speculative verify steps equal decode steps and "
    "prefill equals decoding, bit for bit, and output does not change with what else runs or "
    "with -t; prefill and verify run without the multi-row matmul kernels (slower; "
    "process-wide)";

Expected<double> parse_tpot_target(const std::string& v) {
  if (v == "auto") return engine::kTpotAuto;
  errno = 0;
  char* end = nullptr;
  const double ms = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || errno != 0 || !std::isfinite(ms) || ms < 0 ||
      ms > 1e6)
    return error(Code::kInvalidArgument,
                 "--tpot-target: expected auto, 0 (off) or milliseconds in (0, 1e6], got '{}'", v);
  return ms;
}

Status apply_serving_flags(const ServingArgs& a, engine::EngineConfig& c) {
  SUSTAIN_ASSIGN_OR_RETURN(c.tpot_target_ms, parse_tpot_target(a.tpot_target));
  if (!std::isfinite(a.prefill_age_bound_s) || a.prefill_age_bound_s < 0 ||
      a.prefill_age_bound_s > 1e6)
    return error(Code::kInvalidArgument,
                 "--prefill-age-bound: expected seconds in [0, 1e6], got {}",
                 a.prefill_age_bound_s);
  c.prefill_age_bound_s = a.prefill_age_bound_s;
  c.batch_invariant = a.batch_invariant;
  return Status::ok();
}

}  // namespace sustain::cli
