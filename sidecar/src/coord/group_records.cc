#include "coord/group_records.h"

#include <algorithm>

#include "log/log.h"

namespace deltakv::sidecar {
namespace {

using nlohmann::json;

StatusOr<json> ParseObject(std::string_view text, const char* what) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return DataLoss(std::string(what) + " record is not a JSON object: " +
                    std::string(text.substr(0, 200)));
  }
  return j;
}

StatusOr<std::string> RequiredString(const json& j, const char* what, const char* field) {
  if (!j.contains(field) || !j[field].is_string()) {
    return DataLoss(std::string(what) + " record: '" + field + "' is missing or not a string");
  }
  return j[field].get<std::string>();
}

// An optional field of the given kind; DataLoss if present with another type.
Status OptionalString(const json& j, const char* what, const char* field, std::string& out) {
  if (!j.contains(field)) return Status::Ok();
  if (!j[field].is_string()) {
    return DataLoss(std::string(what) + " record: '" + field + "' is not a string");
  }
  out = j[field].get<std::string>();
  return Status::Ok();
}

Status OptionalNumber(const json& j, const char* what, const char* field, double& out) {
  if (!j.contains(field)) return Status::Ok();
  if (!j[field].is_number()) {
    return DataLoss(std::string(what) + " record: '" + field + "' is not a number");
  }
  out = j[field].get<double>();
  return Status::Ok();
}

StatusOr<int64_t> Int64Field(const json& j, const char* what, const char* field, bool required) {
  if (!j.contains(field)) {
    if (required) return DataLoss(std::string(what) + " record: '" + field + "' is missing");
    return int64_t{0};
  }
  if (!j[field].is_number_integer() || j[field].get<int64_t>() < 0) {
    return DataLoss(std::string(what) + " record: '" + field +
                    "' is not a non-negative integer: " + j[field].dump());
  }
  return j[field].get<int64_t>();
}

}  // namespace

std::string DecisionToJson(const GroupDecision& d) {
  json j = {{"decision", d.commit ? "commit" : "abort"}, {"by", d.by}, {"unix", d.unix}};
  if (!d.reason.empty()) j["reason"] = d.reason;
  if (d.commit) {
    j["version"] = d.version;
    j["parent"] = d.parent;
    j["delta"] = d.delta;
    j["commit_at_unix_ns"] = d.commit_at_unix_ns;
  }
  return log::JsonText(j);
}

StatusOr<GroupDecision> ParseDecision(std::string_view text) {
  const char* what = "group decision";
  ASSIGN_OR_RETURN(json j, ParseObject(text, what));
  ASSIGN_OR_RETURN(std::string d, RequiredString(j, what, "decision"));
  if (d != "commit" && d != "abort") return DataLoss("group decision '" + d + "' is unknown");
  GroupDecision out;
  out.commit = d == "commit";
  RETURN_IF_ERROR(OptionalString(j, what, "by", out.by));
  RETURN_IF_ERROR(OptionalString(j, what, "reason", out.reason));
  RETURN_IF_ERROR(OptionalNumber(j, what, "unix", out.unix));
  RETURN_IF_ERROR(OptionalString(j, what, "version", out.version));
  RETURN_IF_ERROR(OptionalString(j, what, "parent", out.parent));
  RETURN_IF_ERROR(OptionalString(j, what, "delta", out.delta));
  ASSIGN_OR_RETURN(out.commit_at_unix_ns, Int64Field(j, what, "commit_at_unix_ns", false));
  return out;
}

std::string LatestToJson(const LatestCommit& l) {
  return log::JsonText(json{{"key", l.key},
                            {"version", l.version},
                            {"parent", l.parent},
                            {"delta", l.delta},
                            {"unix", l.unix}});
}

StatusOr<LatestCommit> ParseLatest(std::string_view text) {
  const char* what = "group latest-commit";
  ASSIGN_OR_RETURN(json j, ParseObject(text, what));
  LatestCommit out;
  ASSIGN_OR_RETURN(out.key, RequiredString(j, what, "key"));
  ASSIGN_OR_RETURN(out.version, RequiredString(j, what, "version"));
  ASSIGN_OR_RETURN(out.parent, RequiredString(j, what, "parent"));
  ASSIGN_OR_RETURN(out.delta, RequiredString(j, what, "delta"));
  RETURN_IF_ERROR(OptionalNumber(j, what, "unix", out.unix));
  if (out.key.empty() || out.version.empty() || out.delta.empty()) {
    return DataLoss("group latest-commit record: 'key', 'version' and 'delta' must not be empty");
  }
  return out;
}

json NodePauseJson(const NodePause& p) {
  return {{"node", p.node},
          {"pause_start_ns", p.pause_start_ns},
          {"resume_ns", p.resume_ns},
          {"pause_ms", p.pause_ms}};
}

StatusOr<NodePause> ParseNodePause(std::string_view text) {
  const char* what = "node pause";
  ASSIGN_OR_RETURN(json j, ParseObject(text, what));
  NodePause p;
  ASSIGN_OR_RETURN(p.node, RequiredString(j, what, "node"));
  ASSIGN_OR_RETURN(p.pause_start_ns, Int64Field(j, what, "pause_start_ns", true));
  ASSIGN_OR_RETURN(p.resume_ns, Int64Field(j, what, "resume_ns", true));
  if (!j.contains("pause_ms") || !j["pause_ms"].is_number() || j["pause_ms"].get<double>() < 0) {
    return DataLoss("node pause record: 'pause_ms' is missing or not a number >= 0");
  }
  p.pause_ms = j["pause_ms"].get<double>();
  if (p.pause_start_ns == 0 || p.resume_ns < p.pause_start_ns) {
    return DataLoss("node pause record of '" + p.node + "': resume_ns " +
                    std::to_string(p.resume_ns) + " is not at or after pause_start_ns " +
                    std::to_string(p.pause_start_ns) + " > 0");
  }
  return p;
}

double GroupPauseView::resume_skew_ms() const {
  if (nodes.size() < 2) return 0;
  auto [lo, hi] = std::minmax_element(
      nodes.begin(), nodes.end(),
      [](const NodePause& a, const NodePause& b) { return a.resume_ns < b.resume_ns; });
  return static_cast<double>(hi->resume_ns - lo->resume_ns) / 1e6;
}

json GroupPauseView::ToJson() const {
  json pauses = json::object();
  for (const NodePause& p : nodes) pauses[p.node] = NodePauseJson(p);
  return {{"nodes", pauses},
          {"reported", nodes.size()},
          {"missing", missing},
          {"resume_skew_ms", resume_skew_ms()}};
}

GroupPauseView MakePauseView(const std::vector<std::string>& members,
                             const std::vector<NodePause>& found) {
  GroupPauseView v;
  for (const std::string& m : members) {
    auto it = std::find_if(found.begin(), found.end(),
                           [&](const NodePause& p) { return p.node == m; });
    if (it == found.end()) {
      v.missing.push_back(m);
    } else {
      v.nodes.push_back(*it);
    }
  }
  return v;
}

}  // namespace deltakv::sidecar
