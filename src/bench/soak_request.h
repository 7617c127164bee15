// One request of the soak: what to send (drawn from the traffic mix) and how
// it ended, as one outcome kind. Sent over the same HTTP pieces as the
// bench's load generator (bench/http_target.h: URL, SSE parser).
#pragma once

#include <atomic>
#include <cstdint>
#include <random>
#include <string>

#include "bench/http_target.h"
#include "bench/soak.h"

namespace sustain::bench {

struct SoakRequest {
  std::string path = "/v1/completions";
  std::string body;
  bool stream = false;
  int cut_after_events = 0;  // > 0: the client disconnects after this many events
  bool malformed = false;    // must be answered 4xx
  std::string malformed_case;
};

// Draws request `index` of the mix from `rng`: malformed with
// c.malformed_share, else a completion of a log-uniform prompt length,
// streamed or not, temperature 0 or 0.8, maybe cut off mid-stream.
SoakRequest draw_soak_request(std::mt19937_64& rng, const SoakConfig& c, int64_t index,
                              const std::string& model);

// The temperature-0 request the determinism check repeats.
SoakRequest probe_request(const std::string& model);

struct SoakOutcome {
  // ok, malformed_4xx, disconnected, rejected_429, cut_at_end; or a failure:
  // connect (no connection), transport (the connection broke or timed out
  // before an answer), http_5xx, http_4xx, malformed_not_4xx, stream_error,
  // stream_incomplete, bad_response.
  std::string kind = "ok";
  bool failed = false;
  int status = 0;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  std::string text;    // choices[0].text
  std::string detail;  // for a failure: what happened
};

// Sends `r` and classifies its end. Each visible token adds one to *tokens
// as it arrives (streams: one per text event, topped up from usage at the
// end; otherwise all at the end). A stream is cut off once *stop is set.
SoakOutcome send_soak_request(const HttpUrl& url, const std::string& api_key, const SoakRequest& r,
                              double timeout_s, std::atomic<int64_t>& tokens,
                              const std::atomic<bool>& stop);

}  // namespace sustain::bench
