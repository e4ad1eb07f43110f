// Status and StatusOr: the error vocabulary of every deltakv library.
//
// A Status is either OK or carries a code and a human-readable message that says what was
// wrong and where ("tensor 'w': parent checksum mismatch: expected 0x..., actual 0x...").
// Libraries never throw across their boundary; they return Status or StatusOr<T>.
//
// Thread-safety: values; no shared state.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace deltakv {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,     // bad input: malformed file, frame, manifest, request
  kNotFound = 2,            // a named object, tensor or file does not exist
  kDataLoss = 3,            // verification failed: checksum mismatch, truncated data
  kFailedPrecondition = 4,  // state does not allow the call (wrong parent, busy)
  kResourceExhausted = 5,   // a configured cap was hit (window, output, work)
  kIoError = 6,             // the operating system refused (open, write, mmap, rename)
  kUnimplemented = 7,       // valid input that this build does not support (dictionaries)
  kInternal = 8,            // a bug
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "CODE: message", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is "<prefix>: <message>"; OK stays OK.
  Status WithPrefix(std::string_view prefix) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    assert(!status_.ok() && "StatusOr built from an OK status without a value");
    if (status_.ok()) status_ = Internal("StatusOr constructed from OK status without a value");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // REQUIRES: ok().
  T& value() & {
    assert(ok());
    return *value_;
  }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace deltakv

#define DELTAKV_CONCAT_INNER_(a, b) a##b
#define DELTAKV_CONCAT_(a, b) DELTAKV_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
// (A fresh variable name per expansion, so nested uses inside lambdas do not shadow.)
#define RETURN_IF_ERROR(expr) \
  RETURN_IF_ERROR_IMPL_(DELTAKV_CONCAT_(deltakv_status_, __COUNTER__), expr)
#define RETURN_IF_ERROR_IMPL_(var, expr) \
  do {                                   \
    ::deltakv::Status var = (expr);      \
    if (!var.ok()) return var;           \
  } while (0)

// `lhs = value of expr`, or return its Status.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(DELTAKV_CONCAT_(deltakv_statusor_, __COUNTER__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()
