// The cpu device backend: "device" memory is host memory.
//
// Copies are mostly a few bytes each (the changed bytes of sparse deltas), so the loop inlines
// small sizes, and large batches are split across threads (disjoint destinations).
#include <algorithm>
#include <cstring>
#include <thread>
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
void CopyAll(std::span<const CopyOp> ops, unsigned threads) {
  constexpr size_t kPerThreadMin = 1 << 16;
  unsigned n = static_cast<unsigned>(std::min<size_t>(threads, ops.size() / kPerThreadMin));
  if (n <= 1) return CopyRange<kToDevice>(ops);
  std::vector<std::thread> pool;
  size_t chunk = (ops.size() + n - 1) / n;
  for (unsigned t = 1; t < n; ++t) {
    size_t begin = t * chunk;
    size_t end = std::min(ops.size(), begin + chunk);
    if (begin < end)
      pool.emplace_back([=] { CopyRange<kToDevice>(ops.subspan(begin, end - begin)); });
  }
  CopyRange<kToDevice>(ops.first(std::min(chunk, ops.size())));
  for (auto& th : pool) th.join();
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
  std::string_view name() const override { return "cpu"; }
  Status Gather(std::span<const CopyOp> ops) override {
    CopyAll<false>(ops, threads_);
    return Status::Ok();
  }
  Status Scatter(std::span<const CopyOp> ops) override {
    CopyAll<true>(ops, threads_);
    return Status::Ok();
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
    const unsigned n = static_cast<unsigned>(
        std::max<size_t>(1, std::min<size_t>(threads_, total / kPerThreadMin)));
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < n; ++t) {
      pool.emplace_back([&, t] { ScatterSlice(batches, total * t / n, total * (t + 1) / n); });
    }
    ScatterSlice(batches, 0, total / n);
    for (auto& th : pool) th.join();
    return Status::Ok();
  }
  // Weights are host memory: the old bytes are read in place while the part stages, in one
  // walk over its records (no Gather, no second copy of the old bytes).
  StatusOr<std::unique_ptr<PreparedScatter>> StagePart(const deltasync::WritePlanReader& plan,
                                                       const std::vector<LocalTensor>& tensors,
                                                       std::vector<StagedTensor>* sums) override {
    ASSIGN_OR_RETURN(ScatterBatch batch, StagePartToBatch(plan, tensors, nullptr, sums));
    return PrepareScatter(std::move(batch));
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
  // The demo engine's full-reload baseline copies on the same number of threads.
  unsigned threads_ = DefaultThreads();
};

}  // namespace

std::unique_ptr<DeviceBackend> MakeCpuBackend() { return std::make_unique<CpuBackend>(); }

}  // namespace deltakv::shim
