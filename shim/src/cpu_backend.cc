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

// The ops of one prepared scatter in a commit: CopyOps, or a staged part's packed ops.
struct CommitSegment {
  std::span<const CopyOp> copies;
  const PackedBatch* packed = nullptr;
  size_t size() const { return packed != nullptr ? packed->ops.size() : copies.size(); }
};

// The data offset of packed op `i`: from the mark before it, adding the lengths in between.
uint64_t PackedOffset(const PackedBatch& b, size_t i) {
  const size_t mark = i / kPackedMarkEvery;
  uint64_t at = b.marks[mark];
  for (size_t k = mark * kPackedMarkEvery; k < i; ++k) at += PackedLength(b.ops[k]);
  return at;
}

// Writes ops [begin, end) of the concatenation of `segments`, prefetching destinations ahead
// (the new bytes are sequential; the destinations are scattered lines, usually not in cache).
void ScatterSlice(const std::vector<CommitSegment>& segments, size_t begin, size_t end) {
  constexpr size_t kAhead = 32;
  size_t base = 0;
  for (const CommitSegment& seg : segments) {
    const size_t n = seg.size();
    const size_t lo = std::max(begin, base), hi = std::min(end, base + n);
    if (lo < hi && seg.packed != nullptr) {
      const uint64_t* ops = seg.packed->ops.data();
      const uint8_t* src = seg.packed->data.data() + PackedOffset(*seg.packed, lo - base);
      const size_t l = lo - base, h = hi - base;
      for (size_t i = l; i < h; ++i) {
        if (i + kAhead < h) __builtin_prefetch(PackedDevice(ops[i + kAhead]), 1);
        const uint32_t len = PackedLength(ops[i]);
        CopySmall(PackedDevice(ops[i]), src, len);
        src += len;
      }
    } else {
      const std::span<const CopyOp> ops = seg.copies;
      for (size_t i = lo; i < hi; ++i) {
        if (i + kAhead < hi) __builtin_prefetch(ops[i + kAhead - base].device, 1);
        const CopyOp& op = ops[i - base];
        CopySmall(static_cast<uint8_t*>(op.device), static_cast<const uint8_t*>(op.host), op.bytes);
      }
    }
    base += n;
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
  Status CommitScatters(std::span<const std::unique_ptr<PreparedScatter>> prepared) override {
    std::vector<const PreparedScatter*> list;
    list.reserve(prepared.size());
    for (const std::unique_ptr<PreparedScatter>& p : prepared) list.push_back(p.get());
    return Commit(list);
  }
  Status CommitScatter(PreparedScatter& prepared) override { return Commit({&prepared}); }
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
    if (!PackedAddressable(tensors)) {
      ASSIGN_OR_RETURN(ScatterBatch batch,
                       StagePartToBatch(plan, tensors, nullptr, sums, pool_->Take(), regions));
      return PrepareScatter(std::move(batch));
    }
    ASSIGN_OR_RETURN(PackedBatch batch,
                     StagePartPacked(plan, tensors, sums, packed_pool_->Take(), regions));
    crew();  // started before the pause that commits this batch
    return std::unique_ptr<PreparedScatter>(
        new PackedPreparedScatter(std::move(batch), packed_pool_));
  }
  // Nothing to set aside on the host: the reserve bounds the staging buffers kept for later
  // syncs (BatchPool; 0 keeps as many as one sync staged at once).
  Status ReserveStaging(uint64_t bytes, const std::vector<LocalTensor>&) override {
    pool_->SetLimit(bytes);
    packed_pool_->SetLimit(bytes);
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
  // Every batch of the commit in one pass, split evenly over the threads by op count.
  Status Commit(const std::vector<const PreparedScatter*>& prepared) {
    std::vector<CommitSegment> segments;
    segments.reserve(prepared.size());
    size_t total = 0;
    for (const PreparedScatter* p : prepared) {
      if (auto* packed = dynamic_cast<const PackedPreparedScatter*>(p)) {
        segments.push_back({{}, &packed->batch()});
      } else if (auto* host = dynamic_cast<const HostPreparedScatter*>(p)) {
        segments.push_back({host->batch().ops, nullptr});
      } else {
        return Internal("scatter prepared by another backend");
      }
      total += segments.back().size();
    }
    constexpr size_t kPerThreadMin = 1 << 14;
    WorkerCrew& workers = crew();
    const unsigned n = static_cast<unsigned>(
        std::max<size_t>(1, std::min<size_t>(workers.size(), total / kPerThreadMin)));
    workers.Run(n, [&](unsigned t) { ScatterSlice(segments, total * t / n, total * (t + 1) / n); });
    return Status::Ok();
  }
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
  std::shared_ptr<PackedPool> packed_pool_ = std::make_shared<PackedPool>();
};

}  // namespace

std::unique_ptr<DeviceBackend> MakeCpuBackend() { return std::make_unique<CpuBackend>(); }

}  // namespace deltakv::shim
