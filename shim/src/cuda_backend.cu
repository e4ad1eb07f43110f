// The cuda device backend: engine weights are CUDA device memory on one device.
//
// Sparse deltas change a few bytes at millions of places, so copies are never issued one by
// one. Every batch becomes an array of descriptors {device address, staging offset, length}
// (long ranges split into pieces of at most kPieceBytes) and one kernel moves all of them
// between the device addresses and a contiguous device staging buffer; staging crosses
// PCIe in one copy. PrepareScatter uploads a commit's bytes and descriptors to device memory
// before the pause, so CommitScatter, the part inside the pause, is a single kernel launch.
//
// Errors: InvalidArgument for a pointer that is not device memory of the backend's device;
// Internal for CUDA runtime failures (with cudaGetErrorString), ResourceExhausted when device
// or pinned memory cannot be allocated.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "adler_pieces.h"
#include "backends.h"
#include "deltasync/write_plan.h"
#include "shim/device_backend.h"
#include "shim/plan_stage.h"

namespace deltakv::shim {
namespace {

// Bytes one thread moves at most; longer ranges are split.
constexpr uint32_t kPieceBytes = 64;
// Staging bytes per round trip of an unprepared Gather.
constexpr uint64_t kGatherChunkBytes = 256ull << 20;

struct Desc {
  uint64_t device;   // device address
  uint32_t staging;  // offset in the staging buffer (< 4 GiB per launch)
  uint32_t length;   // <= kPieceBytes
};
static_assert(sizeof(Desc) == 16);

__device__ inline void CopyPiece(uint8_t* dst, const uint8_t* src, uint32_t n) {
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | n) & 7) == 0) {
    for (uint32_t i = 0; i < n; i += 8) {
      *reinterpret_cast<uint64_t*>(dst + i) = *reinterpret_cast<const uint64_t*>(src + i);
    }
  } else {
    for (uint32_t i = 0; i < n; ++i) dst[i] = src[i];
  }
}

// kToDevice: staging -> device addresses (scatter); otherwise device addresses -> staging.
template <bool kToDevice>
__global__ void MovePieces(const Desc* descs, uint64_t count, uint8_t* staging) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < count;
       i += uint64_t{gridDim.x} * blockDim.x) {
    const Desc d = descs[i];
    uint8_t* dev = reinterpret_cast<uint8_t*>(d.device);
    if (kToDevice) {
      CopyPiece(dev, staging + d.staging, d.length);
    } else {
      CopyPiece(staging + d.staging, dev, d.length);
    }
  }
}

// Adler-32 partial sums of live weights (DeviceBackend::ChecksumRanges): per piece of at most
// kSumPieceBytes, s1 = sum b_j and s2 = sum (position + j) * b_j, reduced mod M, added to the
// range's output words. One block per piece; each thread reads 16-byte words and sums them
// with no division per byte (adler_pieces.h, which also bounds the sums), and every value
// that reaches the atomics is below M, so 2^64 / M pieces could add to one output.
constexpr uint32_t kAdlerMod = 65521;
constexpr uint32_t kSumPieceBytes = 64 << 10;
constexpr unsigned kSumThreads = 256;
static_assert(kSumThreads >= 16 && kSumPieceBytes <= (1u << 17), "adler_pieces.h bounds");

struct SumDesc {
  uint64_t device;    // first byte of the piece
  uint32_t position;  // canonical position of that byte, mod M
  uint32_t length;    // <= kSumPieceBytes
  uint32_t out;       // index of the range (output words 2*out, 2*out+1)
  uint32_t reserved;
};
static_assert(sizeof(SumDesc) == 24);

__global__ void SumPieces(const SumDesc* descs, uint64_t count, unsigned long long* sums) {
  __shared__ unsigned long long r1[kSumThreads];
  __shared__ unsigned long long r2[kSumThreads];
  for (uint64_t p = blockIdx.x; p < count; p += gridDim.x) {
    const SumDesc d = descs[p];
    const uint8_t* src = reinterpret_cast<const uint8_t*>(d.device);
    uint64_t s1 = 0, s2 = 0;
    adler_pieces::ThreadShare(src, d.length, d.position, threadIdx.x, blockDim.x, &s1, &s2);
    r1[threadIdx.x] = s1 % kAdlerMod;
    r2[threadIdx.x] = s2 % kAdlerMod;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
      if (threadIdx.x < stride) {
        r1[threadIdx.x] += r1[threadIdx.x + stride];
        r2[threadIdx.x] += r2[threadIdx.x + stride];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      atomicAdd(&sums[2 * uint64_t{d.out}], r1[0] % kAdlerMod);
      atomicAdd(&sums[2 * uint64_t{d.out} + 1], r2[0] % kAdlerMod);
    }
    __syncthreads();  // r1/r2 are reused by the next piece
  }
}

// Staging a plan part on the device (DeviceBackend::StagePart): per piece of a record, read the
// old device bytes, XOR them into the uploaded plan bytes (which become the new bytes, kept in
// device memory for the scatter), and add the piece's partial sums to its plan tensor's words:
// [4t] s1 and [4t+1] s2 of the change new - old over owned positions, [4t+2], [4t+3] the sums
// of the new bytes for full-verify tensors. Signed terms are reduced into [0, M) per thread.
struct StageDesc {
  uint64_t device;    // old bytes
  uint32_t staging;   // offset of the piece in the uploaded bytes
  uint32_t length;    // <= kPieceBytes
  uint32_t position;  // canonical position of the first byte, mod M
  uint32_t tensor;    // plan tensor
  uint32_t flags;     // bit 0 owner, bit 1 full-verify sums
  uint32_t reserved;
};
static_assert(sizeof(StageDesc) == 32);

__global__ void StageXor(const StageDesc* descs, uint64_t count, uint8_t* bytes,
                         unsigned long long* sums) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < count;
       i += uint64_t{gridDim.x} * blockDim.x) {
    const StageDesc d = descs[i];
    const uint8_t* old_bytes = reinterpret_cast<const uint8_t*>(d.device);
    uint8_t* piece = bytes + d.staging;
    long long d1 = 0, d2 = 0;
    unsigned long long f1 = 0, f2 = 0;
    for (uint32_t j = 0; j < d.length; ++j) {
      const int old_byte = old_bytes[j];
      const int new_byte = old_byte ^ piece[j];
      piece[j] = static_cast<uint8_t>(new_byte);
      const long long w = d.position + j;  // only the sums mod M matter; below 2^17
      d1 += new_byte - old_byte;
      d2 += w * (new_byte - old_byte);
      f1 += static_cast<unsigned long long>(new_byte);
      f2 += static_cast<unsigned long long>(w) * new_byte;
    }
    unsigned long long* t = sums + 4 * uint64_t{d.tensor};
    if (d.flags & 1) {
      const long long m = kAdlerMod;
      const unsigned long long a = static_cast<unsigned long long>(((d1 % m) + m) % m);
      const unsigned long long b = static_cast<unsigned long long>(((d2 % m) + m) % m);
      if (a != 0) atomicAdd(&t[0], a);
      if (b != 0) atomicAdd(&t[1], b);
    }
    if (d.flags & 2) {
      if (f1 % kAdlerMod != 0) atomicAdd(&t[2], f1 % kAdlerMod);
      if (f2 % kAdlerMod != 0) atomicAdd(&t[3], f2 % kAdlerMod);
    }
  }
}

Status CudaError(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  if (e == cudaErrorMemoryAllocation) {
    return ResourceExhausted(std::string(what) + ": " + cudaGetErrorString(e));
  }
  return Internal(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}

#define CUDA_RETURN_IF_ERROR(expr, what) RETURN_IF_ERROR(CudaError((expr), what))

// Appends descriptors for one op (split into pieces) whose bytes sit at staging offset `at`.
void AddPieces(uint64_t device, uint64_t at, uint64_t bytes, std::vector<Desc>* out) {
  for (uint64_t done = 0; done < bytes; done += kPieceBytes) {
    out->push_back({device + done, static_cast<uint32_t>(at + done),
                    static_cast<uint32_t>(std::min<uint64_t>(kPieceBytes, bytes - done))});
  }
}

unsigned Blocks(uint64_t count) {
  return static_cast<unsigned>(std::clamp<uint64_t>((count + 255) / 256, 1, 1u << 20));
}

// Pinned host memory freed on destruction.
struct PinnedBuffer {
  void* ptr = nullptr;
  uint64_t size = 0;
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (ptr != nullptr) cudaFreeHost(ptr);
  }
  Status Reserve(uint64_t n) {
    if (n <= size) return Status::Ok();
    if (ptr != nullptr) cudaFreeHost(ptr);
    ptr = nullptr;
    size = 0;
    CUDA_RETURN_IF_ERROR(cudaMallocHost(&ptr, std::max<uint64_t>(n, 1)), "cudaMallocHost");
    size = n;
    return Status::Ok();
  }
  uint8_t* bytes() { return static_cast<uint8_t*>(ptr); }
};

// Device memory from the stream-ordered allocator: allocated and freed in order on the
// handle's stream, out of the device's memory pool, whose release threshold the backend raises
// so freed blocks stay in the pool. A prepared scatter released while the engine serves returns
// its memory to the pool instead of calling cudaFree (which would synchronize the device).
struct PoolBuffer {
  void* ptr = nullptr;
  uint64_t size = 0;
  cudaStream_t stream = nullptr;
  PoolBuffer() = default;
  PoolBuffer(const PoolBuffer&) = delete;
  PoolBuffer& operator=(const PoolBuffer&) = delete;
  ~PoolBuffer() { Release(); }
  // Returns the memory to the pool (before the stream it was allocated on is destroyed).
  void Release() {
    if (ptr != nullptr) cudaFreeAsync(ptr, stream);
    ptr = nullptr;
    size = 0;
  }
  Status Reserve(uint64_t n, cudaStream_t on) {
    if (n <= size) return Status::Ok();
    if (ptr != nullptr) cudaFreeAsync(ptr, stream);
    ptr = nullptr;
    size = 0;
    stream = on;
    CUDA_RETURN_IF_ERROR(cudaMallocAsync(&ptr, std::max<uint64_t>(n, 1), on), "cudaMallocAsync");
    size = n;
    return Status::Ok();
  }
};

class CudaPreparedScatter final : public PreparedScatter {
 public:
  uint64_t ops() const override { return ops_; }
  uint64_t bytes() const override { return data.size; }

  PoolBuffer data;
  PoolBuffer descs;
  uint64_t pieces = 0;
  uint64_t ops_ = 0;
  int device = 0;
};

class CudaBackend final : public DeviceBackend {
 public:
  explicit CudaBackend(int device_count) : device_count_(device_count) {}
  ~CudaBackend() override {
    if (stream_ != nullptr) {
      cudaSetDevice(device_);
      staging_.Release();
      descs_.Release();
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
  }

  std::string_view name() const override { return "cuda"; }

  Status Gather(std::span<const CopyOp> ops) override {
    if (ops.empty()) return Status::Ok();
    RETURN_IF_ERROR(Bind(ops));
    size_t begin = 0;
    while (begin < ops.size()) {
      // One round trip: ops [begin, end) whose bytes fit the chunk (a larger op alone).
      std::vector<Desc> descs;
      uint64_t staged = 0;
      size_t end = begin;
      while (end < ops.size() &&
             (end == begin || staged + ops[end].bytes <= kGatherChunkBytes)) {
        AddPieces(reinterpret_cast<uint64_t>(ops[end].device), staged, ops[end].bytes, &descs);
        staged += ops[end].bytes;
        ++end;
      }
      if (staged > UINT32_MAX) return InvalidArgument("one gather op is larger than 4 GiB");
      RETURN_IF_ERROR(staging_.Reserve(staged, stream_));
      RETURN_IF_ERROR(descs_.Reserve(descs.size() * sizeof(Desc), stream_));
      RETURN_IF_ERROR(pinned_.Reserve(std::max<uint64_t>(staged, descs.size() * sizeof(Desc))));
      std::memcpy(pinned_.ptr, descs.data(), descs.size() * sizeof(Desc));
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(descs_.ptr, pinned_.ptr, descs.size() * sizeof(Desc),
                                           cudaMemcpyHostToDevice, stream_),
                           "descriptor upload");
      MovePieces<false><<<Blocks(descs.size()), 256, 0, stream_>>>(
          static_cast<const Desc*>(descs_.ptr), descs.size(), static_cast<uint8_t*>(staging_.ptr));
      CUDA_RETURN_IF_ERROR(cudaGetLastError(), "gather kernel launch");
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(pinned_.ptr, staging_.ptr, staged,
                                           cudaMemcpyDeviceToHost, stream_),
                           "staging download");
      CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), "gather");
      uint64_t at = 0;
      for (size_t i = begin; i < end; ++i) {
        std::memcpy(ops[i].host, pinned_.bytes() + at, ops[i].bytes);
        at += ops[i].bytes;
      }
      begin = end;
    }
    return Status::Ok();
  }

  // On the device: one kernel over pieces of every range, sums kept in device words, one copy
  // back. Device bytes are only read.
  Status ChecksumRanges(std::span<const ChecksumRange> ranges,
                        std::span<deltasync::AdlerDelta> out) override {
    if (out.size() != ranges.size()) return InvalidArgument("one output per range");
    if (ranges.empty()) return Status::Ok();
    if (ranges.size() > UINT32_MAX / 2) return InvalidArgument("too many ranges in one call");
    std::vector<CopyOp> probes;
    for (const ChecksumRange& r : ranges) {
      if (r.bytes > 0) probes.push_back({const_cast<void*>(r.device), nullptr, r.bytes});
    }
    if (probes.empty()) return Status::Ok();
    RETURN_IF_ERROR(Bind(probes));
    std::vector<SumDesc> descs;
    for (uint32_t i = 0; i < ranges.size(); ++i) {
      const ChecksumRange& r = ranges[i];
      for (uint64_t done = 0; done < r.bytes; done += kSumPieceBytes) {
        descs.push_back({reinterpret_cast<uint64_t>(r.device) + done,
                         static_cast<uint32_t>((r.position + done) % kAdlerMod),
                         static_cast<uint32_t>(std::min<uint64_t>(kSumPieceBytes, r.bytes - done)),
                         i, 0});
      }
    }
    const uint64_t sum_bytes = 2 * sizeof(unsigned long long) * ranges.size();
    RETURN_IF_ERROR(descs_.Reserve(descs.size() * sizeof(SumDesc), stream_));
    RETURN_IF_ERROR(staging_.Reserve(sum_bytes, stream_));
    RETURN_IF_ERROR(Upload(descs_.ptr, descs.data(), descs.size() * sizeof(SumDesc)));
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(staging_.ptr, 0, sum_bytes, stream_), "sums reset");
    const unsigned blocks =
        static_cast<unsigned>(std::clamp<uint64_t>(descs.size(), 1, uint64_t{1} << 16));
    SumPieces<<<blocks, kSumThreads, 0, stream_>>>(static_cast<const SumDesc*>(descs_.ptr),
                                                   descs.size(),
                                                   static_cast<unsigned long long*>(staging_.ptr));
    CUDA_RETURN_IF_ERROR(cudaGetLastError(), "checksum kernel launch");
    ASSIGN_OR_RETURN(const unsigned long long* sums, DownloadSums(sum_bytes));
    for (size_t i = 0; i < ranges.size(); ++i) {
      out[i].Merge(deltasync::AdlerDelta::FromSums(static_cast<uint32_t>(sums[2 * i] % kAdlerMod),
                                                   static_cast<uint32_t>(sums[2 * i + 1] % kAdlerMod)));
    }
    return Status::Ok();
  }

  // One part in one walk over its records, which checks each record and writes its bytes and
  // descriptors straight into a pinned buffer; then three uploads, one kernel that XORs and sums,
  // and the sums' download go onto the stream back to back, and the call waits once. The new
  // bytes stay on the device as the prepared scatter's data.
  StatusOr<std::unique_ptr<PreparedScatter>> StagePart(
      const deltasync::WritePlanReader& part, const std::vector<LocalTensor>& tensors,
      std::vector<StagedTensor>* sums) override {
    // The pinned buffers are sized from exact counts: a lazily opened part is counted first.
    ASSIGN_OR_RETURN(const deltasync::WritePlanReader plan, part.Counted());
    const std::span<const deltasync::PlanTensor> plan_tensors = plan.tensors();
    if (sums->size() != plan_tensors.size()) return Internal("one sum per plan tensor");
    auto p = std::make_unique<CudaPreparedScatter>();
    const uint64_t records = plan.record_count();
    const uint64_t data_bytes = plan.data_bytes();
    if (records == 0) return std::unique_ptr<PreparedScatter>(std::move(p));
    if (data_bytes > UINT32_MAX) return InvalidArgument("a plan part above 4 GiB must be split");
    // Each record splits into at most length / kPieceBytes + 1 pieces.
    const uint64_t max_pieces = records + data_bytes / kPieceBytes;
    const uint64_t sum_bytes = 4 * sizeof(unsigned long long) * plan_tensors.size();
    auto align = [](uint64_t n) { return (n + 63) & ~uint64_t{63}; };
    const uint64_t desc_at = align(data_bytes);
    const uint64_t stage_at = desc_at + align(max_pieces * sizeof(Desc));
    const uint64_t sums_at = stage_at + align(max_pieces * sizeof(StageDesc));
    RETURN_IF_ERROR(part_pinned_.Reserve(sums_at + sum_bytes));
    uint8_t* const host = part_pinned_.bytes();
    Desc* const scatter = reinterpret_cast<Desc*>(host + desc_at);
    StageDesc* const stage = reinterpret_cast<StageDesc*>(host + stage_at);
    const std::vector<PartTarget> targets = PartTargets(plan_tensors, tensors);
    std::vector<uint64_t> changed(plan_tensors.size(), 0);  // merged into *sums on success
    std::vector<CopyOp> probes;  // a few weight pointers, to find the device
    uint64_t at = 0, pieces = 0;
    RETURN_IF_ERROR(plan.ForEach([&](const deltasync::PlanRecord& rec, std::span<uint8_t> bytes) {
      const PartTarget& target = targets[rec.tensor];
      if (!target.Holds(rec)) return CheckPlanRecord(rec, plan_tensors, tensors);
      const uint64_t n_pieces = (uint64_t{rec.length} + kPieceBytes - 1) / kPieceBytes;
      if (rec.length > data_bytes - at || n_pieces > max_pieces - pieces) {
        return Internal("plan changed after it was opened");
      }
      const uint64_t device = reinterpret_cast<uint64_t>(target.base) + rec.local_offset;
      if (probes.size() < 8) probes.push_back({reinterpret_cast<void*>(device), nullptr, rec.length});
      std::memcpy(host + at, bytes.data(), rec.length);
      const bool owner = rec.flags & deltasync::kPlanRecordOwner;
      // StageDesc flags: bit 0 owner, bit 1 full-verify sums (owners only).
      const uint32_t flags = owner ? 1u | (target.full_verify ? 2u : 0u) : 0u;
      for (uint64_t done = 0; done < rec.length; done += kPieceBytes) {
        const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(kPieceBytes, rec.length - done));
        stage[pieces] = {device + done, static_cast<uint32_t>(at + done), n,
                         static_cast<uint32_t>((rec.canonical_offset + done) % kAdlerMod),
                         rec.tensor, flags, 0};
        scatter[pieces] = {device + done, static_cast<uint32_t>(at + done), n};
        ++pieces;
      }
      changed[rec.tensor] += rec.length;
      at += rec.length;
      return Status::Ok();
    }));
    p->ops_ = records;
    if (pieces == 0) return std::unique_ptr<PreparedScatter>(std::move(p));
    RETURN_IF_ERROR(Bind(probes));
    p->device = device_;
    p->pieces = pieces;
    RETURN_IF_ERROR(p->data.Reserve(at, stream_));
    RETURN_IF_ERROR(p->descs.Reserve(pieces * sizeof(Desc), stream_));
    RETURN_IF_ERROR(descs_.Reserve(pieces * sizeof(StageDesc), stream_));
    RETURN_IF_ERROR(staging_.Reserve(sum_bytes, stream_));
    // Everything below is queued on the stream; the pinned buffer is reused by the next part, so
    // every way out waits for the stream first.
    Status queued = [&]() -> Status {
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(p->data.ptr, host, at, cudaMemcpyHostToDevice, stream_),
                           "plan bytes upload");
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(p->descs.ptr, scatter, pieces * sizeof(Desc),
                                           cudaMemcpyHostToDevice, stream_),
                           "scatter descriptors upload");
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(descs_.ptr, stage, pieces * sizeof(StageDesc),
                                           cudaMemcpyHostToDevice, stream_),
                           "staging descriptors upload");
      CUDA_RETURN_IF_ERROR(cudaMemsetAsync(staging_.ptr, 0, sum_bytes, stream_), "sums reset");
      StageXor<<<Blocks(pieces), 256, 0, stream_>>>(
          static_cast<const StageDesc*>(descs_.ptr), pieces, static_cast<uint8_t*>(p->data.ptr),
          static_cast<unsigned long long*>(staging_.ptr));
      CUDA_RETURN_IF_ERROR(cudaGetLastError(), "staging kernel launch");
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host + sums_at, staging_.ptr, sum_bytes,
                                           cudaMemcpyDeviceToHost, stream_),
                           "sums download");
      return Status::Ok();
    }();
    const Status done = CudaError(cudaStreamSynchronize(stream_), "staging");
    RETURN_IF_ERROR(queued);
    RETURN_IF_ERROR(done);
    const auto* w = reinterpret_cast<const unsigned long long*>(host + sums_at);
    for (size_t t = 0; t < sums->size(); ++t) {
      auto word = [&](size_t k) { return static_cast<uint32_t>(w[4 * t + k] % kAdlerMod); };
      (*sums)[t].delta.Merge(deltasync::AdlerDelta::FromSums(word(0), word(1)));
      (*sums)[t].full.Merge(deltasync::AdlerDelta::FromSums(word(2), word(3)));
      (*sums)[t].bytes_changed += changed[t];
    }
    return std::unique_ptr<PreparedScatter>(std::move(p));
  }

  // Allocates and frees `bytes` on the stream: the pool, whose release threshold Bind raised,
  // keeps them for the staging that follows.
  Status ReserveStaging(uint64_t bytes, const std::vector<LocalTensor>& tensors) override {
    std::vector<CopyOp> probes;
    for (const LocalTensor& t : tensors) {
      if (t.bytes > 0 && probes.size() < 8) probes.push_back({t.device, nullptr, t.bytes});
    }
    if (bytes == 0 || probes.empty()) return Status::Ok();
    RETURN_IF_ERROR(Bind(probes));
    PoolBuffer reserve;
    RETURN_IF_ERROR(reserve.Reserve(bytes, stream_));
    reserve.Release();
    return CudaError(cudaStreamSynchronize(stream_), "staging reserve");
  }

  Status Scatter(std::span<const CopyOp> ops) override {
    if (ops.empty()) return Status::Ok();
    ScatterBatch batch;
    uint64_t total = 0;
    for (const CopyOp& op : ops) total += op.bytes;
    batch.data.resize(total);
    uint8_t* at = batch.data.data();
    for (const CopyOp& op : ops) {
      std::memcpy(at, op.host, op.bytes);
      batch.ops.push_back({op.device, at, op.bytes});
      at += op.bytes;
    }
    ASSIGN_OR_RETURN(std::unique_ptr<PreparedScatter> p, PrepareScatter(std::move(batch)));
    return CommitScatter(*p);
  }

  StatusOr<std::unique_ptr<PreparedScatter>> PrepareScatter(ScatterBatch batch) override {
    auto p = std::make_unique<CudaPreparedScatter>();
    p->ops_ = batch.ops.size();
    if (batch.ops.empty()) return std::unique_ptr<PreparedScatter>(std::move(p));
    if (batch.data.size() > UINT32_MAX) {
      return InvalidArgument("a scatter batch above 4 GiB must be split into parts");
    }
    RETURN_IF_ERROR(Bind(batch.ops));
    std::vector<Desc> descs;
    descs.reserve(batch.ops.size());
    for (const CopyOp& op : batch.ops) {
      const uint64_t at = static_cast<const uint8_t*>(op.host) - batch.data.data();
      if (at > batch.data.size() || op.bytes > batch.data.size() - at) {
        return InvalidArgument("scatter op's bytes are not inside its batch");
      }
      AddPieces(reinterpret_cast<uint64_t>(op.device), at, op.bytes, &descs);
    }
    p->device = device_;
    p->pieces = descs.size();
    RETURN_IF_ERROR(p->data.Reserve(batch.data.size(), stream_));
    RETURN_IF_ERROR(p->descs.Reserve(descs.size() * sizeof(Desc), stream_));
    // Uploads go through the pinned buffer on the handle's stream, so they are real DMA and
    // ordered before the scatter kernel CommitScatter launches on the same stream.
    RETURN_IF_ERROR(Upload(p->data.ptr, batch.data.data(), batch.data.size()));
    RETURN_IF_ERROR(Upload(p->descs.ptr, descs.data(), descs.size() * sizeof(Desc)));
    return std::unique_ptr<PreparedScatter>(std::move(p));
  }

  Status CommitScatter(PreparedScatter& prepared) override {
    ASSIGN_OR_RETURN(CudaPreparedScatter* p, Own(&prepared));
    if (p == nullptr) return Status::Ok();
    return ScatterParts({&p, 1});
  }

  // Every part of a commit: the scatter kernels go onto the stream back to back (stream order
  // keeps them in part order) and the pause waits once, not once per part.
  Status CommitScatters(std::span<const std::unique_ptr<PreparedScatter>> prepared) override {
    std::vector<CudaPreparedScatter*> parts;
    for (const std::unique_ptr<PreparedScatter>& q : prepared) {
      ASSIGN_OR_RETURN(CudaPreparedScatter* p, Own(q.get()));
      if (p != nullptr) parts.push_back(p);
    }
    if (parts.empty()) return Status::Ok();
    return ScatterParts(parts);
  }

 private:
  // `prepared` as this backend's scatter for its device; nullptr when it writes nothing.
  StatusOr<CudaPreparedScatter*> Own(PreparedScatter* prepared) const {
    auto* p = dynamic_cast<CudaPreparedScatter*>(prepared);
    if (p == nullptr) return Internal("scatter prepared by another backend");
    if (p->pieces == 0) return static_cast<CudaPreparedScatter*>(nullptr);
    if (p->device != device_ || stream_ == nullptr) {
      return Internal("scatter prepared for another device");
    }
    return p;
  }

  // Launches each part's scatter kernel in order on the stream, then waits once (even after a
  // failed launch, so no kernel of the commit is still running when this returns).
  Status ScatterParts(std::span<CudaPreparedScatter* const> parts) {
    Status s = CudaError(cudaSetDevice(device_), "cudaSetDevice");
    for (size_t i = 0; s.ok() && i < parts.size(); ++i) {
      const CudaPreparedScatter* p = parts[i];
      MovePieces<true><<<Blocks(p->pieces), 256, 0, stream_>>>(
          static_cast<const Desc*>(p->descs.ptr), p->pieces, static_cast<uint8_t*>(p->data.ptr));
      s = CudaError(cudaGetLastError(), "scatter kernel launch");
    }
    const Status done = CudaError(cudaStreamSynchronize(stream_), "scatter");
    if (s.ok()) s = done;
    if (!s.ok()) return Internal("scatter failed: " + s.message());
    return Status::Ok();
  }

  // The sum words the last kernel left in staging_, copied into pinned_ once the stream is done.
  StatusOr<const unsigned long long*> DownloadSums(uint64_t bytes) {
    RETURN_IF_ERROR(pinned_.Reserve(bytes));
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(pinned_.ptr, staging_.ptr, bytes, cudaMemcpyDeviceToHost, stream_),
        "sums download");
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), "sums download");
    return static_cast<const unsigned long long*>(pinned_.ptr);
  }

  // host -> device through pinned_ in chunks, on stream_; returns when the bytes are there.
  Status Upload(void* device, const void* host, uint64_t bytes) {
    const uint64_t chunk = std::min<uint64_t>(bytes, kGatherChunkBytes);
    RETURN_IF_ERROR(pinned_.Reserve(chunk));
    for (uint64_t done = 0; done < bytes;) {
      const uint64_t n = std::min(chunk, bytes - done);
      std::memcpy(pinned_.ptr, static_cast<const uint8_t*>(host) + done, n);
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(static_cast<uint8_t*>(device) + done, pinned_.ptr, n,
                                           cudaMemcpyHostToDevice, stream_),
                           "upload");
      CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), "upload");
      done += n;
    }
    return Status::Ok();
  }

  // Finds the device of the ops' memory (the first op decides; every op must agree), makes it
  // current on this thread and creates the stream on first use.
  Status Bind(std::span<const CopyOp> ops) {
    for (size_t i = 0; i < ops.size(); i += std::max<size_t>(1, ops.size() / 8)) {
      cudaPointerAttributes attr{};
      CUDA_RETURN_IF_ERROR(cudaPointerGetAttributes(&attr, ops[i].device),
                           "cudaPointerGetAttributes");
      if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
        return InvalidArgument("weight pointer is not CUDA device memory");
      }
      if (stream_ != nullptr && attr.device != device_) {
        return InvalidArgument("weights on CUDA device " + std::to_string(attr.device) +
                               " and " + std::to_string(device_) + ": one backend per device");
      }
      if (stream_ == nullptr) {
        if (attr.device < 0 || attr.device >= device_count_)
          return InvalidArgument("weight pointer names no CUDA device");
        device_ = attr.device;
        CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "cudaSetDevice");
        CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                             "cudaStreamCreate");
        // Keep freed staging memory in the device's pool (no release back to the driver), so
        // parts prepared and dropped while the engine serves never call cudaFree.
        cudaMemPool_t pool;
        CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&pool, device_), "cudaDeviceGetDefaultMemPool");
        uint64_t keep = UINT64_MAX;
        CUDA_RETURN_IF_ERROR(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
                             "cudaMemPoolSetAttribute");
      }
    }
    CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "cudaSetDevice");
    return Status::Ok();
  }

  int device_count_ = 0;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  // Stream-ordered device buffers, grown on demand and never given back to the driver while the
  // engine serves (the pool keeps freed blocks): staging for gathers and sum words, and the
  // descriptors of the last gather, checksum or staging launch.
  PoolBuffer staging_;
  PoolBuffer descs_;
  PinnedBuffer pinned_;
  // One plan part as StagePart uploads it: its bytes, scatter and staging descriptors, and the
  // sum words coming back.
  PinnedBuffer part_pinned_;
};

}  // namespace

StatusOr<std::unique_ptr<DeviceBackend>> MakeCudaBackend() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    return FailedPrecondition(std::string("the cuda backend needs a CUDA device: ") +
                              (e != cudaSuccess ? cudaGetErrorString(e) : "none found"));
  }
  return std::unique_ptr<DeviceBackend>(new CudaBackend(count));
}

}  // namespace deltakv::shim
