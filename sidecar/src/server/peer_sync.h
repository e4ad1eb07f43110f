// PeerSync: starts a multi-node sync from any one node (docs/MULTINODE.md, "Peer protocol").
//
// POST /v1/sync on a node of a group comes here. The node works out the sync key, queues the
// sync locally and claims syncs/<key>/coordinator in etcd (created once, on its lease). If the
// claim wins, the node is the sync's coordinator: one thread per other member sends it
// POST /v1/peer/prepare {sync_key, version, delta, attempt} at the peer URL the member
// advertises, retrying unanswered calls until the prepare timeout; a member that refuses (any
// 4xx), advertises no URL, or does not answer in time makes the coordinator write ABORT for the
// key (the decision key is created once, so this loses to a COMMIT already written). If another
// node holds the claim, this node just runs its part (a trainer that posts to every node).
// Every node then runs the sync as before: PREPARED and the decision go through etcd.
//
// Prepare is idempotent by sync key: a node that already has a record of the key answers with
// its state and starts nothing; a key the group already decided ABORT is refused (409).
//
// Thread-safety: every method may be called from any thread (HTTP handlers). The fan-out
// threads are joined by the destructor (each ends at its prepare timeout at the latest).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "coord/group_commit.h"
#include "coord/peer_client.h"
#include "sync/sync_manager.h"

namespace deltakv::sidecar {

struct PeerSyncOptions {
  std::string group_token;  // bearer token on calls to peers
  // One peer call (connect + answer); prepare calls are retried within the group's prepare
  // timeout.
  std::chrono::milliseconds call_timeout{2000};
  // Reading the members' states for the coordinator's record.
  std::chrono::milliseconds status_timeout{1000};
};

// What a node answers about one sync (GET /v1/peer/status/<key>, and prepare).
struct PeerSyncAnswer {
  int http_status = 200;
  nlohmann::json body;
};

class PeerSync {
 public:
  PeerSync(std::shared_ptr<GroupCommit> group, SyncManager* manager, PeerSyncOptions options);
  ~PeerSync();
  PeerSync(const PeerSync&) = delete;
  PeerSync& operator=(const PeerSync&) = delete;

  // POST /v1/sync: queues the sync here and, as its coordinator, fans it out. Returns
  // {"id", "state", "group": {"key", "coordinator"}}; the job's id is an existing one when this
  // node already has the key. Errors as SyncManager::Submit. Without a live version or etcd,
  // the sync is queued without a key (it fails at Admit, as before).
  StatusOr<nlohmann::json> StartSync(const std::string& version, const std::string& delta);
  // POST /v1/peer/prepare.
  PeerSyncAnswer Prepare(const PeerPrepare& p);
  // GET /v1/peer/status/<key>: 200 {"node", "sync_key", "id", "state"[, "error"]}, 404 when
  // this node has no record of the key.
  PeerSyncAnswer Status(const std::string& key) const;
  // POST /v1/peer/decided {"sync_key"}: the group's decision of the key is in etcd (sent by
  // the node whose write stood). Wakes this node's wait for it; 200 {"node", "sync_key"}
  // whether or not this node waits on the key (idempotent).
  PeerSyncAnswer Decided(const std::string& key);
  // Whether this node coordinates `key` (its claim won).
  bool Coordinates(const std::string& key) const;
  // {node: state} for every member: this node's from its record, the others' from their peer
  // status ("none": no record of the key, "unreachable": no answer, "refused": 4xx).
  nlohmann::json MembersJson(const std::string& key) const;
  // No more fan-outs; running ones stop at their next retry.
  void BeginShutdown() { stopping_.store(true); }

 private:
  void FanOut(const PeerPrepare& p);
  void PrepareMember(const PeerPrepare& p, const std::string& member,
                     std::chrono::steady_clock::time_point deadline);

  std::shared_ptr<GroupCommit> group_;
  SyncManager* manager_;
  PeerSyncOptions options_;
  PeerClient client_;
  PeerClient status_client_;
  std::mutex submit_mu_;  // one find-or-submit at a time
  mutable std::mutex mu_;
  std::set<std::string> coordinated_;  // GUARDED_BY(mu_)
  std::vector<std::thread> fan_outs_;  // GUARDED_BY(mu_)
  std::atomic<bool> stopping_{false};
};

}  // namespace deltakv::sidecar
