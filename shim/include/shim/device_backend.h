// DeviceBackend: how the shim reads and writes engine weight memory. The `cpu` backend treats
// "device" pointers as host memory (what tests and the reference engine use); a `cuda`
// backend performs the same batched copies with kernels and streams.
//
// Gather and Scatter take batches so a backend can coalesce them into a few launches. Both
// are synchronous: when they return OK every byte has moved. On error the destination bytes
// of that call are unspecified (Scatter errors are reported as Internal: the caller cannot
// roll a partial scatter back, which is why scatter happens only after verification).
//
// A commit's scatter is split in two so the engine's pause covers only the writes:
// PrepareScatter (before the pause) takes a packed batch and moves whatever it needs where the
// writes will come from (the cuda backend uploads bytes and destinations to device memory);
// CommitScatter (in the pause) performs the writes. A prepared scatter may be committed once.
//
// Thread-safety: one backend object per engine handle, used by one thread at a time.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "deltakv/deltakv.h"
#include "deltasync/adler32.h"

namespace deltakv::deltasync {
class WritePlanReader;
}

namespace deltakv::shim {

struct LocalTensor;   // shim/plan_stage.h
struct StagedTensor;  // shim/plan_stage.h

struct CopyOp {
  void* device = nullptr;  // device address (host address for the cpu backend)
  void* host = nullptr;
  size_t bytes = 0;
};

// New bytes packed back to back in `data`, and one CopyOp per destination range whose `host`
// points into `data`. Moving a batch keeps the ops valid.
struct ScatterBatch {
  std::vector<uint8_t> data;
  std::vector<CopyOp> ops;
};

// The local byte ranges a sync writes, per registered tensor (its index on the rank), for the
// derived-weights hook: in record order, a record that starts where the tensor's last range
// ends extending it.
using TouchedRegions = std::map<uint32_t, std::vector<deltakv_region>>;

// `bytes` device bytes at `device`, whose first byte is canonical position `position` of its
// tensor (for checksums of live weights).
struct ChecksumRange {
  const void* device = nullptr;
  uint64_t bytes = 0;
  uint64_t position = 0;
};

// A scatter made ready by DeviceBackend::PrepareScatter.
class PreparedScatter {
 public:
  virtual ~PreparedScatter() = default;
  virtual uint64_t ops() const = 0;
  virtual uint64_t bytes() const = 0;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual std::string_view name() const = 0;
  // device -> host for every op.
  virtual Status Gather(std::span<const CopyOp> ops) = 0;
  // host -> device for every op.
  virtual Status Scatter(std::span<const CopyOp> ops) = 0;
  // Takes the batch; the default keeps it in host memory for Scatter.
  virtual StatusOr<std::unique_ptr<PreparedScatter>> PrepareScatter(ScatterBatch batch);
  // Writes a prepared batch (prepared by this backend). Internal on failure.
  virtual Status CommitScatter(PreparedScatter& prepared);
  // Writes every prepared batch of a commit (the engine's pause covers this call). The default
  // commits them one by one; the cpu backend writes them all in one pass split over its threads.
  virtual Status CommitScatters(std::span<const std::unique_ptr<PreparedScatter>> prepared);
  // Stages one plan part in one call: validates every record against `tensors`, gathers the
  // old bytes, XORs them with the plan's bytes into the new bytes, adds each plan tensor's
  // partial sums to (*sums)[t] (StagedTensor: incremental over owned positions, full sums for
  // kPlanTensorFullVerify tensors, bytes changed), and returns the new bytes prepared for
  // CommitScatter (a device backend keeps them in device memory, so the pause is the scatter
  // alone). The plan's bytes may be overwritten. `plan` may be opened with OpenLazy: its records
  // are then checked as they are staged, and a plan Open refuses fails with InvalidArgument,
  // nothing prepared (Open's error, unless a record outside its tensor comes first).
  // REQUIRES: sums->size() == plan.tensors().size(). The default is StagePartToBatch through
  // Gather (XOR and sums on the host) and PrepareScatter. InvalidArgument for a record outside
  // its tensor; device errors.
  virtual StatusOr<std::unique_ptr<PreparedScatter>> StagePart(
      const deltasync::WritePlanReader& plan, const std::vector<LocalTensor>& tensors,
      std::vector<StagedTensor>* sums);
  // StagePart, and appends the part's records to *regions (TouchedRegions) unless `regions` is
  // null. On error *regions may hold some of the part's records. The default is StagePart, then
  // AppendTouchedRegions; the cpu backend lists them in its staging walk.
  virtual StatusOr<std::unique_ptr<PreparedScatter>> StagePartAndRegions(
      const deltasync::WritePlanReader& plan, const std::vector<LocalTensor>& tensors,
      std::vector<StagedTensor>* sums, TouchedRegions* regions);
  // Adds to out[i] the Adler partial sums of range i's bytes (AdlerDelta::AddBytes at its
  // position). REQUIRES: out.size() == ranges.size(). The default gathers through a bounded
  // host buffer; the cpu backend reads in place. Device bytes are never changed.
  virtual Status ChecksumRanges(std::span<const ChecksumRange> ranges,
                                std::span<deltasync::AdlerDelta> out);
  // Sets aside `bytes` of device memory for later staging, on the device that holds `tensors`
  // (the engine's registered weights), so that staging while the engine serves never asks the
  // driver for memory. The default (and the cpu backend) reserves nothing; the cuda backend
  // allocates and frees the bytes in its stream-ordered pool, which keeps them.
  // ResourceExhausted when the device cannot hold them.
  virtual Status ReserveStaging(uint64_t bytes, const std::vector<LocalTensor>& tensors);
};

// "cpu" (and "" for the default), and "cuda" in builds with CUDA; InvalidArgument for names
// this build does not have, FailedPrecondition for "cuda" without a usable device.
StatusOr<std::unique_ptr<DeviceBackend>> MakeDeviceBackend(std::string_view name);

}  // namespace deltakv::shim
