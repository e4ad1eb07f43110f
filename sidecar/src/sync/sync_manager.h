// SyncManager: accepts sync requests, runs them one at a time on a background thread through
// a SyncExecutor, and keeps their records (the current one and a bounded history).
//
// One sync runs at a time: a request that arrives while another is queued or running is
// refused with FailedPrecondition naming the running sync, never interleaved.
//
// Thread-safety: all methods may be called from any thread (HTTP handlers).
#pragma once

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

// Runs one sync. Calls `update` to publish progress (state changes, timings, counters); the
// manager stores each update. Returns OK when the new version is live; an error aborts the
// sync with that message (the executor guarantees no engine byte changed).
class SyncExecutor {
 public:
  using Update = std::function<void(const std::function<void(SyncRecord&)>&)>;
  virtual ~SyncExecutor() = default;
  virtual Status Run(const SyncRequest& request, const Update& update) = 0;
  // The version the engine serves now ("" if unknown), for /v1/status.
  virtual std::string LiveVersion() const = 0;
  // The engine ranks as seen now, for /v1/status and /metrics.
  virtual nlohmann::json RanksJson() const = 0;
};

class SyncManager {
 public:
  // `worker_setup` runs once on the worker thread before any sync (priority, pinning).
  SyncManager(std::unique_ptr<SyncExecutor> executor, size_t history,
              std::function<void()> worker_setup = nullptr);
  ~SyncManager();
  SyncManager(const SyncManager&) = delete;
  SyncManager& operator=(const SyncManager&) = delete;

  // Queues a sync and returns its id; FailedPrecondition if one is queued or running;
  // InvalidArgument for an empty version or delta.
  StatusOr<std::string> Submit(SyncRequest request);
  std::optional<SyncRecord> Get(const std::string& id) const;
  // Newest first.
  std::vector<SyncRecord> History() const;
  std::string LiveVersion() const { return executor_->LiveVersion(); }
  nlohmann::json RanksJson() const { return executor_->RanksJson(); }
  // Counters for /metrics.
  uint64_t succeeded() const;
  uint64_t failed() const;

 private:
  void WorkerLoop();

  std::unique_ptr<SyncExecutor> executor_;
  size_t history_limit_;
  std::function<void()> worker_setup_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, SyncRecord> records_;  // GUARDED_BY(mu_)
  std::deque<std::string> order_;              // GUARDED_BY(mu_), oldest first
  std::optional<std::string> pending_;         // GUARDED_BY(mu_)
  std::optional<std::string> running_;         // GUARDED_BY(mu_)
  uint64_t next_id_ = 1;                       // GUARDED_BY(mu_)
  uint64_t succeeded_ = 0;                     // GUARDED_BY(mu_)
  uint64_t failed_ = 0;                        // GUARDED_BY(mu_)
  bool stop_ = false;                          // GUARDED_BY(mu_)
  std::thread worker_;
};

}  // namespace deltakv::sidecar
