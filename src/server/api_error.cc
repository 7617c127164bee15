#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace sustain::server {

std::string error_body(const ApiError& e) {
  nlohmann::json j = {{"error",
                       {{"message", e.message},
                        {"type", e.type},
                        {"param", e.param.empty() ? nlohmann::json() : nlohmann::json(e.param)},
                        {"code", e.code.empty() ? nlohmann::json() : nlohmann::json(e.code)}}}};
  // Messages may quote client bytes; replace invalid UTF-8 rather than throw.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

ApiError error_from_status(const Status& s) {
  ApiError e;
  e.message = s.message();
  switch (s.code()) {
    case Code::kInvalidArgument:
    case Code::kUnsupported:
      e.status = 400;
      e.type = "invalid_request_error";
      break;
    case Code::kUnavailable:
      e.status = 429;
      e.type = "rate_limit_error";
      e.code = "queue_full";
      break;
    default:
      e.status = 500;
      e.type = "server_error";
      break;
  }
  return e;
}

ApiError bad_request(std::string message, std::string param) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

}  // namespace sustain::server
