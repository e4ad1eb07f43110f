#include "coord/peer_records.h"

#include <nlohmann/json.hpp>

#include "base/host_port.h"
#include "base/percent_encode.h"
#include "log/log.h"

namespace deltakv::sidecar {
namespace {

using nlohmann::json;

StatusOr<json> ParseObject(std::string_view text, const char* what, bool request) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    std::string msg = std::string(what) + " is not a JSON object";
    if (!request) msg += ": " + std::string(text.substr(0, 200));
    return request ? InvalidArgument(msg) : DataLoss(msg);
  }
  return j;
}

Status FieldError(bool request, const std::string& msg) {
  return request ? InvalidArgument(msg) : DataLoss(msg);
}

StatusOr<std::string> StringField(const json& j, const char* what, const char* field, bool required,
                                  bool request) {
  if (!j.contains(field)) {
    if (required) return FieldError(request, std::string(what) + ": '" + field + "' is missing");
    return std::string();
  }
  if (!j[field].is_string()) {
    return FieldError(request, std::string(what) + ": '" + field + "' is not a string");
  }
  return j[field].get<std::string>();
}

bool AllDigits(std::string_view s) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace

std::string PeerPrepareToJson(const PeerPrepare& p) {
  return log::JsonText(json{{"sync_key", p.sync_key},
                            {"version", p.version},
                            {"delta", p.delta},
                            {"attempt", p.attempt}});
}

StatusOr<int64_t> SyncKeyAttempt(std::string_view key) {
  const size_t hash = key.rfind('#');
  const size_t at = key.find('@');
  if (key.rfind("syncs/", 0) != 0 || hash == std::string_view::npos ||
      at == std::string_view::npos || at < 7 || at > hash || !AllDigits(key.substr(hash + 1))) {
    return InvalidArgument("sync key '" + std::string(key.substr(0, 200)) +
                           "' is not syncs/<version>@<parent>#<attempt>");
  }
  return static_cast<int64_t>(std::stoll(std::string(key.substr(hash + 1))));
}

StatusOr<PeerPrepare> ParsePeerPrepare(std::string_view text) {
  const char* what = "peer prepare";
  ASSIGN_OR_RETURN(json j, ParseObject(text, what, true));
  PeerPrepare p;
  ASSIGN_OR_RETURN(p.sync_key, StringField(j, what, "sync_key", true, true));
  ASSIGN_OR_RETURN(p.version, StringField(j, what, "version", true, true));
  ASSIGN_OR_RETURN(p.delta, StringField(j, what, "delta", true, true));
  for (const auto* f : {&p.sync_key, &p.version, &p.delta}) {
    if (f->empty()) return InvalidArgument("peer prepare: empty 'sync_key', 'version' or 'delta'");
  }
  if (!j.contains("attempt")) return InvalidArgument("peer prepare: 'attempt' is missing");
  if (!j["attempt"].is_number_integer() || j["attempt"].get<int64_t>() < 0) {
    return InvalidArgument("peer prepare: 'attempt' is not a non-negative integer: " +
                           j["attempt"].dump());
  }
  p.attempt = j["attempt"].get<int64_t>();
  ASSIGN_OR_RETURN(int64_t key_attempt, SyncKeyAttempt(p.sync_key));
  if (key_attempt != p.attempt) {
    return InvalidArgument("peer prepare: 'attempt' " + std::to_string(p.attempt) +
                           " is not the sync key's (" + std::to_string(key_attempt) + ")");
  }
  return p;
}

std::string MemberToJson(const MemberRecord& m) {
  json j = {{"node", m.node}, {"pid", m.pid}, {"started_unix", m.started_unix}};
  if (!m.peer_url.empty()) j["peer_url"] = m.peer_url;
  return log::JsonText(j);
}

StatusOr<MemberRecord> ParseMember(std::string_view text) {
  const char* what = "member record";
  ASSIGN_OR_RETURN(json j, ParseObject(text, what, false));
  MemberRecord m;
  ASSIGN_OR_RETURN(m.node, StringField(j, what, "node", true, false));
  ASSIGN_OR_RETURN(m.peer_url, StringField(j, what, "peer_url", false, false));
  if (j.contains("pid") && j["pid"].is_number_integer()) m.pid = j["pid"].get<int64_t>();
  if (j.contains("started_unix") && j["started_unix"].is_number()) {
    m.started_unix = j["started_unix"].get<double>();
  }
  return m;
}

std::string CoordinatorToJson(const CoordinatorRecord& c) {
  return log::JsonText(json{{"node", c.node}, {"peer_url", c.peer_url}, {"unix", c.unix}});
}

StatusOr<CoordinatorRecord> ParseCoordinator(std::string_view text) {
  const char* what = "coordinator record";
  ASSIGN_OR_RETURN(json j, ParseObject(text, what, false));
  CoordinatorRecord c;
  ASSIGN_OR_RETURN(c.node, StringField(j, what, "node", true, false));
  ASSIGN_OR_RETURN(c.peer_url, StringField(j, what, "peer_url", false, false));
  if (j.contains("unix") && j["unix"].is_number()) c.unix = j["unix"].get<double>();
  return c;
}

StatusOr<PeerAddress> ParsePeerUrl(std::string_view url) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument("peer URL '" + std::string(url.substr(0, 200)) +
                           "' must be http://host:port (" + why + ")");
  };
  const std::string_view scheme = "http://";
  if (url.rfind(scheme, 0) != 0) return bad("scheme");
  std::string_view rest = url.substr(scheme.size());
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return bad("no host or port");
  PeerAddress a;
  a.host = std::string(rest.substr(0, colon));
  if (!UnbracketHost(a.host)) return bad("brackets");  // the socket layer takes "::1"
  if (a.host.find('/') != std::string::npos || a.host.find('@') != std::string::npos) {
    return bad("a path or user info");
  }
  const std::string_view port = rest.substr(colon + 1);
  if (!AllDigits(port) || port.size() > 5) return bad("port");
  a.port = std::stoi(std::string(port));
  if (a.port < 1 || a.port > 65535) return bad("port out of range");
  return a;
}

std::string UrlPathEscape(std::string_view s) {
  return PercentEncode(s);
}

}  // namespace deltakv::sidecar
