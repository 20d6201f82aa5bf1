// Result and Status: how logdex reports failures across module boundaries.
//
// No exceptions cross a module boundary. A function that can fail returns a
// Status (no value) or a Result<T> (a value or an error). Modules with
// failures a caller must tell apart use their own error type E in
// Result<T, E> (see chunk_codec.h's ChunkError).
//
// Errors that can happen in production (bad input, store down, ...) travel
// as values; broken invariants abort (LOGDEX_CHECK).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace logdex {

// Broad error categories, translated to HTTP or exit codes only at the edge.
enum class Errc {
  kInvalidArgument,    // the caller's input is wrong
  kNotFound,           // a named thing does not exist
  kCorruption,         // stored or received bytes fail validation
  kIOError,            // the OS or the store failed
  kUnavailable,        // a dependency is down; retrying may help
  kResourceExhausted,  // a configured limit was reached
  kFailedPrecondition, // the system is not in a state to do this
  kInternal,           // a bug
};

const char* ErrcName(Errc code);

struct Error {
  Errc code;
  std::string message;

  std::string ToString() const { return std::string(ErrcName(code)) + ": " + message; }
};

// Success, or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), failed_(true) {}  // NOLINT: implicit by design
  Status(Errc code, std::string message) : Status(Error{code, std::move(message)}) {}

  static Status Ok() { return Status(); }

  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return error_; }
  Errc code() const { return error_.code; }
  const std::string& message() const { return error_.message; }
  std::string ToString() const { return ok() ? "OK" : error_.ToString(); }

 private:
  Error error_{Errc::kInternal, {}};
  bool failed_ = false;
};

// A value of type T, or an error of type E.
template <class T, class E = Error>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(E error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const E& error() const { return std::get<1>(v_); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, E> v_;
};

// Aborts with a message when an invariant does not hold: for bugs only,
// never for conditions that input or the environment can cause.
#define LOGDEX_CHECK(cond)                                                           \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)

}  // namespace logdex
