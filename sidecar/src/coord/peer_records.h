// The peer protocol's messages and the etcd records it adds (docs/MULTINODE.md, "Peer
// protocol"): the body of POST /v1/peer/prepare, a member's record with its peer URL, and the
// coordinator claim of one sync key.
//
// Parse functions take untrusted text (an HTTP body, an etcd value) and return InvalidArgument
// (requests) or DataLoss (etcd records) with a message naming the message and the field for text
// that is not a JSON object or a required field that is missing, mistyped or out of range.
// Values, no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace deltakv::sidecar {

// POST /v1/peer/prepare: the coordinator asks a member to run the sync `sync_key`
// ("syncs/<version>@<parent>#<attempt>", as GroupCommit::SyncKey returns it) moving to
// `version` with the delta at `delta`. Required: all four; `attempt` must be the key's suffix.
struct PeerPrepare {
  std::string sync_key;
  std::string version;
  std::string delta;
  int64_t attempt = 0;
};
std::string PeerPrepareToJson(const PeerPrepare& p);
StatusOr<PeerPrepare> ParsePeerPrepare(std::string_view text);

// The attempt number a sync key ends with ("...#3" -> 3); InvalidArgument for a key that is not
// "syncs/<version>@<parent>#<attempt>" with a decimal attempt.
StatusOr<int64_t> SyncKeyAttempt(std::string_view sync_key);

// members/<node>: {"node", "pid", "started_unix"[, "peer_url"]}. Required: "node"; "peer_url"
// is absent (or "") for a node that advertises none.
struct MemberRecord {
  std::string node;
  int64_t pid = 0;
  double started_unix = 0;
  std::string peer_url;
};
std::string MemberToJson(const MemberRecord& m);
StatusOr<MemberRecord> ParseMember(std::string_view text);

// syncs/<key>/coordinator: {"node", "peer_url", "unix"}, created once, on the claimer's lease.
// Required: "node".
struct CoordinatorRecord {
  std::string node;
  std::string peer_url;
  double unix = 0;
};
std::string CoordinatorToJson(const CoordinatorRecord& c);
StatusOr<CoordinatorRecord> ParseCoordinator(std::string_view text);

// A peer URL: "http://host:port" (no path, port 1..65535; an IPv6 host in brackets, returned
// without them). InvalidArgument otherwise (https is refused: peers have no TLS settings yet).
struct PeerAddress {
  std::string host;
  int port = 0;
};
StatusOr<PeerAddress> ParsePeerUrl(std::string_view url);

// Percent-encodes every byte but [A-Za-z0-9._~-], so a sync key can be one URL path element.
std::string UrlPathEscape(std::string_view s);

}  // namespace deltakv::sidecar
