// Engine: the implementation behind the C ABI handle (include/deltakv/deltakv.h).
//
// Lifecycle: tensors are registered, then Start() attaches to the sidecar's control block,
// claims the rank's slot, publishes the rank's tensor table in a segment named
// "<shm_name>.tensors.<rank>", and starts a worker thread that serves the command ring:
// kPlan -> copy the plan part out of its arena and stage it; after the last part report partial
// sums (kStaged), wait for the decision in the control block, then commit (callbacks or poll)
// or drop; kVerify -> checksum the live weights (kVerified).
//
// The handle is an explicit state machine (deltakv_engine_state, shm/PROTOCOL.md §9.5):
//   CREATED -start-> ATTACHED -PLAN part 0-> STAGING -last part-> STAGED -COMMIT-> COMMITTING
//   COMMITTING -written-> ATTACHED, or -failed after the decision-> DIVERGED
//   STAGING/STAGED -ABORT, an abort or newer decision, a dead or replaced sidecar, an error->
//   ATTACHED;  ATTACHED/DIVERGED -VERIFY-> VERIFYING -> back;  DIVERGED -PLAN-> STAGING
//   any -free-> STOPPED
// Every wait is bounded: the decision wait ends when the sync is decided, superseded by a newer
// decision, or the sidecar is judged dead (about 1 s), and on free.
//
// Thread-safety: Register/SetCallbacks/Start from one thread before serving; Poll from the
// engine's scheduler thread; state(), policy_version(), version_id() and sync_error() from any
// thread; the worker owns the rings.
#pragma once

#include <atomic>
#include <deque>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "deltakv/deltakv.h"
#include "deltasync/engine_tensors.h"
#include "deltasync/write_plan.h"
#include "shim/device_backend.h"
#include "shim/plan_stage.h"
#include "shm/control_block.h"
#include "shm/messages.h"
#include "shm/plan_arena.h"
#include "shm/segment.h"

namespace deltakv::shim {

class Engine {
 public:
  explicit Engine(const deltakv_engine_params& params);
  ~Engine();

  Status RegisterTensor(const char* name, void* device, const char* dtype, const int64_t* shape,
                        int32_t ndim, const char* layout_json);
  // FailedPrecondition once started (the worker reads them).
  Status SetCallbacks(const deltakv_callbacks& cb) {
    if (worker_.joinable()) return FailedPrecondition("callbacks must be set before start");
    callbacks_ = cb;
    return Status::Ok();
  }
  Status Start();
  // Applies a pending commit (poll mode). Returns true if one was applied.
  StatusOr<bool> Poll();

  uint64_t policy_version() const { return policy_version_.load(std::memory_order_acquire); }
  std::string version_id() const;
  deltakv_engine_state state() const { return state_.load(std::memory_order_acquire); }
  // The message of the last sync (or attach) that failed on the worker; never cleared.
  void set_sync_error(const Status& s);
  std::string sync_error() const;
  // Figures of the newest sync this rank staged (deltakv_engine_get_sync_stats); any thread.
  deltakv_sync_stats sync_stats() const;

 private:
  struct PendingCommit {
    uint64_t sync_id = 0;
    std::string version;
    // Prepared before the pause by the device backend, one per plan part.
    std::vector<std::unique_ptr<PreparedScatter>> prepared;
    // Touched local regions per registered tensor (only when a derived hook is set).
    TouchedRegions regions;
  };
  // A plan whose parts are still arriving (worker thread only).
  struct IncomingPlan {
    PendingCommit pc;
    uint32_t next_part = 0;
    std::vector<deltasync::PlanTensor> tensors;  // part 0's table; every part repeats it
    std::vector<StagedTensor> staged;            // sums over the parts so far
    uint64_t stage_ns = 0;                       // time in backend_->StagePart, all parts
  };

  Status PublishTensorTable();
  void WorkerLoop();
  void HandlePlan(const shm::Message& msg);
  // Copies one plan part out of its arena and stages it into incoming_ (part 0 starts it).
  Status StagePart(uint64_t sync_id, const shm::PlanRef& ref);
  // Sends STAGED for a complete plan, waits for the decision, commits or drops it.
  void FinishPlan(IncomingPlan plan);
  // Drops incoming_ if its sync was aborted or the sidecar is gone.
  void CheckIncoming();
  // The pause of one commit: its length and the wall clock (CLOCK_REALTIME) at its ends.
  struct CommitPause {
    uint64_t pause_us = 0;
    int64_t start_unix_ns = 0;
    int64_t resume_unix_ns = 0;
  };
  // Writes the staged plan; returns the pause.
  StatusOr<CommitPause> ApplyCommit(PendingCommit& pc);
  void Send(const StatusOr<shm::Message>& msg);
  // Sends a STAGED or VERIFIED report in parts of at most kEntriesPerStagedPart entries, with
  // `bytes` (changed or read) in part 0.
  using ReportMaker = StatusOr<shm::Message> (*)(uint64_t, const shm::StagedReport&);
  void SendReport(ReportMaker make, uint64_t id, const std::vector<shm::StagedEntry>& entries,
                  uint64_t bytes);
  // Checksums the live weights and sends kVerified (or kError) for `job_id`.
  void HandleVerify(const shm::Message& msg);
  void SetState(deltakv_engine_state s) { state_.store(s, std::memory_order_release); }
  void SetSyncStats(const deltakv_sync_stats& s);
  // deltakv_sync_stats::outcome values.
  static constexpr int32_t kOutcomeCommitted = 1;
  static constexpr int32_t kOutcomeDropped = 2;
  static constexpr int32_t kOutcomeDiverged = 3;
  // Ends the newest sync's stats with `outcome` (deltakv_sync_stats), unless it already ended.
  void EndSyncStats(int32_t outcome, uint64_t pause_us);
  // Drops the sync being staged (aborted, the sidecar gone, or a part that failed): its stats
  // end as dropped and the rank is attached again, serving the version it had.
  void DropIncoming();

  // Parameters.
  std::string shm_name_;
  uint32_t rank_ = 0;   // the node-local rank (control block slot, table segment)
  uint32_t world_ = 1;  // the node's ranks
  // The global rank of local rank 0 and the global world, when this engine serves a slice of a
  // larger tensor-parallel group; layouts use global ranks (layout_rank() = first_global_ + rank_).
  uint32_t first_global_ = 0;
  uint32_t global_world_ = 1;
  uint32_t layout_rank() const { return first_global_ + rank_; }
  std::string backend_name_;
  bool poll_mode_ = false;
  uint32_t attach_timeout_ms_ = 10000;
  uint64_t staging_reserve_bytes_ = 0;

  std::vector<LocalTensor> locals_;
  std::vector<deltasync::EngineTensor> table_;
  deltakv_callbacks callbacks_{};
  std::unique_ptr<DeviceBackend> backend_;

  std::unique_ptr<shm::ControlBlock> control_;
  std::optional<shm::RankHandle> handle_;
  std::optional<shm::Segment> table_segment_;
  std::thread worker_;
  std::atomic<bool> stop_{false};  // written under mu_, so a waiter on cv_ cannot miss it
  std::atomic<deltakv_engine_state> state_{DELTAKV_ENGINE_CREATED};
  std::atomic<uint64_t> policy_version_{0};
  std::optional<IncomingPlan> incoming_;  // worker thread only
  // The newest sync a PLAN named (worker thread only): a PLAN for an older one is ignored.
  // Sync ids grow within a control segment; 0 again when the rank registers in a new one.
  uint64_t newest_plan_sync_id_ = 0;
  // A finished sync's region lists, emptied with their capacity kept, for the next sync's
  // (a sparse sync lists millions of regions: regrown vectors would be new pages every time).
  TouchedRegions spare_regions_;  // worker thread only
  void KeepRegions(TouchedRegions& regions);
  std::vector<uint64_t> part_copy_;        // worker thread only: the part being staged
  // Worker thread only: the plan arenas kept mapped across parts and syncs (shm/plan_arena.h).
  shm::PlanArenaCache arenas_;
  std::deque<std::vector<uint8_t>> deferred_;  // worker thread only: commands seen mid-scrub

  mutable std::mutex version_mu_;
  std::string version_id_;  // GUARDED_BY(version_mu_)
  mutable std::mutex mu_;   // the poll-mode hand-off
  std::condition_variable cv_;
  std::optional<PendingCommit> pending_;  // GUARDED_BY(mu_) (poll mode)
  bool pending_done_ = false;             // GUARDED_BY(mu_)
  Status pending_status_;                 // GUARDED_BY(mu_)
  CommitPause pending_pause_;             // GUARDED_BY(mu_)

  mutable std::mutex error_mu_;
  std::string sync_error_;  // GUARDED_BY(error_mu_)
  mutable std::mutex stats_mu_;
  deltakv_sync_stats stats_{};  // GUARDED_BY(stats_mu_)
};

}  // namespace deltakv::shim
