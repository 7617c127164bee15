#include "base/status.h"

namespace sustain {

const char* code_name(Code c) {
  switch (c) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kBadFile: return "bad file";
    case Code::kIo: return "i/o error";
    case Code::kNotFound: return "not found";
    case Code::kUnsupported: return "unsupported";
    case Code::kOutOfMemory: return "out of memory";
    case Code::kInternal: return "internal error";
    case Code::kUnavailable: return "unavailable";
  }
  return "unknown";
}

}  // namespace sustain
