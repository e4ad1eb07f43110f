// PeerClient: the calls one sidecar makes to another's peer API (docs/MULTINODE.md, "Peer
// protocol"), over plain HTTP with the group's bearer token.
//
// A call returns the peer's answer whatever its HTTP status (the caller decides what a 4xx
// means); IoError when the peer cannot be reached or does not answer within the timeout
// (connect, send and receive each), InvalidArgument for a URL that is not http://host:port.
// Nothing is retried here. Stateless apart from its options; thread-safe.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "coord/peer_records.h"

namespace deltakv::sidecar {

struct PeerAnswer {
  int status = 0;       // HTTP status
  nlohmann::json body;  // parsed JSON body (null when the body is not JSON)
  // "404 NOT_FOUND: no sync ..." from an error body, for messages.
  std::string Describe() const;
};

class PeerClient {
 public:
  PeerClient(std::string token, std::chrono::milliseconds timeout)
      : token_(std::move(token)), timeout_(timeout) {}

  // POST /v1/peer/prepare with `p`.
  StatusOr<PeerAnswer> Prepare(const std::string& peer_url, const PeerPrepare& p) const;
  // GET /v1/peer/status/<sync key>.
  StatusOr<PeerAnswer> SyncStatus(const std::string& peer_url, const std::string& sync_key) const;
  // POST /v1/peer/decided {"sync_key"}: the group's decision of the key is in etcd.
  StatusOr<PeerAnswer> Decided(const std::string& peer_url, const std::string& sync_key) const;

 private:
  StatusOr<PeerAnswer> Call(const std::string& peer_url, const char* method,
                            const std::string& path, const std::string& body) const;

  std::string token_;
  std::chrono::milliseconds timeout_;
};

}  // namespace deltakv::sidecar
