// GroupCommit: the nodes of one model group (each a sidecar with its engine ranks) flip to a
// new version together or not at all. The decision lives in etcd; no delta byte goes there.
//
// Keys, under <prefix>/<group>/ (docs/MULTINODE.md):
//   members/<node>                      {"node", "pid", "started_unix"[, "peer_url"]}, on the
//                                       node's lease
//   syncs/<sync key>/coordinator        {"node", "peer_url", "unix"}: the node that fans the sync
//                                       out to its peers, created once, on its lease
//   syncs/<sync key>/prepared/<node>    {"node", "version", "parent", "delta", "sync_id"}, on
//                                       the lease
//   syncs/<sync key>/decision           {"decision": "commit"|"abort", "by", "reason"; COMMIT:
//                                       "version", "parent", "delta", "commit_at_unix_ns"}
//   syncs/<sync key>/resumed/<node>     {"node", "pause_start_ns", "resume_ns", "pause_ms"}, on
//                                       the lease
//   latest                              {"key", "version", "parent", "delta"}: the last COMMIT,
//                                       written in the decision's transaction
// (coord/group_records.h has the records and their parsing.)
// A sync key is "<version>@<parent>#<attempt>" (escaped): every node asked to move the group
// from `parent` to `version` meets under it; an aborted attempt moves the next request to
// attempt + 1, and a committed one is joined by a node that comes late.
//
// The decision key is created once (an etcd transaction on create_revision == 0), so the first
// writer wins and COMMIT and ABORT exclude each other. COMMIT is written only in a transaction
// that also requires every member's PREPARED key, and only before the writer's prepare
// deadline; any node that fails before its own PREPARED, or reaches the deadline without
// every member PREPARED, writes ABORT. PREPARED keys are on the node's lease, so a node that
// dies before the decision takes its PREPARED with it and the group cannot commit without it.
// A lease outlives a killed process by up to its TTL, so a node about to write COMMIT first
// asks every other member that advertises a peer URL for its state of the sync
// (GET /v1/peer/status/<key>): a member that does not answer, has no record of the key, or is
// not holding the staged plan ("staged", "committing" or "live") makes it write ABORT instead.
// A node acts on a decision only after reading it from etcd: the COMMIT is durable before any
// node writes a byte. A node that loses etcd while it waits keeps its staged plan and retries
// until in_doubt_timeout past the deadline; then it drops the plan, reports that the group's
// decision is unknown and keeps the key as in doubt: ResolveInDoubt, once etcd answers, writes
// ABORT unless a decision stands, so a later COMMIT cannot count the PREPARED it left behind,
// and a COMMIT that stood is then joined by the catch-up (sync/group_convergence.h).
// A node that is shutting down (BeginShutdown) writes ABORT for the sync it waits on, unless
// a decision stands.
// Waiting nodes re-read the decision every decision_poll; the node whose write of a decision
// stood also tells every other member that advertises a peer URL (POST /v1/peer/decided, from
// a background thread, best effort), and Notice wakes a waiting node at once to read it.
//
// Commit point: a COMMIT carries commit_at_unix_ns = its writer's wall clock + commit_margin;
// every node starts its pause then, never waiting longer than commit_margin (clocks are
// assumed synchronized by NTP or PTP). After its commit each node publishes its pause times,
// and reads the others' for at most report_timeout, not waiting for members that are gone.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/status.h"
#include "coord/etcd_client.h"
#include "coord/group_records.h"
#include "coord/peer_client.h"
#include "coord/peer_records.h"
#include "coord/topology.h"

namespace deltakv::sidecar {

struct GroupOptions {
  std::string group;                 // the model group's name
  std::string node;                  // this sidecar's name in it
  std::vector<std::string> members;  // every node of the group, this one included
  EtcdOptions etcd;
  std::string prefix = "/deltakv";
  std::chrono::milliseconds prepare_timeout{60000};   // PREPARED from all, else ABORT
  std::chrono::milliseconds in_doubt_timeout{30000};  // etcd unreachable past the deadline
  int64_t lease_ttl_s = 10;                           // membership liveness
  std::chrono::milliseconds commit_margin{50};        // decision -> common commit point
  std::chrono::milliseconds report_timeout{2000};     // waiting for the others' pause times
  // Which global ranks each node serves (validated against `members`); none: every node
  // serves a whole replica of the model.
  std::optional<Topology> topology;
  // Where the other sidecars reach this one's peer API ("http://host:port"; "" = nowhere yet,
  // see SetPeerUrl). Advertised in the membership record.
  std::string peer_url;
  // Bearer token and per-call timeout for the members' peer status, asked before COMMIT.
  std::string peer_token;
  std::chrono::milliseconds peer_check_timeout{1000};
  // How often a node waiting for the decision re-reads it (a peer's notice wakes it at once).
  std::chrono::milliseconds decision_poll{100};
};

class GroupCommit {
 public:
  // Checks the options, joins the group (membership key on a lease kept alive by a thread).
  // InvalidArgument for bad options (this node not among the members, a name with '/'),
  // IoError when etcd does not answer.
  static StatusOr<std::unique_ptr<GroupCommit>> Create(GroupOptions options);
  ~GroupCommit();

  const GroupOptions& options() const { return options_; }

  // The sync key a request from `parent` to `version` meets under now: the first attempt
  // whose decision is absent or COMMIT.
  StatusOr<std::string> SyncKey(const std::string& version, const std::string& parent);
  // Records this node PREPARED for `key` and waits for the group's decision (written by
  // whichever node gets there first, this one included). IoError if etcd stayed unreachable
  // past the deadline and in_doubt_timeout: the decision is unknown.
  // A COMMIT written here records version, parent and delta, the commit point, and moves
  // `latest` to this key in the same transaction.
  // `fields` (if not null, a JSON object) adds its members to this node's PREPARED record
  // ("partial": the sums of the tensors this node holds only part of; "held": which of the
  // delta's tensors a pipeline-stage node holds). A node about to write COMMIT first calls
  // check_records with every member's PREPARED record (null for one that does not parse),
  // then CheckPeersHold; if either fails, the node writes ABORT with its message instead.
  using RecordCheck = std::function<Status(const std::vector<nlohmann::json>& records)>;
  StatusOr<GroupDecision> PrepareAndAwait(const std::string& key, const std::string& version,
                                          const std::string& parent, const std::string& delta,
                                          uint64_t sync_id, const nlohmann::json& fields = nullptr,
                                          const RecordCheck& check_records = nullptr);
  // Writes ABORT for `key` unless a decision stands; returns the decision that stands.
  StatusOr<GroupDecision> Abort(const std::string& key, const std::string& reason);
  // OK when every other live member that advertises a peer URL answers that it holds the
  // staged plan of `key`; FailedPrecondition naming the first that does not (no answer within
  // peer_check_timeout, no record of the key, or another state). IoError if etcd does not
  // answer. Members without a peer URL are not asked (their lease alone stands for them).
  Status CheckPeersHold(const std::string& key);
  // Keys whose decision this node gave up waiting for (PrepareAndAwait's IoError) and has not
  // learnt since.
  std::vector<std::string> InDoubt() const;
  // For each key in doubt: writes ABORT unless a decision stands, and forgets the key once a
  // decision is known. IoError (keys kept) while etcd does not answer.
  Status ResolveInDoubt();
  // From now on, PrepareAndAwait writes ABORT (unless a decision stands) instead of waiting.
  void BeginShutdown();
  // A peer says the decision of `key` is in etcd: a PrepareAndAwait waiting on it reads it now.
  void Notice(const std::string& key);
  // The decision of `key`, if any.
  StatusOr<std::optional<GroupDecision>> Decision(const std::string& key);
  // Members whose membership key exists now (alive), in member order.
  StatusOr<std::vector<std::string>> LiveMembers();

  // Publishes this node's pause for the committed `key` (on its lease).
  Status PublishPause(const std::string& key, const NodePause& pause);
  // The members' pauses for `key`: waits until every member has published, or those that have
  // not are gone (no membership key), or report_timeout has passed, whichever comes first.
  // Records that do not parse are left out (the node counts as missing). IoError if etcd does
  // not answer at all.
  StatusOr<GroupPauseView> AwaitPauses(const std::string& key);
  // The group's most recent COMMIT (nullopt if none was recorded); DataLoss for a bad record.
  StatusOr<std::optional<LatestCommit>> Latest();

  // Peer protocol (coord/peer_records.h).
  // Advertises `url` as this node's peer URL from now on (rewrites the membership record).
  Status SetPeerUrl(const std::string& url);
  // The peer URL of each live member ("" for one that advertises none), in member order;
  // members without a membership key are left out. Records that do not parse count as "".
  StatusOr<std::vector<std::pair<std::string, std::string>>> PeerUrls();
  // Claims the coordination of `key` for this node, on its lease, unless another node holds it;
  // returns the record that stands (this node's if the claim won).
  StatusOr<CoordinatorRecord> ClaimCoordinator(const std::string& key);

 private:
  GroupCommit(GroupOptions options, std::unique_ptr<EtcdClient> etcd);
  std::string Key(const std::string& rest) const;
  // Takes a new lease and writes this node's membership key on it.
  Status Join();
  void KeepAliveLoop();
  // Queues POST /v1/peer/decided of `key` to the other members (AnnounceLoop sends it).
  void Announce(const std::string& key);
  void AnnounceLoop();
  // Sleeps up to decision_poll, or until a notice for `key` or BeginShutdown; true on a notice.
  bool WaitForNotice(const std::string& key);

  GroupOptions options_;
  std::unique_ptr<EtcdClient> etcd_;
  std::mutex peer_url_mu_;
  std::string peer_url_;  // GUARDED_BY(peer_url_mu_)
  PeerClient peer_client_;
  mutable std::mutex in_doubt_mu_;
  std::vector<std::string> in_doubt_;  // GUARDED_BY(in_doubt_mu_)
  std::atomic<bool> leaving_{false};
  std::mutex notice_mu_;
  std::condition_variable notice_cv_;
  std::vector<std::string> noticed_;   // GUARDED_BY(notice_mu_): keys peers said are decided
  std::vector<std::string> announce_;  // GUARDED_BY(notice_mu_): keys to tell the others
  std::thread announcer_;
  std::atomic<int64_t> lease_{0};
  std::atomic<bool> stop_{false};
  std::thread keepalive_;
};

// "a/b c" -> "a%2Fb%20c": keeps [A-Za-z0-9._-], percent-encodes the rest, so a version id can
// be one path element of an etcd key.
std::string EscapeKeyPart(const std::string& s);

}  // namespace deltakv::sidecar
