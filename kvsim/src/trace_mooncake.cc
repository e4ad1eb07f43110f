// The Mooncake JSONL trace format (docs/TRACES.md): ParseMooncakeTrace.
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "kvsim/trace.h"
#include "trace_json.h"

namespace deltakv::kvsim {

namespace {
const std::set<std::string> kFields = {"timestamp", "input_length", "output_length", "hash_ids"};
constexpr uint32_t kMooncakeBlock = 512;
}  // namespace

StatusOr<Trace> ParseMooncakeTrace(std::string_view text, std::string_view file,
                                   const TraceLimits& limits) {
  if (text.size() > limits.max_file_bytes) {
    return InvalidArgument(std::string(file) + ": larger than " +
                           std::to_string(limits.max_file_bytes) + " bytes");
  }
  Trace t;
  t.file = std::string(file);
  const size_t slash = t.file.find_last_of('/');
  t.id = slash == std::string::npos ? t.file : t.file.substr(slash + 1);
  t.format = TraceFormat::kMooncake;
  t.block_size = kMooncakeBlock;
  t.sessions_independent = true;
  uint32_t line = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view row = text.substr(pos, end - pos);
    pos = end + 1;
    ++line;
    if (row.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    ASSIGN_OR_RETURN(nlohmann::json j, ParseJsonText(row, file, line));
    JsonField f(file, line);
    if (j.is_object() && j.contains("session_id")) {
      return f.Error("record", "'session_id' (multi-turn Mooncake sessions) is not supported");
    }
    RETURN_IF_ERROR(f.CheckObject(j, "record", kFields));
    TraceRequest r;
    ASSIGN_OR_RETURN(double ms, f.Time(j, "record", "timestamp", true));
    r.t_s = ms / 1000.0;
    ASSIGN_OR_RETURN(r.input_tokens,
                     f.Count(j, "record", "input_length", true, limits.max_tokens_per_request));
    ASSIGN_OR_RETURN(r.output_tokens,
                     f.Count(j, "record", "output_length", true, limits.max_tokens_per_request));
    if (!j.contains("hash_ids")) return f.Error("record.hash_ids", "missing");
    RETURN_IF_ERROR(
        f.HashIds(j, "record", r.input_tokens, "input_length", kMooncakeBlock, &r.hash_ids));
    r.line = line;
    if (t.conversations.size() >= limits.max_requests) {
      return f.Error("record", "more than " + std::to_string(limits.max_requests) + " records");
    }
    Conversation c;
    c.id = t.id + ":" + std::to_string(line);
    c.turns.push_back(std::move(r));
    t.conversations.push_back(std::move(c));
  }
  if (t.conversations.empty()) return InvalidArgument(std::string(file) + ": no records");
  return t;
}

}  // namespace deltakv::kvsim
