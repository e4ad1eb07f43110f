// The device backends this build has (MakeDeviceBackend picks by name).
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "base/status.h"
#include "shim/device_backend.h"
#include "shim/plan_stage.h"

namespace deltakv::shim {

// The cpu backend's staged part: its new bytes back to back in `data` and one word per op,
// device address << 16 | length (1 to kPackedMaxLength; a longer range takes several ops),
// whose bytes follow the previous op's in `data`. 8 bytes per changed range where a CopyOp
// (ScatterBatch) takes 24: a sparse sync's ranges are a byte or two each, so the ops are most
// of a rank's staging memory. marks[k] is the data offset of op k * kPackedMarkEvery, so a
// commit thread can start at any op.
struct PackedBatch {
  std::vector<uint8_t> data;
  std::vector<uint64_t> ops;
  std::vector<uint64_t> marks;
  uint64_t ranges = 0;  // the plan records staged (PreparedScatter::ops)
};
inline constexpr uint32_t kPackedMaxLength = 0xFFFF;
inline constexpr size_t kPackedMarkEvery = 4096;
// Packed ops hold device addresses below 2^48 (every user address on x86-64 and arm64 with
// 4-level page tables).
inline constexpr uint64_t kPackedAddressLimit = uint64_t{1} << 48;
inline uint64_t PackOp(const uint8_t* device, uint32_t length) {
  return reinterpret_cast<uintptr_t>(device) << 16 | length;
}
inline uint8_t* PackedDevice(uint64_t op) { return reinterpret_cast<uint8_t*>(op >> 16); }
inline uint32_t PackedLength(uint64_t op) { return static_cast<uint32_t>(op & 0xFFFF); }

// True if every registered tensor lies below kPackedAddressLimit (packed ops can name it).
bool PackedAddressable(const std::vector<LocalTensor>& tensors);

// StagePartToBatch without a gather (weights in host memory), into a PackedBatch built in
// `recycled`'s buffers. REQUIRES: PackedAddressable(tensors). Same checks, errors and sums.
StatusOr<PackedBatch> StagePartPacked(const deltasync::WritePlanReader& plan,
                                      const std::vector<LocalTensor>& tensors,
                                      std::vector<StagedTensor>* sums, PackedBatch recycled = {},
                                      TouchedRegions* regions = nullptr);

// Host buffers of staged parts, kept for later parts once their scatter is committed or dropped:
// a sparse sync stages tens of parts of about a megabyte of ops and bytes each, and fresh
// buffers of that size are new pages (a page fault and a zeroed page per 4 KiB, a quarter of a
// rank's staging time when every part paid them). Holds at most `limit` bytes of capacity
// (0: no limit, so at most what one sync staged at once). Thread-safe: prepared scatters may
// be dropped on another thread than the one staging. Batch: ScatterBatch or PackedBatch.
template <class Batch>
class BufferPool {
 public:
  void SetLimit(uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    limit_ = bytes;
    Trim();
  }
  // A kept batch (empty, its buffers' capacity kept), or a new one.
  Batch Take() {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) return {};
    Batch b = std::move(free_.back());
    free_.pop_back();
    kept_ -= Capacity(b);
    return b;
  }
  void Give(Batch b) {
    b.data.clear();
    b.ops.clear();
    if constexpr (requires { b.marks; }) b.marks.clear();
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
  static uint64_t Capacity(const Batch& b) {
    uint64_t bytes = b.data.capacity() + b.ops.capacity() * sizeof(b.ops[0]);
    if constexpr (requires { b.marks; }) bytes += b.marks.capacity() * sizeof(uint64_t);
    return bytes;
  }
  void Trim() {
    while (limit_ != 0 && kept_ > limit_ && !free_.empty()) {
      kept_ -= Capacity(free_.back());
      free_.pop_back();
    }
  }
  mutable std::mutex mu_;
  std::vector<Batch> free_;
  uint64_t kept_ = 0;
  uint64_t limit_ = 0;
};
using BatchPool = BufferPool<ScatterBatch>;
using PackedPool = BufferPool<PackedBatch>;

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

// The cpu backend's prepared scatter of a staged part (StagePartPacked); its buffers go back to
// the pool when it is dropped.
class PackedPreparedScatter final : public PreparedScatter {
 public:
  PackedPreparedScatter(PackedBatch batch, std::shared_ptr<PackedPool> pool)
      : batch_(std::move(batch)), pool_(std::move(pool)) {}
  ~PackedPreparedScatter() override {
    if (pool_ != nullptr) pool_->Give(std::move(batch_));
  }
  uint64_t ops() const override { return batch_.ranges; }
  uint64_t bytes() const override { return batch_.data.size(); }
  const PackedBatch& batch() const { return batch_; }

 private:
  PackedBatch batch_;
  std::shared_ptr<PackedPool> pool_;
};

std::unique_ptr<DeviceBackend> MakeCpuBackend();
#ifdef DELTAKV_HAVE_CUDA
// FailedPrecondition when the CUDA runtime finds no usable device.
StatusOr<std::unique_ptr<DeviceBackend>> MakeCudaBackend();
#endif

}  // namespace deltakv::shim
