// The Weka / AgentX trace format (docs/TRACES.md): ParseWekaTrace and WriteWekaTrace.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "kvsim/trace.h"
#include "trace_json.h"

namespace deltakv::kvsim {
namespace {

using nlohmann::json;

// Times closer than this are equal when subagent times and joins are compared (AgentX's
// tolerance).
constexpr double kTimeEpsilon = 1e-6;

const std::set<std::string> kTraceFields = {
    "id",          "models",        "block_size", "hash_id_scope",
    "tool_tokens", "system_tokens", "requests",   "totals"};
const std::set<std::string> kRequestFields = {
    "t",        "type",        "model",        "in",   "out",      "input_length", "output_length",
    "hash_ids", "input_types", "output_types", "stop", "api_time", "think_time",   "ttft"};
const std::set<std::string> kSubagentFields = {
    "t",           "type",         "agent_id",       "subagent_type",
    "duration_ms", "total_tokens", "tool_use_count", "status",
    "models",      "tool_tokens",  "system_tokens",  "requests"};

bool IsSubagent(const json& j) { return j.contains("type") && j["type"] == "subagent"; }

// Reads one "n"/"s" request at `where`.
Status ReadRequest(const JsonField& f, const json& j, const std::string& where,
                   const TraceLimits& limits, uint32_t block_size, TraceRequest* r) {
  RETURN_IF_ERROR(f.CheckObject(j, where, kRequestFields));
  if (!j.contains("type")) return f.Error(where + ".type", "missing");
  const json& type = j["type"];
  if (type != "n" && type != "s") {
    return f.Error(where + ".type", "expected \"n\", \"s\" or \"subagent\", got " + type.dump());
  }
  ASSIGN_OR_RETURN(r->t_s, f.Time(j, where, "t", /*required=*/true));
  const bool has_in = j.contains("in"), has_il = j.contains("input_length");
  const bool has_out = j.contains("out"), has_ol = j.contains("output_length");
  if (has_in && has_il) return f.Error(where, "both 'in' and its alias 'input_length'");
  if (has_out && has_ol) return f.Error(where, "both 'out' and its alias 'output_length'");
  ASSIGN_OR_RETURN(r->input_tokens, f.Count(j, where, has_il ? "input_length" : "in", true,
                                            limits.max_tokens_per_request));
  ASSIGN_OR_RETURN(r->output_tokens, f.Count(j, where, has_ol ? "output_length" : "out", true,
                                             limits.max_tokens_per_request));
  RETURN_IF_ERROR(f.HashIds(j, where, r->input_tokens, has_il ? "input_length" : "in", block_size,
                            &r->hash_ids));
  ASSIGN_OR_RETURN(r->api_time_s, f.Time(j, where, "api_time", false));
  ASSIGN_OR_RETURN(r->think_time_s, f.Time(j, where, "think_time", false));
  if (j.contains("ttft")) {
    if (type != "s") return f.Error(where + ".ttft", "only a streaming (\"s\") request has one");
    RETURN_IF_ERROR(f.Time(j, where, "ttft", false).status());
  }
  for (const char* k : {"model", "stop"}) {
    if (j.contains(k) && !j[k].is_string()) return f.Error(where + "." + k, "expected a string");
  }
  for (const char* k : {"input_types", "output_types"}) {
    if (j.contains(k)) RETURN_IF_ERROR(f.StringList(j[k], where + "." + k));
  }
  r->line = f.line();
  return Status::Ok();
}

// Reads a subagent entry (its anchors are set later, from the root turns around it).
Status ReadSubagent(const JsonField& f, const json& j, const std::string& w,
                    const RecordLines& lines, size_t outer, const TraceLimits& limits,
                    const Trace& t, uint64_t* count, Conversation* c) {
  RETURN_IF_ERROR(f.CheckObject(j, w, kSubagentFields));
  ASSIGN_OR_RETURN(c->spawn_t_s, f.Time(j, w, "t", true));
  if (!j.contains("agent_id") || !j["agent_id"].is_string()) {
    return f.Error(w + ".agent_id", "expected a string");
  }
  for (const char* k : {"subagent_type", "status"}) {
    if (j.contains(k) && !j[k].is_string()) return f.Error(w + "." + k, "expected a string");
  }
  ASSIGN_OR_RETURN(c->duration_ms, f.Time(j, w, "duration_ms", false));
  for (const char* k : {"total_tokens", "tool_use_count"}) {
    if (j.contains(k) && !j[k].is_null()) RETURN_IF_ERROR(f.Time(j, w, k, false).status());
  }
  for (const char* k : {"tool_tokens", "system_tokens"}) {
    RETURN_IF_ERROR(f.Count(j, w, k, false, UINT64_MAX).status());
  }
  if (j.contains("models")) RETURN_IF_ERROR(f.StringList(j["models"], w + ".models"));
  c->id = t.id + "::sa:" + j["agent_id"].get<std::string>();
  if (!j.contains("requests")) return f.Error(w + ".requests", "missing");
  const json& list = j["requests"];
  if (!list.is_array()) return f.Error(w + ".requests", "expected an array");
  for (size_t k = 0; k < list.size(); ++k) {
    const std::string wk = w + ".requests[" + std::to_string(k) + "]";
    const JsonField fk(f.file(), lines.Inner(outer, k));
    if (++*count > limits.max_requests) {
      return fk.Error(wk, "more than " + std::to_string(limits.max_requests) + " requests");
    }
    if (list[k].is_object() && IsSubagent(list[k])) {
      return fk.Error(wk, "a subagent inside a subagent");
    }
    TraceRequest r;
    RETURN_IF_ERROR(ReadRequest(fk, list[k], wk, limits, t.block_size, &r));
    // Inner times are relative to the spawn in raw captures and absolute in published
    // corpora: a time earlier than the spawn is a relative one.
    if (r.t_s + kTimeEpsilon < c->spawn_t_s) r.t_s += c->spawn_t_s;
    c->turns.push_back(std::move(r));
  }
  return Status::Ok();
}

// When a subagent's recorded run ends: its duration, else the end of its last inner request.
double SubagentEnd(const Conversation& c) {
  if (c.duration_ms >= 0) return c.spawn_t_s + c.duration_ms / 1000.0;
  if (c.turns.empty()) return c.spawn_t_s;
  double end = -1;
  for (const TraceRequest& r : c.turns) end = std::max(end, r.t_s + std::max(0.0, r.api_time_s));
  return end;
}

json NumberJson(double v) {
  // Integral values are written as integers (aiperf reads duration_ms as an int).
  if (v == std::floor(v) && v < 9007199254740992.0) return static_cast<uint64_t>(v);
  return v;
}

}  // namespace

StatusOr<Trace> ParseWekaTrace(std::string_view text, std::string_view file,
                               const TraceLimits& limits, uint32_t first_line) {
  if (text.size() > limits.max_file_bytes) {
    return InvalidArgument(std::string(file) + ": larger than " +
                           std::to_string(limits.max_file_bytes) + " bytes");
  }
  ASSIGN_OR_RETURN(json j, ParseJsonText(text, file, first_line));
  const RecordLines lines = LocateWekaRecords(text, first_line);
  auto at = [&](const std::string& key) { return JsonField(file, lines.Key(key)); };
  // An unknown top-level key is reported on its own line.
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (kTraceFields.count(it.key()) == 0) {
        return at(it.key()).Error("trace", "unknown field '" + it.key() + "'");
      }
    }
  }
  RETURN_IF_ERROR(JsonField(file, first_line).CheckObject(j, "trace", kTraceFields));
  Trace t;
  t.file = std::string(file);
  t.format = TraceFormat::kWeka;
  if (!j.contains("id") || !j["id"].is_string()) {
    return at("id").Error("trace.id", "expected a string");
  }
  t.id = j["id"].get<std::string>();
  ASSIGN_OR_RETURN(uint64_t bs, at("block_size").Count(j, "trace", "block_size", true, 1u << 20));
  if (bs == 0) return at("block_size").Error("trace.block_size", "must be at least 1");
  t.block_size = static_cast<uint32_t>(bs);
  if (!j.contains("hash_id_scope") || j["hash_id_scope"] != "local") {
    return at("hash_id_scope")
        .Error("trace.hash_id_scope", "expected \"local\" (ids are scoped to the trace)");
  }
  ASSIGN_OR_RETURN(t.tool_tokens,
                   at("tool_tokens").Count(j, "trace", "tool_tokens", false, UINT64_MAX));
  ASSIGN_OR_RETURN(t.system_tokens,
                   at("system_tokens").Count(j, "trace", "system_tokens", false, UINT64_MAX));
  if (j.contains("models")) RETURN_IF_ERROR(at("models").StringList(j["models"], "trace.models"));
  if (j.contains("totals") && !j["totals"].is_null() && !j["totals"].is_object()) {
    return at("totals").Error("trace.totals", "expected an object");
  }
  if (!j.contains("requests")) return at("requests").Error("trace.requests", "missing");
  const json& list = j["requests"];
  if (!list.is_array()) return at("requests").Error("trace.requests", "expected an array");

  Conversation root;
  root.id = t.id;
  std::vector<Conversation> subagents;
  std::vector<size_t> root_turns_before;  // per subagent: root turns before it in the file
  uint64_t count = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string w = "trace.requests[" + std::to_string(i) + "]";
    const JsonField f(file, lines.Outer(i));
    const json& e = list[i];
    if (!e.is_object()) return f.Error(w, "expected an object");
    if (++count > limits.max_requests) {
      return f.Error(w, "more than " + std::to_string(limits.max_requests) + " requests");
    }
    if (IsSubagent(e)) {
      Conversation c;
      RETURN_IF_ERROR(ReadSubagent(f, e, w, lines, i, limits, t, &count, &c));
      subagents.push_back(std::move(c));
      root_turns_before.push_back(root.turns.size());
      continue;
    }
    TraceRequest r;
    RETURN_IF_ERROR(ReadRequest(f, e, w, limits, t.block_size, &r));
    if (!root.turns.empty() && r.t_s < root.turns.back().t_s) {
      return f.Error(w + ".t", "a root turn starts before the root turn before it");
    }
    root.turns.push_back(std::move(r));
  }
  // Anchors: spawned by the last root turn before the entry (none: dropped), joined by the
  // first later root turn that starts when the subagent has ended (none: background).
  // Room for every conversation first: `turns` lives in t.conversations, which must not move.
  t.conversations.reserve(1 + subagents.size());
  t.conversations.push_back(std::move(root));
  const std::vector<TraceRequest>& turns = t.conversations[0].turns;
  for (size_t s = 0; s < subagents.size(); ++s) {
    Conversation& sa = subagents[s];
    if (root_turns_before[s] == 0) continue;
    sa.spawn_after = static_cast<int32_t>(root_turns_before[s]) - 1;
    const double end = SubagentEnd(sa);
    sa.join_before = -1;
    for (size_t k = root_turns_before[s]; k < turns.size(); ++k) {
      if (turns[k].t_s + kTimeEpsilon >= end) {
        sa.join_before = static_cast<int32_t>(k);
        break;
      }
    }
    t.conversations.push_back(std::move(sa));
  }
  return t;
}

std::string WriteWekaTrace(const Trace& t) {
  auto req = [](const TraceRequest& r) {
    json j = {{"t", r.t_s},
              {"type", "n"},
              {"in", r.input_tokens},
              {"out", r.output_tokens},
              {"hash_ids", r.hash_ids}};
    if (r.api_time_s >= 0) j["api_time"] = r.api_time_s;
    if (r.think_time_s >= 0) j["think_time"] = r.think_time_s;
    return j;
  };
  json requests = json::array();
  const std::vector<TraceRequest> empty;
  const std::vector<TraceRequest>& root =
      t.conversations.empty() ? empty : t.conversations[0].turns;
  // Each subagent goes right after the root turn that spawns it; inner times are absolute.
  for (size_t i = 0; i <= root.size(); ++i) {
    if (i > 0) requests.push_back(req(root[i - 1]));
    for (size_t c = 1; c < t.conversations.size(); ++c) {
      const Conversation& sa = t.conversations[c];
      if (sa.spawn_after + 1 != static_cast<int32_t>(i)) continue;
      json inner = json::array();
      for (const TraceRequest& r : sa.turns) inner.push_back(req(r));
      const std::string prefix = t.id + "::sa:";
      std::string agent = sa.id.rfind(prefix, 0) == 0 ? sa.id.substr(prefix.size()) : sa.id;
      json e = {{"t", sa.spawn_t_s}, {"type", "subagent"}, {"agent_id", agent}};
      if (sa.duration_ms >= 0) e["duration_ms"] = NumberJson(sa.duration_ms);
      e["requests"] = std::move(inner);
      requests.push_back(std::move(e));
    }
  }
  json j = {{"id", t.id},
            {"block_size", t.block_size},
            {"hash_id_scope", "local"},
            {"tool_tokens", t.tool_tokens},
            {"system_tokens", t.system_tokens},
            {"requests", requests}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace deltakv::kvsim
