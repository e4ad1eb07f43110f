// GroupConvergence: a node of a multi-node group catching up with a commit the group made
// without it (docs/MULTINODE.md, "Restart convergence").
//
// When a complete set of engine ranks is attached (at start, after an engine restart), and
// while a sync this node gave up waiting for is in doubt (GroupCommit::InDoubt), the sidecar
// asks Check() with the version the engine serves. Check first settles the syncs in doubt
// (GroupCommit::ResolveInDoubt: ABORT unless a decision stands), then reads the group's latest
// COMMIT from etcd (`latest`, written with the decision) and answers:
//   converged  the engine serves the committed version (or no commit is recorded)
//   applying   the engine serves the commit's parent: returns the sync request (the committed
//              version and delta) that joins the committed attempt and applies it
//   cannot     the engine serves another version (or none the ranks agree on), or the catch-up
//              sync failed: the reason says which
//   unknown    etcd did not answer (a sync in doubt stays so) or the record is malformed
// Json() is that state for /v1/status ("group").
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/status.h"
#include "coord/group_commit.h"
#include "sync/sync_record.h"

namespace deltakv::sidecar {

class GroupConvergence {
 public:
  // `group` may be null (one node): Check returns nullopt and Json null.
  explicit GroupConvergence(std::shared_ptr<GroupCommit> group) : group_(std::move(group)) {}

  // `serving` is the version the engine's ranks serve ("" if unknown). Returns the request to
  // run when the engine serves the parent of the group's latest COMMIT.
  std::optional<SyncRequest> Check(const std::string& serving);
  // This node committed `request` (a delta from `parent`) under `key`: it serves the group's
  // latest version.
  void Committed(const SyncRequest& request, const std::string& key, const std::string& parent);
  // The catch-up sync `request` failed with `why`.
  void CatchUpFailed(const SyncRequest& request, const Status& why);
  nlohmann::json Json() const;

 private:
  void Set(std::string state, std::string reason, std::optional<LatestCommit> latest);

  std::shared_ptr<GroupCommit> group_;
  mutable std::mutex mu_;
  nlohmann::json state_;  // GUARDED_BY(mu_)
};

}  // namespace deltakv::sidecar
