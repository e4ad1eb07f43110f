#include "sync/sync_manager.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "base/file_util.h"
#include "log/log.h"
#include "store/open_store.h"

namespace deltakv::sidecar {

namespace {

// The next job number kept in `path`: 1 when there is none (or it does not parse, logged).
uint64_t ReadNextId(const std::string& path) {
  if (path.empty() || (::access(path.c_str(), F_OK) != 0 && errno == ENOENT)) return 1;
  auto text = ReadFileToString(path, 64);
  uint64_t n = 0;
  if (text.ok()) {
    const std::string t = text->substr(0, text->find_last_not_of("\r\n") + 1);
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), n);
    if (ec == std::errc() && end == t.data() + t.size() && n >= 1 && n < 1000000000) return n;
  }
  log::Warn("job id file not read; ids start at 1",
            {{"path", path}, {"error", text.ok() ? "not a job number" : text.status().message()}});
  return 1;
}

}  // namespace

SyncManager::SyncManager(std::unique_ptr<SyncExecutor> executor, SyncManagerOptions options)
    : executor_(std::move(executor)),
      options_(std::move(options)),
      next_id_(ReadNextId(options_.id_file)),
      worker_([this] { WorkerLoop(); }) {}

SyncManager::~SyncManager() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

StatusOr<std::string> SyncManager::Submit(SyncRequest request) {
  if (request.kind == JobKind::kSync) {
    if (request.version.empty()) return InvalidArgument("'version' must be a non-empty string");
    if (request.delta.empty()) return InvalidArgument("'delta' must be a non-empty string");
  } else if (request.kind == JobKind::kVerify && request.checkpoint.empty()) {
    return InvalidArgument("'checkpoint' must be a non-empty string");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (draining_) return FailedPrecondition("sidecar shutting down: no new jobs are accepted");
  if (request.kind == JobKind::kSync && !pending_ && running_ && running_kind_ == JobKind::kScrub) {
    // A scrub yields to a sync: the sync waits in the queue while the ranks stop reading.
    std::string id = QueueLocked(std::move(request));
    executor_->StopScrub();
    auto it = records_.find(*running_);
    if (it != records_.end()) it->second.error = "stopped for sync " + id;
    return id;
  }
  if (pending_ || running_) {
    const std::string& busy = running_ ? *running_ : *pending_;
    return FailedPrecondition("job " + busy + " is in progress; one sync, verify or scrub runs " +
                              "at a time");
  }
  std::string id = QueueLocked(std::move(request));
  cv_.notify_all();
  return id;
}

std::string SyncManager::QueueLocked(SyncRequest request) {
  const char prefix = request.kind == JobKind::kSync     ? 's'
                      : request.kind == JobKind::kVerify ? 'v'
                                                         : 'c';
  char id[32];
  std::snprintf(id, sizeof(id), "%c%06llu", prefix, static_cast<unsigned long long>(next_id_++));
  if (!options_.id_file.empty()) {
    std::error_code ec;  // the state directory may not exist before its first write
    std::filesystem::create_directories(std::filesystem::path(options_.id_file).parent_path(), ec);
    if (Status w = WriteFileAtomic(options_.id_file, std::to_string(next_id_) + "\n"); !w.ok()) {
      log::Warn("job id file not written", {{"path", options_.id_file}, {"error", w.message()}});
    }
  }
  SyncRecord rec;
  rec.id = id;
  request.id = id;
  rec.request = std::move(request);
  rec.created_unix = UnixNow();
  records_[rec.id] = rec;
  order_.push_back(rec.id);
  while (order_.size() > options_.history) {
    records_.erase(order_.front());
    order_.pop_front();
  }
  pending_ = rec.id;
  return rec.id;
}

std::optional<SyncRecord> SyncManager::Get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return std::nullopt;
  return it->second;
}

std::optional<SyncRecord> SyncManager::WaitFinished(const std::string& id,
                                                    std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  // Every path that finishes a job notifies cv_ (the worker, Shutdown for a queued one); a
  // shutdown ends every wait at once, so no request holds the API's threads past it.
  cv_.wait_for(lock, timeout, [&] {
    auto it = records_.find(id);
    return it == records_.end() || it->second.finished() || draining_;
  });
  auto it = records_.find(id);
  if (it == records_.end()) return std::nullopt;
  return it->second;
}

std::optional<SyncRecord> SyncManager::FindGroupSync(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
    const SyncRecord& r = records_.at(*it);
    if (r.request.kind != JobKind::kSync) continue;
    if (r.request.group_key == key || (r.group && r.group->key == key)) return r;
  }
  return std::nullopt;
}

std::vector<SyncRecord> SyncManager::History() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SyncRecord> out;
  for (auto it = order_.rbegin(); it != order_.rend(); ++it) out.push_back(records_.at(*it));
  return out;
}

uint64_t SyncManager::succeeded() const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = finished_.find("sync");
  if (it == finished_.end()) return 0;
  auto live = it->second.find("live");
  return live == it->second.end() ? 0 : live->second;
}

uint64_t SyncManager::failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = finished_.find("sync");
  if (it == finished_.end()) return 0;
  uint64_t n = 0;
  for (const auto& [state, count] : it->second) n += state == "live" ? 0 : count;
  return n;
}

bool SyncManager::Shutdown(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  draining_ = true;
  if (pending_) {
    auto it = records_.find(*pending_);
    if (it != records_.end()) {
      const JobKind kind = it->second.request.kind;
      it->second.state = kind == JobKind::kSync ? SyncState::kAborted : SyncState::kFailed;
      it->second.error = "sidecar shutting down";
      it->second.finished_unix = UnixNow();
      finished_[JobKindName(kind)][SyncStateName(it->second.state)]++;
      log::Warn(std::string(JobKindName(kind)) + " " + SyncStateName(it->second.state),
                {{"sync_id", *pending_}, {"error", it->second.error}});
    }
    pending_.reset();
  }
  executor_->BeginShutdown();
  cv_.notify_all();
  return cv_.wait_until(lock, deadline, [&] { return !running_.has_value(); });
}

std::map<std::string, std::map<std::string, uint64_t>> SyncManager::Finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

void SyncManager::WorkerLoop() {
  if (options_.worker_setup) options_.worker_setup();
  using Clock = std::chrono::steady_clock;
  auto next_scrub = Clock::now() + options_.scrub_interval;
  const bool auto_verify = !options_.verify_checkpoint.empty();
  const bool poll_ranks = auto_verify || options_.group_catch_up;
  // The attached ranks at the last poll / the last auto verify / the last catch-up check.
  std::string seen_key, tried_key, caught_key;
  for (;;) {
    std::string id;
    SyncRequest request;
    // Outside mu_: the executor reads shared memory.
    std::string key;
    bool needs_verify = false;
    std::optional<SyncRequest> catch_up;
    if (poll_ranks) {
      key = executor_->AttachedRanksKey();
      const bool stable = !key.empty() && key == seen_key;
      needs_verify =
          auto_verify && stable && key != tried_key && !executor_->TableCoversAttachedRanks();
      seen_key = key;
      bool idle;
      {
        std::lock_guard<std::mutex> lock(mu_);
        idle = !pending_ && !running_ && !draining_;
      }
      // After an auto verify, if one is due: the catch-up then starts from a verified table.
      if (options_.group_catch_up && stable && !needs_verify && idle &&
          (key != caught_key || executor_->GroupInDoubt())) {
        catch_up = executor_->GroupCatchUp();  // reads etcd: outside mu_
        caught_key = key;
      }
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [&] { return stop_ || pending_.has_value(); };
      if (needs_verify && !pending_ && !running_ && !draining_) {
        SyncRequest verify;
        verify.kind = JobKind::kVerify;
        verify.checkpoint = options_.verify_checkpoint;
        QueueLocked(std::move(verify));
        tried_key = key;
      }
      if (catch_up && !draining_) {
        if (!pending_ && !running_) {
          QueueLocked(std::move(*catch_up));
        } else {
          caught_key.clear();  // a request came first: check again once it is done
        }
      }
      Clock::time_point wake = Clock::time_point::max();
      if (options_.scrub_interval.count() > 0) wake = next_scrub;
      if (poll_ranks) wake = std::min(wake, Clock::now() + options_.attach_poll);
      if (wake == Clock::time_point::max()) {
        cv_.wait(lock, ready);
      } else {
        cv_.wait_until(lock, wake, ready);
      }
      if (!stop_ && !pending_ && !draining_ && options_.scrub_interval.count() > 0 &&
          Clock::now() >= next_scrub) {
        next_scrub = Clock::now() + options_.scrub_interval;
        if (executor_->CanScrub()) {
          SyncRequest scrub;
          scrub.kind = JobKind::kScrub;
          scrub.rate_bytes_per_s = options_.scrub_rate_bytes_per_s;
          QueueLocked(std::move(scrub));
        }
      }
      if (stop_) return;
      if (!pending_) continue;
      id = *pending_;
      pending_.reset();
      running_ = id;
      request = records_.at(id).request;
      running_kind_ = request.kind;
    }
    // Every line the job logs on this thread carries its id (and version).
    log::Fields context = {{"sync_id", id}};
    if (!request.version.empty()) context.emplace_back("version", request.version);
    log::ScopedContext log_context(std::move(context));
    const std::string kind_name(JobKindName(request.kind));
    if (request.kind == JobKind::kSync) {
      log::Info("sync started", {{"delta", RedactLocation(request.delta)}});
    } else if (request.kind == JobKind::kVerify) {
      log::Info("verify started", {{"checkpoint", RedactLocation(request.checkpoint)}});
    } else {
      log::Info("scrub started");
    }
    auto start = Clock::now();
    auto update = [&](const std::function<void(SyncRecord&)>& fn) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = records_.find(id);
      if (it != records_.end()) fn(it->second);
    };
    Status s = executor_->Run(request, update);
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    std::lock_guard<std::mutex> lock(mu_);
    SyncState final_state;
    auto it = records_.find(id);
    const bool diverged = it != records_.end() && it->second.diverges;
    if (s.ok()) {
      final_state = request.kind == JobKind::kSync ? SyncState::kLive : SyncState::kVerified;
    } else if (diverged) {
      final_state = SyncState::kDiverged;
    } else {
      final_state = request.kind == JobKind::kSync ? SyncState::kAborted : SyncState::kFailed;
    }
    if (it != records_.end()) {
      it->second.total_ms = ms;
      it->second.finished_unix = UnixNow();
      it->second.state = final_state;
      if (s.ok()) {
        it->second.error.clear();  // a scrub that finished before it could be stopped
      } else {
        // A scrub stopped for a sync keeps the reason Submit wrote.
        if (!(request.kind == JobKind::kScrub &&
              it->second.error.rfind("stopped for sync", 0) == 0)) {
          it->second.error = RedactCredentials(s.message());
        }
      }
    }
    finished_[JobKindName(request.kind)][SyncStateName(final_state)]++;
    if (s.ok()) {
      log::Info(kind_name + " " + SyncStateName(final_state), {{"ms", ms}});
    } else {
      log::Fields f = {{"ms", ms},
                       {"error", it != records_.end() ? it->second.error
                                                      : RedactCredentials(s.message())}};
      log::Write(final_state == SyncState::kDiverged ? log::Level::kError : log::Level::kWarn,
                 kind_name + " " + SyncStateName(final_state), f);
    }
    running_.reset();
    cv_.notify_all();  // Shutdown waits for the running job
    if (request.kind == JobKind::kScrub) next_scrub = Clock::now() + options_.scrub_interval;
  }
}

}  // namespace deltakv::sidecar
