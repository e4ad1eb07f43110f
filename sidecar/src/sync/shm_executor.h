// ShmSyncExecutor: runs a sync against the engine ranks attached to this sidecar's
// shared-memory control block (shm/PROTOCOL.md).
//
//   fetching   read the delta manifest; read every rank's tensor table; check the delta fits
//   decoding   fetch each shard object once (ranged reads, prefetched), walk its frames
//              sparsely, split the nonzero runs by each tensor's layout into per-rank write
//              plans streamed to the ranks in bounded parts (plan arenas; sync/plan_stream.h);
//              every rank gathers, XORs and stages each part as it arrives
//   staged     after the last part every rank reports partial Adler sums; the sums are
//              merged per tensor and verified against the delta's checksums
//   committing the COMMIT decision is release-stored in the control block, then every rank
//              pauses, writes, bumps its policy version and resumes
//   live       every rank reported COMMITTED
// Any failure before the decision aborts the sync everywhere with no engine byte changed. A
// rank that dies before the decision aborts the sync (named in the error).
//
// Thread-safety: Run is called by the SyncManager's single worker; the accessors from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "shm/control_block.h"
#include "store/open_store.h"
#include "sync/sync_manager.h"

namespace deltakv::sidecar {

struct ShmExecutorOptions {
  std::string shm_name = "deltakv";
  std::string decoder;  // XorDecoder name; "" = default
  uint32_t max_window_log = 27;
  std::chrono::milliseconds stage_timeout{120000};
  std::chrono::milliseconds commit_timeout{120000};
  std::string state_dir;  // persists the live version id; "" = memory only
  // Bound on plan bytes in flight to all ranks together (parts being written or not yet taken
  // by their rank), and so on the sidecar's plan memory; fetch windows are an eighth of it.
  uint64_t plan_buffer_bytes = 128ull << 20;
  // Frames decoded at once; 0 = as many as the CPUs the sync worker may run on.
  unsigned decode_threads = 0;
  HttpStoreOptions http;
};

class ShmSyncExecutor final : public SyncExecutor {
 public:
  // Creates (or adopts) the control segment and removes plan arenas a dead predecessor left.
  static StatusOr<std::unique_ptr<ShmSyncExecutor>> Create(const ShmExecutorOptions& options);

  Status Run(const SyncRequest& request, const Update& update) override;
  std::string LiveVersion() const override;
  nlohmann::json RanksJson() const override;

 private:
  explicit ShmSyncExecutor(ShmExecutorOptions options) : options_(std::move(options)) {}
  void SetLiveVersion(const std::string& v);

  ShmExecutorOptions options_;
  std::unique_ptr<shm::ControlBlock> control_;
  mutable std::mutex mu_;
  std::string live_version_;  // GUARDED_BY(mu_)
};

}  // namespace deltakv::sidecar
