// The device backends this build has (MakeDeviceBackend picks by name).
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "base/status.h"
#include "shim/device_backend.h"

namespace deltakv::shim {

// Host buffers of staged parts, kept for later parts once their scatter is committed or dropped:
// a sparse sync stages tens of parts of about a megabyte of ops and bytes each, and fresh
// buffers of that size are new pages (a page fault and a zeroed page per 4 KiB, a quarter of a
// rank's staging time when every part paid them). Holds at most `limit` bytes of capacity
// (0: no limit, so at most what one sync staged at once). Thread-safe: prepared scatters may
// be dropped on another thread than the one staging.
class BatchPool {
 public:
  void SetLimit(uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    limit_ = bytes;
    Trim();
  }
  // A kept batch (empty, its buffers' capacity kept), or a new one.
  ScatterBatch Take() {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) return {};
    ScatterBatch b = std::move(free_.back());
    free_.pop_back();
    kept_ -= Capacity(b);
    return b;
  }
  void Give(ScatterBatch b) {
    b.data.clear();
    b.ops.clear();
    const uint64_t bytes = Capacity(b);
    if (bytes == 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (limit_ != 0 && kept_ + bytes > limit_) return;  // freed
    kept_ += bytes;
    free_.push_back(std::move(b));
  }
  uint64_t kept_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return kept_;
  }

 private:
  static uint64_t Capacity(const ScatterBatch& b) {
    return b.data.capacity() + b.ops.capacity() * sizeof(CopyOp);
  }
  void Trim() {
    while (limit_ != 0 && kept_ > limit_ && !free_.empty()) {
      kept_ -= Capacity(free_.back());
      free_.pop_back();
    }
  }
  mutable std::mutex mu_;
  std::vector<ScatterBatch> free_;
  uint64_t kept_ = 0;
  uint64_t limit_ = 0;
};

// The default prepared scatter (DeviceBackend::PrepareScatter): the packed batch, kept in host
// memory for Scatter; with a pool, its buffers go back to it when the scatter is dropped.
class HostPreparedScatter final : public PreparedScatter {
 public:
  explicit HostPreparedScatter(ScatterBatch batch, std::shared_ptr<BatchPool> pool = nullptr)
      : batch_(std::move(batch)), pool_(std::move(pool)) {}
  ~HostPreparedScatter() override {
    if (pool_ != nullptr) pool_->Give(std::move(batch_));
  }
  uint64_t ops() const override { return batch_.ops.size(); }
  uint64_t bytes() const override { return batch_.data.size(); }
  const ScatterBatch& batch() const { return batch_; }

 private:
  ScatterBatch batch_;
  std::shared_ptr<BatchPool> pool_;
};

std::unique_ptr<DeviceBackend> MakeCpuBackend();
#ifdef DELTAKV_HAVE_CUDA
// FailedPrecondition when the CUDA runtime finds no usable device.
StatusOr<std::unique_ptr<DeviceBackend>> MakeCudaBackend();
#endif

}  // namespace deltakv::shim
