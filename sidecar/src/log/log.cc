#include "log/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <mutex>

namespace deltakv::log {

namespace {

std::atomic<Format> g_format{Format::kText};
std::mutex g_mu;
Fields g_process_fields;  // GUARDED_BY(g_mu)
thread_local Fields t_context;

const char* LevelName(Level level) {
  switch (level) {
    case Level::kInfo:
      return "info";
    case Level::kWarn:
      return "warn";
    case Level::kError:
      return "error";
  }
  return "info";
}

void Merge(Fields& into, const Fields& from) {
  for (const auto& [key, value] : from) {
    bool replaced = false;
    for (auto& [k, v] : into) {
      if (k == key) {
        v = value;
        replaced = true;
      }
    }
    if (!replaced) into.emplace_back(key, value);
  }
}

// Text values: bare when they are one word, JSON-quoted otherwise.
std::string TextValue(const nlohmann::json& v) {
  if (!v.is_string()) return v.dump();
  const std::string& s = v.get_ref<const std::string&>();
  if (!s.empty() && s.find_first_of(" \t\n\"=") == std::string::npos) return s;
  return JsonText(v);
}

}  // namespace

StatusOr<Format> ParseFormat(std::string_view name) {
  if (name == "text") return Format::kText;
  if (name == "json") return Format::kJson;
  return InvalidArgument("log format must be 'text' or 'json', not '" + std::string(name) + "'");
}

void SetFormat(Format format) { g_format.store(format); }

void SetProcessField(const std::string& key, nlohmann::json value) {
  std::lock_guard<std::mutex> lock(g_mu);
  Merge(g_process_fields, {{key, std::move(value)}});
}

ScopedContext::ScopedContext(Fields fields) : previous_size_(t_context.size()) {
  for (auto& f : fields) t_context.push_back(std::move(f));
}

ScopedContext::~ScopedContext() { t_context.resize(previous_size_); }

std::string Rfc3339Utc(int64_t unix_ns) {
  const time_t secs = static_cast<time_t>(unix_ns / 1000000000);
  const int ms = static_cast<int>((unix_ns % 1000000000) / 1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  return buf;
}

std::string FormatLine(Format format, Level level, std::string_view msg, const Fields& fields,
                       int64_t unix_ns) {
  if (format == Format::kJson) {
    nlohmann::ordered_json j;
    j["ts"] = Rfc3339Utc(unix_ns);
    j["level"] = LevelName(level);
    j["msg"] = std::string(msg);
    for (const auto& [key, value] : fields) {
      if (key != "ts" && key != "level" && key != "msg") j[key] = value;
    }
    return JsonText(j);
  }
  std::string line = "deltakv sidecar: ";
  if (level != Level::kInfo) line += std::string(LevelName(level)) + ": ";
  line += msg;
  for (const auto& [key, value] : fields) line += " " + key + "=" + TextValue(value);
  return line;
}

void Write(Level level, std::string_view msg, const Fields& fields) {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  Fields all;
  std::lock_guard<std::mutex> lock(g_mu);
  all = g_process_fields;
  Merge(all, t_context);
  Merge(all, fields);
  std::string line = FormatLine(g_format.load(), level, msg, all, now) + "\n";
  for (size_t off = 0; off < line.size();) {
    ssize_t n = ::write(STDERR_FILENO, line.data() + off, line.size() - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
}

}  // namespace deltakv::log
