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

const std::set<std::string> kTraceFields = {"id",          "models",        "block_size",
                                            "hash_id_scope", "tool_tokens", "system_tokens",
                                            "requests",    "totals"};
const std::set<std::string> kRequestFields = {
    "t",           "type",         "model", "in",       "out",        "input_length",
    "output_length", "hash_ids",   "input_types", "output_types", "stop", "api_time",
    "think_time",  "ttft"};
const std::set<std::string> kSubagentFields = {
    "t",      "type",          "agent_id", "subagent_type", "duration_ms", "total_tokens",
    "tool_use_count", "status", "models",  "tool_tokens",   "system_tokens", "requests"};

// Reads one "n"/"s" request at `where`.
Status ReadRequest(const JsonField& f, const json& j, const std::string& where,
                   const TraceLimits& limits, TraceRequest* r) {
  RETURN_IF_ERROR(f.CheckObject(j, where, kRequestFields));
  const std::string type = j.contains("type") ? (j["type"].is_string() ? j["type"].get<std::string>()
                                                                       : std::string("?"))
                                              : std::string("");
  if (type != "n" && type != "s") {
    return f.Error(where + ".type", "expected \"n\", \"s\" or \"subagent\"");
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
  RETURN_IF_ERROR(f.HashIds(j, where, &r->hash_ids));
  ASSIGN_OR_RETURN(r->api_time_s, f.Time(j, where, "api_time", false));
  ASSIGN_OR_RETURN(r->think_time_s, f.Time(j, where, "think_time", false));
  if (j.contains("ttft")) RETURN_IF_ERROR(f.Time(j, where, "ttft", false).status());
  for (const char* k : {"model", "stop"}) {
    if (j.contains(k) && !j[k].is_string()) return f.Error(where + "." + k, "expected a string");
  }
  for (const char* k : {"input_types", "output_types"}) {
    if (j.contains(k)) RETURN_IF_ERROR(f.StringList(j[k], where + "." + k));
  }
  r->line = f.line();
  return Status::Ok();
}

Status ReadRequests(const JsonField& f, const json& list, const std::string& where,
                    const TraceLimits& limits, uint64_t* count, Trace* trace,
                    std::vector<TraceRequest>* root, bool allow_subagents, double spawn_t,
                    const std::string& trace_id) {
  if (!list.is_array()) return f.Error(where, "expected an array");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    const json& j = list[i];
    if (!j.is_object()) return f.Error(w, "expected an object");
    if (++*count > limits.max_requests) {
      return f.Error(w, "more than " + std::to_string(limits.max_requests) + " requests");
    }
    if (j.contains("type") && j["type"] == "subagent") {
      if (!allow_subagents) return f.Error(w, "a subagent inside a subagent");
      RETURN_IF_ERROR(f.CheckObject(j, w, kSubagentFields));
      Conversation c;
      ASSIGN_OR_RETURN(c.spawn_t_s, f.Time(j, w, "t", true));
      if (!j.contains("agent_id") || !j["agent_id"].is_string()) {
        return f.Error(w + ".agent_id", "expected a string");
      }
      for (const char* k : {"subagent_type", "status"}) {
        if (j.contains(k) && !j[k].is_string()) return f.Error(w + "." + k, "expected a string");
      }
      for (const char* k : {"duration_ms", "total_tokens", "tool_use_count"}) {
        if (j.contains(k) && !j[k].is_null()) RETURN_IF_ERROR(f.Time(j, w, k, false).status());
      }
      for (const char* k : {"tool_tokens", "system_tokens"}) {
        RETURN_IF_ERROR(f.Count(j, w, k, false, UINT64_MAX).status());
      }
      if (j.contains("models")) RETURN_IF_ERROR(f.StringList(j["models"], w + ".models"));
      c.id = trace_id + "::sa:" + j["agent_id"].get<std::string>();
      if (!j.contains("requests")) return f.Error(w + ".requests", "missing");
      RETURN_IF_ERROR(ReadRequests(f, j["requests"], w + ".requests", limits, count, trace,
                                   &c.turns, false, c.spawn_t_s, trace_id));
      // Inner times are relative to the spawn in raw captures and absolute in published
      // corpora; a first inner time earlier than the spawn marks relative ones.
      if (!c.turns.empty() && c.turns.front().t_s < c.spawn_t_s) {
        for (TraceRequest& r : c.turns) r.t_s += c.spawn_t_s;
      }
      // Anchors: the last root turn at or before the spawn, and the next one.
      c.spawn_after = static_cast<int32_t>(root->size()) - 1;
      c.join_before = -1;  // set once the following root turn is read
      trace->conversations.push_back(std::move(c));
      continue;
    }
    TraceRequest r;
    RETURN_IF_ERROR(ReadRequest(f, j, w, limits, &r));
    (void)spawn_t;
    root->push_back(std::move(r));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<Trace> ParseWekaTrace(std::string_view text, std::string_view file,
                               const TraceLimits& limits, uint32_t first_line) {
  if (text.size() > limits.max_file_bytes) {
    return InvalidArgument(std::string(file) + ": larger than " +
                           std::to_string(limits.max_file_bytes) + " bytes");
  }
  ASSIGN_OR_RETURN(json j, ParseJsonText(text, file, first_line));
  JsonField f(file, first_line);
  RETURN_IF_ERROR(f.CheckObject(j, "trace", kTraceFields));
  Trace t;
  t.file = std::string(file);
  t.format = TraceFormat::kWeka;
  if (!j.contains("id") || !j["id"].is_string()) return f.Error("trace.id", "expected a string");
  t.id = j["id"].get<std::string>();
  ASSIGN_OR_RETURN(uint64_t bs, f.Count(j, "trace", "block_size", true, 1u << 20));
  if (bs == 0) return f.Error("trace.block_size", "must be at least 1");
  t.block_size = static_cast<uint32_t>(bs);
  if (!j.contains("hash_id_scope") || j["hash_id_scope"] != "local") {
    return f.Error("trace.hash_id_scope", "expected \"local\" (ids are scoped to the trace)");
  }
  ASSIGN_OR_RETURN(t.tool_tokens, f.Count(j, "trace", "tool_tokens", false, UINT64_MAX));
  ASSIGN_OR_RETURN(t.system_tokens, f.Count(j, "trace", "system_tokens", false, UINT64_MAX));
  if (j.contains("models")) RETURN_IF_ERROR(f.StringList(j["models"], "trace.models"));
  if (j.contains("totals") && !j["totals"].is_object()) {
    return f.Error("trace.totals", "expected an object");
  }
  if (!j.contains("requests")) return f.Error("trace.requests", "missing");
  Conversation root;
  root.id = t.id;
  t.conversations.push_back(Conversation{});  // the root, filled below
  uint64_t count = 0;
  RETURN_IF_ERROR(ReadRequests(f, j["requests"], "trace.requests", limits, &count, &t,
                               &root.turns, true, 0, t.id));
  // Root turns are in time order.
  for (size_t i = 1; i < root.turns.size(); ++i) {
    if (root.turns[i].t_s < root.turns[i - 1].t_s) {
      return f.Error("trace.requests", "root turn " + std::to_string(i) +
                                           " starts before the turn before it");
    }
  }
  // A subagent joins the root turn after its spawn turn; one without a preceding turn is
  // dropped (nothing spawns it).
  std::vector<Conversation> kept;
  kept.push_back(std::move(root));
  for (size_t c = 1; c < t.conversations.size(); ++c) {
    Conversation& sa = t.conversations[c];
    if (sa.spawn_after < 0) continue;
    const size_t next = static_cast<size_t>(sa.spawn_after) + 1;
    sa.join_before = next < kept[0].turns.size() ? static_cast<int32_t>(next) : -1;
    kept.push_back(std::move(sa));
  }
  t.conversations = std::move(kept);
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
  const std::vector<TraceRequest>& root = t.conversations.empty() ? empty : t.conversations[0].turns;
  for (size_t i = 0; i <= root.size(); ++i) {
    if (i > 0) requests.push_back(req(root[i - 1]));
    for (size_t c = 1; c < t.conversations.size(); ++c) {
      const Conversation& sa = t.conversations[c];
      if (sa.spawn_after + 1 != static_cast<int32_t>(i)) continue;
      json inner = json::array();
      for (const TraceRequest& r : sa.turns) inner.push_back(req(r));
      const std::string prefix = t.id + "::sa:";
      std::string agent = sa.id.rfind(prefix, 0) == 0 ? sa.id.substr(prefix.size()) : sa.id;
      requests.push_back({{"t", sa.spawn_t_s},
                          {"type", "subagent"},
                          {"agent_id", agent},
                          {"requests", inner}});
    }
  }
  json j = {{"id", t.id},
            {"block_size", t.block_size},
            {"hash_id_scope", "local"},
            {"tool_tokens", t.tool_tokens},
            {"system_tokens", t.system_tokens},
            {"requests", requests}};
  return j.dump();
}

}  // namespace deltakv::kvsim
