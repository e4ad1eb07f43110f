// SyncManager: accepts sync requests, runs them one at a time on a background thread through
// a SyncExecutor, and keeps their records (the current one and a bounded history).
//
// One sync runs at a time: a request that arrives while another is queued or running is
// refused with FailedPrecondition naming the running sync, never interleaved.
//
// Thread-safety: all methods may be called from any thread (HTTP handlers).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "base/status.h"
#include "sync/sync_record.h"

namespace deltakv::sidecar {

// Runs one job (a sync, a verify or a scrub). Calls `update` to publish progress (state
// changes, timings, counters); the manager stores each update. Returns OK when the new version
// is live (sync) or the live bytes matched (verify, scrub). On an error the record takes the
// message and ends `diverged` if the executor set `diverges` (a failure after COMMIT, or bytes
// that differ), else `aborted` (sync: the executor guarantees no engine byte changed) or
// `failed` (verify, scrub).
class SyncExecutor {
 public:
  using Update = std::function<void(const std::function<void(SyncRecord&)>&)>;
  virtual ~SyncExecutor() = default;
  virtual Status Run(const SyncRequest& request, const Update& update) = 0;
  // The version the engine serves now ("" if unknown), for /v1/status.
  virtual std::string LiveVersion() const = 0;
  // The engine ranks as seen now, for /v1/status and /metrics.
  virtual nlohmann::json RanksJson() const = 0;
  // The checksum table's summary for /v1/status (null if the executor keeps none).
  virtual nlohmann::json ChecksumsJson() const { return nullptr; }
  // Why syncs are refused until the engine is verified again ("" = they are not).
  virtual std::string Diverged() const { return ""; }
  // Identifies the complete set of engine processes attached now ("" while none is attached
  // or the world is incomplete), and whether the checksum table was computed on exactly them.
  virtual std::string AttachedRanksKey() const { return ""; }
  virtual bool TableCoversAttachedRanks() const { return true; }
  // Whether a background scrub has something to compare with (a table that is not diverged).
  virtual bool CanScrub() const { return true; }
  // Asks a running scrub to stop soon (a sync is waiting); called from any thread.
  virtual void StopScrub() {}
  // The process is stopping: a sync whose commit is not decided yet ends aborted ("sidecar
  // shutting down", no engine byte changed); one past its decision finishes; a scrub stops.
  // Called from any thread; irreversible.
  virtual void BeginShutdown() {}
  // Multi-node: the sync that makes this node join a commit its group made without it, asked
  // once per complete set of attached ranks, and at every poll while GroupInDoubt (nullopt:
  // none is needed or possible; GroupJson says which).
  virtual std::optional<SyncRequest> GroupCatchUp() { return std::nullopt; }
  // Multi-node: a sync this node gave up waiting for is still undecided as far as it knows.
  virtual bool GroupInDoubt() const { return false; }
  // Multi-node: the node's standing in its group for /v1/status (null for one node).
  virtual nlohmann::json GroupJson() const { return nullptr; }
};

struct SyncManagerOptions {
  size_t history = 32;
  // Runs once on the worker thread before any job (priority, pinning).
  std::function<void()> worker_setup;
  // A background scrub runs this often when the worker is idle (0 = never), at this read rate.
  std::chrono::milliseconds scrub_interval{0};
  uint64_t scrub_rate_bytes_per_s = 0;
  // When set, the worker verifies the engine against this checkpoint whenever a complete set of
  // ranks is attached (unchanged for one poll) that the checksum table was not computed on: at
  // start-up, and after an engine restart. A failed verify is not retried for the same ranks.
  std::string verify_checkpoint;
  std::chrono::milliseconds attach_poll{500};
  // Multi-node: whenever a complete set of ranks is attached (unchanged for one poll) that was
  // not checked yet, or a sync is in doubt (GroupInDoubt), ask the executor's GroupCatchUp and
  // queue the sync it returns.
  bool group_catch_up = false;
  // When set, the number of the next job id is kept in this file (read at start, rewritten at
  // each new job), so ids go on counting across restarts instead of starting at 1 again.
  std::string id_file;
};

class SyncManager {
 public:
  SyncManager(std::unique_ptr<SyncExecutor> executor, SyncManagerOptions options);
  SyncManager(std::unique_ptr<SyncExecutor> executor, size_t history,
              std::function<void()> worker_setup = nullptr)
      : SyncManager(std::move(executor), SyncManagerOptions{history, std::move(worker_setup)}) {}
  ~SyncManager();
  SyncManager(const SyncManager&) = delete;
  SyncManager& operator=(const SyncManager&) = delete;

  // Queues a job and returns its id ("s…" sync, "v…" verify, "c…" scrub, one sequence);
  // FailedPrecondition if one is queued or running, except that a sync submitted while a scrub
  // runs is queued and the scrub is stopped (it ends `failed`, "stopped for sync …");
  // InvalidArgument for a sync without version or delta, or a verify without checkpoint.
  StatusOr<std::string> Submit(SyncRequest request);
  std::optional<SyncRecord> Get(const std::string& id) const;
  // Get, once the job has finished (SyncRecord::finished), `timeout` has passed or Shutdown
  // has begun, whichever comes first; nullopt if no such job is kept.
  std::optional<SyncRecord> WaitFinished(const std::string& id,
                                         std::chrono::milliseconds timeout) const;
  // The newest sync record of the group sync `key` (its request's group_key, or the key the
  // executor ran it under), if one is kept.
  std::optional<SyncRecord> FindGroupSync(const std::string& key) const;
  // Newest first.
  std::vector<SyncRecord> History() const;
  std::string LiveVersion() const { return executor_->LiveVersion(); }
  nlohmann::json RanksJson() const { return executor_->RanksJson(); }
  nlohmann::json ChecksumsJson() const { return executor_->ChecksumsJson(); }
  std::string Diverged() const { return executor_->Diverged(); }
  nlohmann::json GroupJson() const { return executor_->GroupJson(); }
  // Counters for /metrics: syncs that went live / did not.
  uint64_t succeeded() const;
  uint64_t failed() const;
  // Stops taking jobs: Submit refuses from now on ("sidecar shutting down"), a queued job ends
  // aborted (sync) or failed with that message, no verify, catch-up or scrub is started any
  // more, and the executor's BeginShutdown ends the running job early where it safely can.
  // Waits until no job runs or `deadline` passes; returns whether none runs.
  bool Shutdown(std::chrono::steady_clock::time_point deadline);
  // Finished jobs by kind and final state ("sync" -> {"live": n, "aborted": m, ...}).
  std::map<std::string, std::map<std::string, uint64_t>> Finished() const;

 private:
  void WorkerLoop();
  // REQUIRES: mu_ held, nothing queued or running.
  std::string QueueLocked(SyncRequest request);

  std::unique_ptr<SyncExecutor> executor_;
  SyncManagerOptions options_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;         // job starts and ends, submissions, shutdown
  std::map<std::string, SyncRecord> records_;  // GUARDED_BY(mu_)
  std::deque<std::string> order_;              // GUARDED_BY(mu_), oldest first
  std::optional<std::string> pending_;         // GUARDED_BY(mu_)
  std::optional<std::string> running_;         // GUARDED_BY(mu_)
  JobKind running_kind_ = JobKind::kSync;      // GUARDED_BY(mu_)
  uint64_t next_id_ = 1;                       // GUARDED_BY(mu_)
  std::map<std::string, std::map<std::string, uint64_t>> finished_;  // GUARDED_BY(mu_)
  bool stop_ = false;                                                // GUARDED_BY(mu_)
  bool draining_ = false;  // GUARDED_BY(mu_), set by Shutdown
  std::thread worker_;
};

}  // namespace deltakv::sidecar
