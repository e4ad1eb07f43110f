// The sidecar's log: one line per event on stderr, either text
//   deltakv sidecar: sync live sync_id=s000001 version=v2 ms=41.2
// or JSON (--log-format json), one object per line:
//   {"ts":"2025-01-02T03:04:05.678Z","level":"info","msg":"sync live","sync_id":"s000001",...}
//
// Fields come from three places, in this order: the process-wide fields (SetProcessField, e.g.
// "node" in a multi-node group), the calling thread's context (ScopedContext, e.g. the sync id
// and version of the job the thread runs), and the call's own fields. A later field with the
// same key replaces an earlier one.
//
// Thread-safety: every function may be called from any thread; a line is written with one
// write(2) under a mutex, so lines never interleave. SetFormat and SetProcessField are meant for
// start-up, before other threads log.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace deltakv::log {

enum class Format { kText, kJson };
enum class Level { kInfo, kWarn, kError };

using Fields = std::vector<std::pair<std::string, nlohmann::json>>;

// "text" or "json"; InvalidArgument naming the accepted values otherwise.
StatusOr<Format> ParseFormat(std::string_view name);
void SetFormat(Format format);
// Adds (or replaces) a field that every later line carries.
void SetProcessField(const std::string& key, nlohmann::json value);

// Adds fields to every line this thread writes while the object lives (nestable).
class ScopedContext {
 public:
  explicit ScopedContext(Fields fields);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  size_t previous_size_;
};

// Writes one line to stderr.
void Write(Level level, std::string_view msg, const Fields& fields = {});
inline void Info(std::string_view msg, const Fields& fields = {}) {
  Write(Level::kInfo, msg, fields);
}
inline void Warn(std::string_view msg, const Fields& fields = {}) {
  Write(Level::kWarn, msg, fields);
}
inline void Error(std::string_view msg, const Fields& fields = {}) {
  Write(Level::kError, msg, fields);
}

// The line (without its newline) that Write prints, at `unix_ns` nanoseconds since the epoch.
std::string FormatLine(Format format, Level level, std::string_view msg, const Fields& fields,
                       int64_t unix_ns);
// RFC 3339 UTC with milliseconds: "2025-01-02T03:04:05.678Z".
std::string Rfc3339Utc(int64_t unix_ns);

// `j` (a nlohmann::json or ordered_json) as compact JSON text that never throws: bytes that are
// not UTF-8 (a file name, a message quoting one) become U+FFFD. For every JSON the sidecar and
// the CLI print, answer or store.
template <typename Json>
std::string JsonText(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace deltakv::log
