// OpenAI-style errors: every failed request gets an HTTP status and a body
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// so clients written for the OpenAI API show the message as it is.
#pragma once

#include <string>

#include "base/status.h"

namespace sustain::server {

struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;  // the request field at fault; "" = none (null in the body)
  std::string code;   // a short machine-readable code; "" = none
};

// The JSON body of an error response.
std::string error_body(const ApiError& e);

// Maps a Status from validation or the engine to an ApiError:
// kInvalidArgument → 400, kUnsupported → 400 (the request asks for something
// this server does not do), kUnavailable (a full queue) → 429, everything
// else → 500 server_error.
ApiError error_from_status(const Status& s);

ApiError bad_request(std::string message, std::string param = "");

}  // namespace sustain::server
