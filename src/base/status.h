// Status and Expected<T>: how library code reports errors. Library code never
// aborts on bad input; it returns one of these with a message that names the
// file, field or parameter at fault. Asserts (SUSTAIN_CHECK) guard only
// internal invariants.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace sustain {

enum class Code {
  kOk = 0,
  kInvalidArgument,  // a flag, parameter or request field is out of range
  kBadFile,          // a malformed or unsupported input file
  kIo,               // open/read/write/mmap failed
  kNotFound,         // a key, tensor or preset that does not exist
  kUnsupported,      // valid input that this build cannot handle (yet)
  kOutOfMemory,
  kInternal,
  kUnavailable,      // busy right now (a full queue): retry later
};

const char* code_name(Code c);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string msg) : code_(code), msg_(std::move(msg)) {}
  static Status ok() { return Status(); }

  bool is_ok() const { return code_ == Code::kOk; }
  explicit operator bool() const { return is_ok(); }
  Code code() const { return code_; }
  const std::string& message() const { return msg_; }

  // Prepends context ("reading model.gguf: ...") to a failed status.
  Status with_context(const std::string& ctx) const {
    if (is_ok()) return *this;
    return Status(code_, ctx + ": " + msg_);
  }

 private:
  Code code_ = Code::kOk;
  std::string msg_;
};

template <typename... Args>
Status error(Code code, fmt::format_string<Args...> f, Args&&... args) {
  return Status(code, fmt::format(f, std::forward<Args>(args)...));
}

// Expected<T>: a value or a failed Status (std::expected is C++23).
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Expected(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).is_ok()) v_ = Status(Code::kInternal, "Expected built from an ok Status");
  }

  bool has_value() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return has_value(); }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Status& status() const {
    static const Status kOkStatus;
    return has_value() ? kOkStatus : std::get<Status>(v_);
  }

 private:
  std::variant<T, Status> v_;
};

}  // namespace sustain

#define SUSTAIN_CONCAT_INNER(a, b) a##b
#define SUSTAIN_CONCAT(a, b) SUSTAIN_CONCAT_INNER(a, b)

// Returns early from a function returning Status or Expected<U>.
#define SUSTAIN_TRY(expr)                               \
  do {                                                  \
    ::sustain::Status _st = (expr);                     \
    if (!_st.is_ok()) return _st;                       \
  } while (0)

// SUSTAIN_ASSIGN_OR_RETURN(auto x, make_x());
#define SUSTAIN_ASSIGN_OR_RETURN(lhs, expr) \
  SUSTAIN_ASSIGN_OR_RETURN_IMPL(SUSTAIN_CONCAT(_exp_, __LINE__), lhs, expr)
#define SUSTAIN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.has_value()) return tmp.status();          \
  lhs = std::move(tmp).value()

// Internal invariant; always on. Not for validating input.
#define SUSTAIN_CHECK(cond)                                                               \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "sustain: internal error: %s at %s:%d\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)
