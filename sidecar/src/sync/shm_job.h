// ShmSyncExecutor::Job: the ranks attached now and one job's work on them (internal to the
// executor; the header of the public class is sync/shm_executor.h). The job's parts live in:
//   shm_job.cc         attaching ranks, live checksums, the checksum table (every kind of job)
//   shm_sync_job.cc    the sync phases: admit, parent check, decode, stage, commit, RunSync
//   shm_group_job.cc   a sync's multi-node steps: PREPARED sums, held tensors, the decision
//   shm_verify_job.cc  verify against a checkpoint, scrub
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "deltasync/delta_manifest.h"
#include "deltasync/engine_tensors.h"
#include "deltasync/sync_planner.h"
#include "deltasync/write_plan.h"
#include "shm/messages.h"
#include "sync/live_checksums.h"
#include "sync/node_slice.h"
#include "sync/plan_stream.h"
#include "sync/rank_collect.h"
#include "sync/shm_executor.h"

namespace deltakv::sidecar {
namespace shm_job {

using Clock = std::chrono::steady_clock;

// Fault injection for tests: DELTAKV_FAULT_STALL="<point>:<ms>" sleeps at that point of a
// sync ("planned": plans built, not yet sent; "staged": verified, not yet decided;
// "committing": COMMIT decided, not yet sent to the ranks).
void MaybeStall(const char* point);

int64_t UnixNs();

inline double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

inline std::string ArenaPrefix(const std::string& shm) { return shm; }

StatusOr<deltasync::EngineTensorTable> ReadTensorTable(const std::string& shm, uint32_t rank);

inline std::string Hex(uint32_t adler) { return "0x" + deltasync::FormatChecksum(adler); }

// "a; b; c (and N more)" for messages that must stay readable.
std::string JoinFirst(const std::vector<std::string>& items, size_t n = 8);

// One rank's view during a sync.
struct RankRun {
  shm::RankChannel channel;
  bool staged = false;
  uint32_t staged_parts = 0;
  bool committed = false;
  std::string commit_error;
  uint64_t pause_us = 0;
  std::vector<deltasync::AdlerDelta> inc;  // per delta tensor: this rank's incremental sums
};

// A rank that died without freeing its handle leaves its tensor table behind: removes the
// tables of `dead` that are still the dead processes' (shm_job.cc).
void RemoveTablesOf(const std::string& shm_name, const std::vector<shm::RankInfo>& dead);

}  // namespace shm_job

// The ranks attached now and one job's work on them. Each phase is a method; a phase that
// fails returns the reason, and Run applies the failure rule of the header.
class ShmSyncExecutor::Job {
  using RankRun = shm_job::RankRun;

 public:
  Job(ShmSyncExecutor& ex, const SyncRequest& request, const Update& update)
      : ex_(ex), request_(request), update_(update) {}

  Status RunSync();
  Status RunVerify();
  Status RunScrub();

 private:
  // ---- shared by every kind of job
  Status AttachRanks();
  Status RankGone(uint32_t r) const;
  // RankGone for every rank of the job: OK if all are alive.
  Status RanksStillAlive() const;
  // A wait for every rank's `want` replies to this sync, failing when a rank is gone.
  CollectSpec RankReplies(shm::MessageType want, std::chrono::milliseconds timeout) {
    CollectSpec spec;
    spec.id = sync_id_;
    spec.want = want;
    spec.timeout = timeout;
    spec.rank_gone = [this](uint32_t r) { return RankGone(r); };
    return spec;
  }
  StatusOr<LiveChecksums> Checksum(uint64_t rate_bytes_per_s, uint32_t flags);
  std::vector<shm::RankChannel*> Channels();
  void SetState(SyncState s) {
    update_([&](SyncRecord& r) { r.state = s; });
  }
  void Phase(const char* name, double ms) {
    update_([&](SyncRecord& r) { r.phase_ms[name] = ms; });
  }
  // Marks the table diverged with `why`, the record diverged, and returns DataLoss(why).
  Status Diverge(const std::string& why);
  // Per-tensor comparison of live checksums with the table; mismatch messages.
  std::vector<std::string> CompareWithTable(const LiveChecksums& live,
                                            const ChecksumTable& table) const;
  ChecksumTable TableFromLive(const LiveChecksums& live, const std::string& version,
                              const std::string& source) const;
  // The version id every rank's table names ("" if none names one); FailedPrecondition if two
  // ranks name different ones.
  StatusOr<std::string> RanksVersion() const;

  // ---- sync phases
  Status Admit();
  Status CheckParents();
  Status Decode();
  Status Stage();
  // Multi-node: PREPARED to the group, then its decision (FailedPrecondition for ABORT).
  Status GroupDecide(const std::string& key);
  // Multi-node: waits for the decision's commit point, at most the commit margin.
  void AwaitCommitPoint();
  // Multi-node, after the commit: publishes this node's pause and records the group's view.
  void ReportGroupPauses(const std::string& key);
  Status Commit();
  void Advance();
  Status AbortAll(const Status& why);

  ShmSyncExecutor& ex_;
  const SyncRequest& request_;
  const Update& update_;

  std::vector<shm::RankInfo> infos_;  // index = rank
  std::vector<deltasync::EngineTensorTable> tables_;
  std::vector<RankRun> runs_;
  uint32_t world_ = 0;

  std::unique_ptr<deltasync::ObjectStore> store_;
  deltasync::DeltaManifest m_;
  deltasync::RankTensorTables rank_tables_;
  std::vector<std::vector<deltasync::PlanTensor>> plan_tables_;
  ChecksumTable table_;  // the executor's table as of Admit
  std::string live_;     // the version the ranks serve, as of Admit
  double admit_ms_ = 0;
  uint64_t sync_id_ = 0;
  std::unique_ptr<PlanStreamer> streamer_;
  // The global ranks the attached ranks serve, and per delta tensor whether this node holds only
  // part of it (then the group verifies it from every node's sums, see GroupDecide).
  NodeSlice slice_;
  std::vector<bool> partial_;
  std::vector<deltasync::AdlerDelta> partial_parent_, partial_inc_, partial_full_;
  // The sums of the tensors split over nodes, as this node publishes them with PREPARED.
  nlohmann::json PartialJson() const;
  // Every member's PREPARED sums combined, against the delta's checksums.
  Status CheckPartials(const std::vector<nlohmann::json>& partials) const;
  // Pipeline stages: this node's engine serves one stage of the topology as a whole
  // tensor-parallel group, and holds only the tensors its ranks registered. Admit drops the
  // others from m_ (held_: their indices in the delta's full list of all_names_); the group
  // checks before COMMIT that every changed tensor is held by some node (CheckHeld).
  bool stage_ = false;
  std::set<std::string> stage_objects_;  // objects holding frames of other stages' tensors
  std::vector<std::string> all_names_;
  std::vector<uint32_t> held_;
  Status CheckHeld(const std::vector<nlohmann::json>& records) const;
  // "2..3 of 4": the global ranks this node's engine serves.
  std::string SliceText() const {
    return std::to_string(slice_.first) + ".." + std::to_string(slice_.first + slice_.count - 1) +
           " of " + std::to_string(slice_.world);
  }
  // This node's name in its group ("this node" without one).
  std::string NodeName() const {
    return ex_.options_.group != nullptr ? ex_.options_.group->options().node : "this node";
  }
  static std::string SumsText(const deltasync::AdlerDelta& d) {
    return "S1 " + std::to_string(d.s1()) + " S2 " + std::to_string(d.s2());
  }
  GroupDecision decision_;  // multi-node: the group's COMMIT, as read from etcd
  NodePause pause_;         // this node's pause (all ranks together), set by Commit()
};

}  // namespace deltakv::sidecar
