#include "common/result.h"

namespace logdex {

const char* ErrcName(Errc code) {
  switch (code) {
    case Errc::kInvalidArgument: return "invalid argument";
    case Errc::kNotFound: return "not found";
    case Errc::kCorruption: return "corruption";
    case Errc::kIOError: return "I/O error";
    case Errc::kUnavailable: return "unavailable";
    case Errc::kResourceExhausted: return "resource exhausted";
    case Errc::kFailedPrecondition: return "failed precondition";
    case Errc::kInternal: return "internal error";
  }
  return "unknown error";
}

}  // namespace logdex
