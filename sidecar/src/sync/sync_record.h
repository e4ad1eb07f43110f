// SyncRecord: the state of one sync request as reported by GET /v1/syncs/{id}.
//
// A record is one job of the sidecar's single worker: a sync, a verify or a scrub.
// Sync states: queued -> fetching -> decoding -> staged -> committing -> live, or aborted with a
// reason from any state before committing (no engine byte changed), or diverged when a failure
// came after the COMMIT decision (the record names the ranks; syncs are refused until the
// engine is verified again).
// Verify and scrub: queued -> verifying -> verified, or diverged (the live bytes differ from
// the checkpoint or the checksum table; the error names tensors, ranks and values), or failed
// (the job could not run: bad checkpoint, a rank's error or death). Phase timings are
// wall-clock milliseconds.
//
// Thread-safety: values; SyncManager guards the live copies.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "coord/group_records.h"

namespace deltakv::sidecar {

enum class SyncState {
  kQueued,
  kFetching,
  kDecoding,
  kStaged,
  kCommitting,
  kLive,
  kAborted,
  kVerifying,
  kVerified,
  kDiverged,
  kFailed,
};

const char* SyncStateName(SyncState s);

enum class JobKind { kSync, kVerify, kScrub };
const char* JobKindName(JobKind k);

struct SyncRequest {
  JobKind kind = JobKind::kSync;
  std::string id;          // the job's id in the API ("s000001"), set when it is queued
  std::string version;     // sync: the policy version the delta produces
  std::string delta;       // sync: delta location: "file:///dir", "/dir", "http://host:port/prefix"
  std::string checkpoint;  // verify: checkpoint location (same schemes)
  uint64_t rate_bytes_per_s = 0;  // verify/scrub: the ranks' read rate limit (0 = unlimited)
  // sync, multi-node: queued by the sidecar itself to join a commit its group made without it
  bool group_catch_up = false;
  // sync, multi-node: the sync key the group runs this sync under (set when it came through
  // the peer protocol); a node whose own key differs (another parent, a later attempt) writes
  // ABORT for this one and runs nothing. "" = the node's own key.
  std::string group_key;
};

// A multi-node sync's part in its group's commit (docs/MULTINODE.md, "Pauses and skew").
struct GroupSyncReport {
  std::string group;
  std::string node;
  std::string key;               // the sync key in etcd
  bool catch_up = false;         // queued at start to join a commit the group made without it
  int64_t commit_at_unix_ns = 0;  // the decision's commit point (0 = none)
  double commit_wait_ms = 0;     // how long this node waited for it
  // How this node learnt the decision: "wrote", "peer" or "etcd" ("" before it did).
  std::string decision_learnt;
  std::optional<NodePause> pause;  // this node's pause, once committed
  // The group's pauses, once every member published or the bounded wait passed.
  std::optional<GroupPauseView> view;
  std::string view_error;  // why there is no view (etcd unreachable)
  nlohmann::json ToJson() const;
};

struct SyncRecord {
  std::string id;
  SyncRequest request;
  SyncState state = SyncState::kQueued;
  std::string error;                       // set when aborted, diverged or failed
  // Set by the executor while it runs: the job ends `diverged` (not serialized).
  bool diverges = false;
  std::string parent_version;              // from the delta manifest
  std::map<std::string, double> phase_ms;  // "fetch", "decode", "stage", "pause", ...
  uint64_t bytes_fetched = 0;
  uint64_t nonzero_bytes = 0;
  uint64_t tensors_changed = 0;
  uint64_t plan_parts = 0;    // write-plan parts sent to the ranks (all ranks together)
  uint64_t plan_records = 0;  // write-plan records (all ranks together)
  // 64-byte lines of engine weight memory the commit writes, and in all registered weights
  // (all ranks together): the scatter's share of a full rewrite.
  uint64_t touched_lines = 0;
  uint64_t weight_lines = 0;
  // verify/scrub: tensors and bytes checked, and what differed
  uint64_t tensors_checked = 0;
  uint64_t bytes_checked = 0;
  std::vector<std::string> mismatches;
  std::optional<GroupSyncReport> group;  // multi-node syncs only
  double created_unix = 0;
  double finished_unix = 0;
  double total_ms = 0;

  bool finished() const {
    return state == SyncState::kLive || state == SyncState::kAborted ||
           state == SyncState::kVerified || state == SyncState::kDiverged ||
           state == SyncState::kFailed;
  }
  nlohmann::json ToJson() const;
};

double UnixNow();

}  // namespace deltakv::sidecar
