// The cpu device backend: "device" memory is host memory.
//
// Copies are mostly a few bytes each (the changed bytes of sparse deltas), so the loop inlines
// small sizes, and large batches are split across threads (disjoint destinations).
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "backends.h"
#include "base/parallel.h"
#include "shim/device_backend.h"
#include "shim/plan_stage.h"

namespace deltakv::shim {
namespace {

// Copies of up to 16 bytes as two overlapping loads and stores of the widest size that fits
// (no library call, one branch per size class); each byte written lies inside [dst, dst + n).
inline void CopySmall(uint8_t* dst, const uint8_t* src, size_t n) {
  auto two = [&](auto word) {
    using W = decltype(word);
    W a, b;
    std::memcpy(&a, src, sizeof(W));
    std::memcpy(&b, src + n - sizeof(W), sizeof(W));
    std::memcpy(dst, &a, sizeof(W));
    std::memcpy(dst + n - sizeof(W), &b, sizeof(W));
  };
  if (n <= 1) {
    if (n == 1) *dst = *src;
  } else if (n < 4) {
    two(uint16_t{});
  } else if (n < 8) {
    two(uint32_t{});
  } else if (n <= 16) {
    two(uint64_t{});
  } else {
    std::memcpy(dst, src, n);
  }
}

template <bool kToDevice>
void CopyRange(std::span<const CopyOp> ops) {
  for (const CopyOp& op : ops) {
    if (kToDevice) {
      CopySmall(static_cast<uint8_t*>(op.device), static_cast<const uint8_t*>(op.host), op.bytes);
    } else {
      CopySmall(static_cast<uint8_t*>(op.host), static_cast<const uint8_t*>(op.device), op.bytes);
    }
  }
}

template <bool kToDevice>
void CopyAll(std::span<const CopyOp> ops, WorkerCrew& crew) {
  constexpr size_t kPerThreadMin = 1 << 16;
  const unsigned n =
      static_cast<unsigned>(std::min<size_t>(crew.size(), ops.size() / kPerThreadMin));
  if (n <= 1) return CopyRange<kToDevice>(ops);
  const size_t chunk = (ops.size() + n - 1) / n;
  crew.Run(n, [&](unsigned t) {
    const size_t begin = std::min(ops.size(), t * chunk);
    CopyRange<kToDevice>(ops.subspan(begin, std::min(ops.size() - begin, chunk)));
  });
}

// Writes ops [begin, end) of the concatenation of `batches`, prefetching destinations ahead
// (the new bytes are sequential; the destinations are scattered lines, usually not in cache).
void ScatterSlice(const std::vector<std::span<const CopyOp>>& batches, size_t begin, size_t end) {
  constexpr size_t kAhead = 32;
  size_t base = 0;
  for (std::span<const CopyOp> ops : batches) {
    const size_t lo = std::max(begin, base), hi = std::min(end, base + ops.size());
    for (size_t i = lo; i < hi; ++i) {
      if (i + kAhead < hi) __builtin_prefetch(ops[i + kAhead - base].device, 1);
      const CopyOp& op = ops[i - base];
      CopySmall(static_cast<uint8_t*>(op.device), static_cast<const uint8_t*>(op.host), op.bytes);
    }
    base += ops.size();
    if (base >= end) break;
  }
}

class CpuBackend final : public DeviceBackend {
 public:
  ~CpuBackend() override {
    // A forked process holds its parent's crew object without its threads: nothing to join.
    if (CrewInherited()) (void)crew_.release();
  }
  std::string_view name() const override { return "cpu"; }
  Status Gather(std::span<const CopyOp> ops) override {
    CopyAll<false>(ops, crew());
    return Status::Ok();
  }
  Status Scatter(std::span<const CopyOp> ops) override {
    CopyAll<true>(ops, crew());
    return Status::Ok();
  }
  // The batch's buffers go back to the pool when the scatter is dropped (BatchPool).
  StatusOr<std::unique_ptr<PreparedScatter>> PrepareScatter(ScatterBatch batch) override {
    crew();  // started before the pause that commits this batch
    return std::unique_ptr<PreparedScatter>(new HostPreparedScatter(std::move(batch), pool_));
  }
  // Every batch of the commit in one pass, split evenly over the threads by op count.
  Status CommitScatters(std::span<const std::unique_ptr<PreparedScatter>> prepared) override {
    std::vector<std::span<const CopyOp>> batches;
    size_t total = 0;
    for (const std::unique_ptr<PreparedScatter>& p : prepared) {
      auto* host = dynamic_cast<HostPreparedScatter*>(p.get());
      if (host == nullptr) return Internal("scatter prepared by another backend");
      batches.emplace_back(host->batch().ops);
      total += host->batch().ops.size();
    }
    constexpr size_t kPerThreadMin = 1 << 14;
    WorkerCrew& workers = crew();
    const unsigned n = static_cast<unsigned>(
        std::max<size_t>(1, std::min<size_t>(workers.size(), total / kPerThreadMin)));
    workers.Run(n, [&](unsigned t) { ScatterSlice(batches, total * t / n, total * (t + 1) / n); });
    return Status::Ok();
  }
  // Weights are host memory: the old bytes are read in place while the part stages, in one
  // walk over its records (no Gather, no second copy of the old bytes).
  StatusOr<std::unique_ptr<PreparedScatter>> StagePart(const deltasync::WritePlanReader& plan,
                                                       const std::vector<LocalTensor>& tensors,
                                                       std::vector<StagedTensor>* sums) override {
    return StagePartAndRegions(plan, tensors, sums, nullptr);
  }
  // The regions are listed in the staging walk (no second walk over the part).
  StatusOr<std::unique_ptr<PreparedScatter>> StagePartAndRegions(
      const deltasync::WritePlanReader& plan, const std::vector<LocalTensor>& tensors,
      std::vector<StagedTensor>* sums, TouchedRegions* regions) override {
    ASSIGN_OR_RETURN(ScatterBatch batch,
                     StagePartToBatch(plan, tensors, nullptr, sums, pool_->Take(), regions));
    return PrepareScatter(std::move(batch));
  }
  // Nothing to set aside on the host: the reserve bounds the staging buffers kept for later
  // syncs (BatchPool; 0 keeps as many as one sync staged at once).
  Status ReserveStaging(uint64_t bytes, const std::vector<LocalTensor>&) override {
    pool_->SetLimit(bytes);
    return Status::Ok();
  }
  Status ChecksumRanges(std::span<const ChecksumRange> ranges,
                        std::span<deltasync::AdlerDelta> out) override {
    if (out.size() != ranges.size()) return InvalidArgument("one result per checksum range");
    for (size_t i = 0; i < ranges.size(); ++i) {
      out[i].AddBytes(ranges[i].position,
                      {static_cast<const uint8_t*>(ranges[i].device), ranges[i].bytes});
    }
    return Status::Ok();
  }

 private:
  // The copy threads, one per CPU (the demo engine's full-reload baseline copies on as many),
  // started by the first staging or copy so that a commit's pause never creates a thread. A
  // process forked after that has none of the parent's helpers: it starts its own (the
  // parent's crew object is left alone, its threads are not this process's to join).
  WorkerCrew& crew() {
    if (crew_ == nullptr || CrewInherited()) {
      if (crew_ != nullptr) (void)crew_.release();
      crew_ = std::make_unique<WorkerCrew>(DefaultThreads() - 1);
      crew_pid_ = getpid();
    }
    return *crew_;
  }
  // A crew object this process got by fork: its threads live in the parent.
  bool CrewInherited() const { return crew_ != nullptr && crew_pid_ != getpid(); }
  std::unique_ptr<WorkerCrew> crew_;
  pid_t crew_pid_ = 0;
  // Shared with the prepared scatters, which may outlive the backend.
  std::shared_ptr<BatchPool> pool_ = std::make_shared<BatchPool>();
};

}  // namespace

std::unique_ptr<DeviceBackend> MakeCpuBackend() { return std::make_unique<CpuBackend>(); }

}  // namespace deltakv::shim
