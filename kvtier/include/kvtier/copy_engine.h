// CopyEngine: moves KV bytes between the engine's "device" KV memory and pool slots,
// asynchronously and in batches.
//
// A batch is a list of CopyRegions (src, dst, bytes) submitted at once; Submit returns a
// CopyCompletion, a handle on the batch that can be polled (Done) or waited on (Wait). A batch
// has completed when every byte of every region was written to its destination; the thread
// that observes completion (Done() returning true, or Wait() returning) also observes all of
// those bytes (acquire). That is the host-visible completion kvtier/ORDERING.md relies on:
// CommitStore only after a store's batch completed (rule S2), Unpin only after a load's batch
// completed (rule L4). Batches are independent: nothing orders one batch against another.
//
// Implementations: CpuCopyEngine (here) copies with a small pool of worker threads; host memory
// stands in for device memory, which is what tests and CPU-only deployments use. A CUDA engine
// (cudaMemcpyAsync / a copy kernel on its own stream, completion = a CUDA event) implements the
// same interface later; the tier client (kvtier/tier_client.h) only sees this interface, and
// tests inject engines that fail or stall.
//
// Ownership: the engine keeps the regions of a batch until it completed; the caller keeps the
// memory they point to valid and unchanged (sources) / unused (destinations) until then. A
// CopyCompletion is a shared handle: copies of it observe the same batch, and it stays valid
// after the engine is gone. An engine's destructor waits for every batch it accepted.
// Thread-safety: Submit may be called from any threads concurrently; a CopyCompletion may be
// polled and waited on from any threads.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace deltakv::kvtier {

enum class CopyDirection : uint8_t {
  kToPool = 0,    // store / offload: engine KV memory -> pool slot (device -> host)
  kFromPool = 1,  // load / reload: pool slot -> engine KV memory (host -> device)
};
std::string_view CopyDirectionName(CopyDirection direction);

struct CopyRegion {
  const uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  uint64_t bytes = 0;
};

// Steady-clock timestamps of a batch (nanoseconds since an arbitrary epoch), for throughput.
struct CopyTiming {
  uint64_t submit_ns = 0;  // when Submit accepted the batch
  uint64_t done_ns = 0;    // when its last byte was written (0 until Done)
};

// The completion state of one batch; engines implement it. Thread-safe.
class CopyEvent {
 public:
  virtual ~CopyEvent() = default;
  // True once the batch completed (successfully or not). Never blocks. Acquire.
  virtual bool Done() const = 0;
  // Blocks until the batch completed; returns its status (OK, or what went wrong: a failed
  // batch may have written any subset of its destinations).
  virtual Status Wait() = 0;
  // Blocks at most `timeout`; true if the batch completed.
  virtual bool WaitFor(std::chrono::nanoseconds timeout) = 0;
  // Valid once Done().
  virtual CopyTiming Timing() const = 0;
};

// A shared handle on a batch's CopyEvent. A default-constructed completion is "nothing to
// wait for": Done() is true and Wait() returns OK.
class CopyCompletion {
 public:
  CopyCompletion() = default;
  explicit CopyCompletion(std::shared_ptr<CopyEvent> event) : event_(std::move(event)) {}

  bool valid() const { return event_ != nullptr; }
  bool Done() const { return event_ == nullptr || event_->Done(); }
  Status Wait() const { return event_ == nullptr ? Status::Ok() : event_->Wait(); }
  bool WaitFor(std::chrono::nanoseconds timeout) const {
    return event_ == nullptr || event_->WaitFor(timeout);
  }
  CopyTiming Timing() const { return event_ == nullptr ? CopyTiming{} : event_->Timing(); }

 private:
  std::shared_ptr<CopyEvent> event_;
};

class CopyEngine {
 public:
  virtual ~CopyEngine() = default;
  // Starts copying `regions` (in no particular order, possibly in parallel). Returns the
  // batch's completion; InvalidArgument (nothing started) if a region with bytes > 0 has a
  // null pointer or overlapping source and destination, or the total overflows. An empty batch
  // completes at once. REQUIRES: destinations of one batch do not overlap each other.
  virtual StatusOr<CopyCompletion> Submit(CopyDirection direction,
                                          std::vector<CopyRegion> regions) = 0;
  // "cpu", "cuda", or a test engine's name.
  virtual std::string_view name() const = 0;
};

// Checks the Submit preconditions every engine enforces (see CopyEngine::Submit) and returns
// the total byte count. InvalidArgument naming the first bad region.
StatusOr<uint64_t> ValidateCopyRegions(const std::vector<CopyRegion>& regions);

// Steady-clock nanoseconds (the clock of CopyTiming).
uint64_t CopyClockNs();

struct CpuCopyEngineOptions {
  // Worker threads; 0 copies synchronously inside Submit (the batch is complete on return).
  uint32_t threads = 4;
  // A batch is split into pieces of at least this many bytes, at most one per worker.
  uint64_t min_piece_bytes = 256ull << 10;
  // Cap on bytes accepted but not yet copied; Submit blocks while a new batch would exceed it
  // (a batch larger than the cap is accepted when nothing else is queued). 0 = no cap.
  uint64_t max_queued_bytes = 0;
};

// The `cpu` engine: memcpy on worker threads. Never fails a valid batch.
class CpuCopyEngine final : public CopyEngine {
 public:
  // InvalidArgument for min_piece_bytes == 0; IoError if a worker thread cannot be started.
  static StatusOr<std::unique_ptr<CpuCopyEngine>> Create(const CpuCopyEngineOptions& options = {});
  // Finishes every accepted batch, then joins the workers.
  ~CpuCopyEngine() override;
  CpuCopyEngine(const CpuCopyEngine&) = delete;
  CpuCopyEngine& operator=(const CpuCopyEngine&) = delete;

  StatusOr<CopyCompletion> Submit(CopyDirection direction,
                                  std::vector<CopyRegion> regions) override;
  std::string_view name() const override { return "cpu"; }

  uint32_t threads() const;

 private:
  class Impl;  // kvtier/src/copy_engine.cc
  explicit CpuCopyEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace deltakv::kvtier
