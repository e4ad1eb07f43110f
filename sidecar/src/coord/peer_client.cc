#include "coord/peer_client.h"

#include <httplib.h>

namespace deltakv::sidecar {

std::string PeerAnswer::Describe() const {
  std::string out = std::to_string(status);
  if (body.is_object() && body.contains("error") && body["error"].is_object()) {
    const nlohmann::json& e = body["error"];
    if (e.contains("code") && e["code"].is_string()) out += " " + e["code"].get<std::string>();
    if (e.contains("message") && e["message"].is_string()) {
      out += ": " + e["message"].get<std::string>();
    }
  }
  return out;
}

StatusOr<PeerAnswer> PeerClient::Prepare(const std::string& peer_url, const PeerPrepare& p) const {
  return Call(peer_url, "POST", "/v1/peer/prepare", PeerPrepareToJson(p));
}

StatusOr<PeerAnswer> PeerClient::SyncStatus(const std::string& peer_url,
                                            const std::string& sync_key) const {
  return Call(peer_url, "GET", "/v1/peer/status/" + UrlPathEscape(sync_key), "");
}

StatusOr<PeerAnswer> PeerClient::Decided(const std::string& peer_url,
                                         const std::string& sync_key) const {
  return Call(peer_url, "POST", "/v1/peer/decided", nlohmann::json{{"sync_key", sync_key}}.dump());
}

StatusOr<PeerAnswer> PeerClient::Call(const std::string& peer_url, const char* method,
                                      const std::string& path, const std::string& body) const {
  ASSIGN_OR_RETURN(PeerAddress addr, ParsePeerUrl(peer_url));
  httplib::Client client(addr.host, addr.port);
  client.set_connection_timeout(timeout_);
  client.set_read_timeout(timeout_);
  client.set_write_timeout(timeout_);
  client.set_keep_alive(false);
  httplib::Headers headers = {{"Authorization", "Bearer " + token_}};
  httplib::Result res = std::string(method) == "POST"
                            ? client.Post(path.c_str(), headers, body, "application/json")
                            : client.Get(path.c_str(), headers);
  if (!res) {
    return IoError(std::string("peer ") + peer_url + ": " + method + " " + path + ": " +
                   httplib::to_string(res.error()));
  }
  PeerAnswer a;
  a.status = res->status;
  a.body = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (a.body.is_discarded()) a.body = nullptr;
  return a;
}

}  // namespace deltakv::sidecar
