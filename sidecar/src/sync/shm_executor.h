// ShmSyncExecutor: runs syncs, verifies and scrubs against the engine ranks attached to this
// sidecar's shared-memory control block (shm/PROTOCOL.md), and keeps the checksum table
// (sync/checksum_table.h), the base of every check (docs/ARCHITECTURE.md, "Checksum chain").
//
// A sync runs in named phases, each a function below:
//   admit      the delta manifest; every rank's tensor table; refuse if the table is diverged,
//              the ranks disagree about the version they serve, a rank has not finished a
//              committed sync, or the delta's parent is another version
//   parents    every changed tensor's parent Adler-32 against the checksum table; when the
//              table is stale (a rank re-registered, a new sidecar without state) the ranks
//              checksum their live bytes first (early check) and the table is rebuilt from them
//   decode     fetch each shard object once, walk its frames sparsely, stream per-rank write
//              plans in bounded parts (sync/plan_stream.h); ranks gather, XOR and stage
//   stage      collect every rank's partial sums and verify them against the delta's
//   commit     decide COMMIT in the control block; collect every rank's confirmation
//   advance    the table moves to the new checksums and version, saved in the state dir
// One failure rule: anything before the COMMIT decision decides ABORT (no engine byte
// changed; the record says `aborted`). Anything after it is `diverged`: the record names the
// ranks that did and did not confirm, the table is marked diverged, and syncs are refused until
// POST /v1/verify succeeds. A rank is judged gone by its slot, process and heartbeat
// (ControlBlock::CheckRank: stopped, wedged or zombie ranks within about a second).
//
// Verify: the ranks checksum their live bytes (VERIFY); the sums are compared with a
// checkpoint's manifest (read through the same stores as deltas); on success the table is
// rebuilt from them and any divergence is cleared. Scrub: the same pass, at a rate limit,
// compared with the table; a difference marks the table diverged.
//
// Multi-node (options.group set): after the stage check the node sends PREPARED and waits for
// the group's decision; on COMMIT it starts its commit at the decision's commit point (waiting
// at most the commit margin), then publishes its pause times and records the group's pauses
// and resume skew in the sync record (the record finishes once every member reported or the
// report timeout passed). GroupCatchUp joins a commit the group made without this node.
//
// Thread-safety: Run is called by the SyncManager's single worker; the accessors from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "coord/group_commit.h"
#include "shm/control_block.h"
#include "shm/plan_arena.h"
#include "store/open_store.h"
#include "sync/checksum_table.h"
#include "sync/group_convergence.h"
#include "sync/sync_manager.h"

namespace deltakv::sidecar {

struct ShmExecutorOptions {
  std::string shm_name = "deltakv";
  std::string decoder;  // XorDecoder name; "" = default
  uint32_t max_window_log = 27;
  std::chrono::milliseconds stage_timeout{120000};
  std::chrono::milliseconds commit_timeout{120000};
  std::string state_dir;  // persists the live version id and the checksum table; "" = memory only
  // How long ranks may take to checksum their weights for a verify, an early check or a scrub.
  std::chrono::milliseconds verify_timeout{600000};
  // Bound on plan bytes in flight to all ranks together (parts being written or not yet taken
  // by their rank), and so on the sidecar's plan memory; fetch windows are an eighth of it.
  uint64_t plan_buffer_bytes = 128ull << 20;
  // Frames decoded at once; 0 = as many as the CPUs the sync worker may run on.
  unsigned decode_threads = 0;
  HttpStoreOptions http;
  std::string volume_store;  // where vol:// delta locations are read from; "" = refused
  // Multi-node: every sync is decided with the group (coord/group_commit.h); null = one node.
  std::shared_ptr<GroupCommit> group;
};

class ShmSyncExecutor final : public SyncExecutor {
 public:
  // Creates (or adopts) the control segment, removes plan arenas a dead predecessor left, and
  // loads the live version and checksum table from the state dir.
  static StatusOr<std::unique_ptr<ShmSyncExecutor>> Create(const ShmExecutorOptions& options);
  // Retires and unlinks the plan arenas.
  ~ShmSyncExecutor() override;

  Status Run(const SyncRequest& request, const Update& update) override;
  std::string LiveVersion() const override;
  nlohmann::json RanksJson() const override;
  nlohmann::json ChecksumsJson() const override;
  std::string Diverged() const override;
  std::string AttachedRanksKey() const override;
  bool TableCoversAttachedRanks() const override;
  bool CanScrub() const override;
  void StopScrub() override { stop_scrub_.store(true); }
  void BeginShutdown() override {
    shutting_down_.store(true);
    if (options_.group != nullptr) options_.group->BeginShutdown();
    StopScrub();
  }
  std::optional<SyncRequest> GroupCatchUp() override { return convergence_.Check(LiveVersion()); }
  bool GroupInDoubt() const override {
    return options_.group != nullptr && !options_.group->InDoubt().empty();
  }
  nlohmann::json GroupJson() const override { return convergence_.Json(); }
  // True once a later sidecar has taken the control segment over (this one was stopped past
  // the stale threshold and judged dead): this process must stop.
  bool Replaced() const;

 private:
  class Job;
  friend class Job;
  explicit ShmSyncExecutor(ShmExecutorOptions options)
      : options_(std::move(options)), convergence_(options_.group) {}
  ChecksumTable table() const;
  // The plan arena pools of ranks 0..world-1 (shm/plan_arena.h), kept across syncs.
  std::vector<shm::PlanArenaPool*> ArenaPools(uint32_t world);
  // Stores the table (and its version as the live version) and saves both in the state dir.
  void SetTable(ChecksumTable table);

  ShmExecutorOptions options_;
  std::unique_ptr<shm::ControlBlock> control_;
  // Plan arenas (sync worker only): one pool per rank, reused by every sync, at most
  // world × parts in flight + 1 arenas of one part each (see Job::Decode).
  std::vector<std::unique_ptr<shm::PlanArenaPool>> arena_pools_;
  uint64_t arena_generation_ = 0;  // the last generation handed out
  mutable std::mutex mu_;
  std::string live_version_;  // GUARDED_BY(mu_)
  ChecksumTable table_;       // GUARDED_BY(mu_)
  std::atomic<bool> stop_scrub_{false};
  std::atomic<bool> shutting_down_{false};  // BeginShutdown: no new commit decision
  GroupConvergence convergence_;
};

}  // namespace deltakv::sidecar
