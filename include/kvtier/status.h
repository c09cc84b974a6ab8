// Status and Result<T>: the one error type of kvtier.
//
// Every fallible operation returns a Status (code + message) or a Result<T>
// (a value or a non-OK Status). Expected conditions (NotFound, Busy, Retry)
// are ordinary values; nothing in the library throws across its API and no
// errno or -1 crosses a module boundary. Both types are cheap to move and are
// safe to use from any thread (they are plain values).
#pragma once

#include <cassert>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kvtier {

enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument,   // the caller passed something malformed
  kNotFound,          // expected miss (cache lookups)
  kBusy,              // try again later (queue full, pinned)
  kRetry,             // transient failure, retrying may succeed
  kCorruption,        // checksum / magic / format mismatch
  kIOError,           // EIO, short I/O, unexpected OS failure
  kNoSpace,           // ENOSPC or a hard capacity limit
  kUnavailable,       // a tier or service is degraded or down
  kCancelled,         // work was cancelled by its owner
  kFailedPrecondition,
  kOutOfRange,
  kUnimplemented,
  kInternal,
  kDeadlineExceeded,  // the work ran out of its time (a request's deadline)
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status Busy(std::string m) { return {StatusCode::kBusy, std::move(m)}; }
  static Status Retry(std::string m) { return {StatusCode::kRetry, std::move(m)}; }
  static Status Corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
  static Status IOError(std::string m) { return {StatusCode::kIOError, std::move(m)}; }
  static Status NoSpace(std::string m) { return {StatusCode::kNoSpace, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
  static Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
  static Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
  static Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status DeadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
  // An I/O failure described by an errno value (ENOSPC maps to kNoSpace).
  static Status FromErrno(int err, std::string_view context);

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "OK" or "<CodeName>: <message>".
  std::string to_string() const;

  bool is(StatusCode c) const { return code_ == c; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or an error. Accessing value() of an error is a programming bug
// (asserted in debug builds).
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}                 // NOLINT(implicit)
  Result(Status status) : v_(std::move(status)) {            // NOLINT(implicit)
    assert(!std::get<Status>(v_).ok() && "Result built from an OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { assert(ok()); return std::get<T>(v_); }
  const T& value() const& { assert(ok()); return std::get<T>(v_); }
  T&& value() && { assert(ok()); return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kvtier

#define KVTIER_CONCAT_INNER(a, b) a##b
#define KVTIER_CONCAT(a, b) KVTIER_CONCAT_INNER(a, b)

#define KVTIER_RETURN_IF_ERROR(expr)            \
  do {                                          \
    ::kvtier::Status _kvt_st = (expr);          \
    if (!_kvt_st.ok()) return _kvt_st;          \
  } while (0)

#define KVTIER_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

// KVTIER_ASSIGN_OR_RETURN(auto x, f());
#define KVTIER_ASSIGN_OR_RETURN(lhs, expr) \
  KVTIER_ASSIGN_OR_RETURN_IMPL(KVTIER_CONCAT(_kvt_res_, __LINE__), lhs, expr)
