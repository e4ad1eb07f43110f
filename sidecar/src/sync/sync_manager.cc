#include "sync/sync_manager.h"

#include <chrono>
#include <cstdio>

namespace deltakv::sidecar {

SyncManager::SyncManager(std::unique_ptr<SyncExecutor> executor, size_t history,
                         std::function<void()> worker_setup)
    : executor_(std::move(executor)),
      history_limit_(history),
      worker_setup_(std::move(worker_setup)),
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
  if (request.version.empty()) return InvalidArgument("'version' must be a non-empty string");
  if (request.delta.empty()) return InvalidArgument("'delta' must be a non-empty string");
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_ || running_) {
    const std::string& busy = running_ ? *running_ : *pending_;
    return FailedPrecondition("sync " + busy + " is in progress; one sync runs at a time");
  }
  char id[32];
  std::snprintf(id, sizeof(id), "s%06llu", static_cast<unsigned long long>(next_id_++));
  SyncRecord rec;
  rec.id = id;
  rec.request = std::move(request);
  rec.created_unix = UnixNow();
  records_[rec.id] = rec;
  order_.push_back(rec.id);
  while (order_.size() > history_limit_) {
    records_.erase(order_.front());
    order_.pop_front();
  }
  pending_ = rec.id;
  cv_.notify_all();
  return rec.id;
}

std::optional<SyncRecord> SyncManager::Get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return std::nullopt;
  return it->second;
}

std::vector<SyncRecord> SyncManager::History() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SyncRecord> out;
  for (auto it = order_.rbegin(); it != order_.rend(); ++it) out.push_back(records_.at(*it));
  return out;
}

uint64_t SyncManager::succeeded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return succeeded_;
}

uint64_t SyncManager::failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

void SyncManager::WorkerLoop() {
  if (worker_setup_) worker_setup_();
  for (;;) {
    std::string id;
    SyncRequest request;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || pending_.has_value(); });
      if (stop_) return;
      id = *pending_;
      pending_.reset();
      running_ = id;
      request = records_.at(id).request;
    }
    auto start = std::chrono::steady_clock::now();
    auto update = [&](const std::function<void(SyncRecord&)>& fn) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = records_.find(id);
      if (it != records_.end()) fn(it->second);
    };
    Status s = executor_->Run(request, update);
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::lock_guard<std::mutex> lock(mu_);
    auto it = records_.find(id);
    if (it != records_.end()) {
      it->second.total_ms = ms;
      it->second.finished_unix = UnixNow();
      if (s.ok()) {
        it->second.state = SyncState::kLive;
      } else {
        it->second.state = SyncState::kAborted;
        it->second.error = s.message();
      }
    }
    (s.ok() ? succeeded_ : failed_)++;
    running_.reset();
  }
}

}  // namespace deltakv::sidecar
