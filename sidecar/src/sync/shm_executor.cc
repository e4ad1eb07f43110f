// ShmSyncExecutor: creates the control block, runs each job (sync/shm_job.h) under the
// executor's lock and failure rule, and keeps the checksum table and the attached ranks' view.
#include "sync/shm_executor.h"

#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/file_util.h"
#include "shm/plan_arena.h"
#include "sync/shm_job.h"

namespace deltakv::sidecar {

using namespace shm_job;

// ------------------------------------------------------------------------------ executor

StatusOr<std::unique_ptr<ShmSyncExecutor>> ShmSyncExecutor::Create(
    const ShmExecutorOptions& options) {
  std::unique_ptr<ShmSyncExecutor> e(new ShmSyncExecutor(options));
  ASSIGN_OR_RETURN(e->control_, shm::ControlBlock::Create(options.shm_name));
  (void)shm::RemoveStaleArenas(ArenaPrefix(options.shm_name));
  // Arena generations of this instance: instance_generation is bumped on every create or adopt,
  // so no two instances of one control block hand out the same generation (PROTOCOL.md §4).
  e->arena_generation_ = e->control_->instance_generation() << 32;
  if (!options.state_dir.empty()) {
    auto v = ReadFileToString(options.state_dir + "/live_version", 4096);
    if (v.ok()) e->live_version_ = *v;
    auto t = ChecksumTable::Load(options.state_dir);
    if (t.ok()) {
      e->table_ = std::move(t).value();
    } else if (t.status().code() != StatusCode::kNotFound) {
      return t.status().WithPrefix("state dir");
    }
  }
  return e;
}

bool ShmSyncExecutor::Replaced() const { return !control_->IsCurrentSidecar(); }

ShmSyncExecutor::~ShmSyncExecutor() = default;

std::vector<shm::PlanArenaPool*> ShmSyncExecutor::ArenaPools(uint32_t world) {
  // Pools of ranks beyond the world are retired (their arenas unlinked) when it shrinks.
  arena_pools_.resize(world);
  std::vector<shm::PlanArenaPool*> out;
  for (uint32_t r = 0; r < world; ++r) {
    if (!arena_pools_[r]) {
      arena_pools_[r] = std::make_unique<shm::PlanArenaPool>(ArenaPrefix(options_.shm_name), r);
    }
    out.push_back(arena_pools_[r].get());
  }
  return out;
}

Status ShmSyncExecutor::Run(const SyncRequest& request, const Update& update) {
  // Every job starts by dropping dead ranks' slots and the tensor tables they left.
  RemoveTablesOf(options_.shm_name, control_->ReclaimDead());
  Job job(*this, request, update);
  switch (request.kind) {
    case JobKind::kSync: {
      Status s = job.RunSync();
      if (!s.ok() && request.group_catch_up) convergence_.CatchUpFailed(request, s);
      return s;
    }
    case JobKind::kVerify:
      return job.RunVerify();
    case JobKind::kScrub:
      return job.RunScrub();
  }
  return Internal("unknown job kind");
}

std::string ShmSyncExecutor::LiveVersion() const {
  // What the ranks serve, as their tensor tables say: one version if they agree, "" if they do
  // not; the recorded version when no rank names one.
  std::string common;
  for (const shm::RankInfo& r : control_->ActiveRanks()) {
    if (control_->CheckRank(r) != shm::PeerState::kAlive) continue;  // a dead rank serves nothing
    auto t = ReadTensorTable(options_.shm_name, r.rank);
    if (!t.ok() || t->version.empty()) continue;
    if (!common.empty() && common != t->version) return "";
    common = t->version;
  }
  if (!common.empty()) return common;
  std::lock_guard<std::mutex> lock(mu_);
  return live_version_;
}

ChecksumTable ShmSyncExecutor::table() const {
  std::lock_guard<std::mutex> lock(mu_);
  return table_;
}

void ShmSyncExecutor::SetTable(ChecksumTable table) {
  const bool diverged = !table.diverged.empty();
  const std::string version = table.version;
  {
    std::lock_guard<std::mutex> lock(mu_);
    table_ = table;
    if (!diverged && !version.empty()) live_version_ = version;
  }
  if (options_.state_dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(options_.state_dir, ec);
  (void)table.Save(options_.state_dir);
  if (!diverged && !version.empty()) {
    (void)WriteFileAtomic(options_.state_dir + "/live_version", version);
  }
}

std::string ShmSyncExecutor::Diverged() const {
  std::lock_guard<std::mutex> lock(mu_);
  return table_.diverged;
}

std::string ShmSyncExecutor::AttachedRanksKey() const {
  std::vector<shm::RankInfo> ranks = control_->ActiveRanks();
  if (ranks.empty() || ranks[0].world_size != ranks.size()) return "";
  std::string key;
  std::vector<bool> seen(ranks.size(), false);
  for (const TableRank& r : ChecksumTable::RanksOf(ranks)) {
    if (r.rank >= seen.size() || seen[r.rank]) return "";
    seen[r.rank] = true;
    // A rank counts once its tensor table is published (it registers first).
    if (!ReadTensorTable(options_.shm_name, r.rank).ok()) return "";
    key += std::to_string(r.rank) + ":" + std::to_string(r.state_word) + ";";
  }
  return key;
}

bool ShmSyncExecutor::TableCoversAttachedRanks() const {
  return table().CurrentFor(control_->ActiveRanks());
}

bool ShmSyncExecutor::CanScrub() const {
  ChecksumTable t = table();
  return !t.empty() && t.diverged.empty();
}

nlohmann::json ShmSyncExecutor::ChecksumsJson() const {
  ChecksumTable t = table();
  return {{"version", t.version},
          {"source", t.source},
          {"checkpoint_verified", t.checkpoint_verified},
          {"tensors", t.adler32.size()},
          {"current", t.CurrentFor(control_->ActiveRanks())},
          {"updated_unix", t.updated_unix},
          {"diverged", t.diverged}};
}

nlohmann::json ShmSyncExecutor::RanksJson() const {
  nlohmann::json out = nlohmann::json::array();
  for (const shm::RankInfo& r : control_->ActiveRanks()) {
    auto table = ReadTensorTable(options_.shm_name, r.rank);
    out.push_back({{"rank", r.rank},
                   {"world_size", r.world_size},
                   {"pid", r.pid},
                   {"alive", control_->CheckRank(r) == shm::PeerState::kAlive},
                   {"version", table.ok() ? table->version : ""},
                   {"policy_version", r.live_policy_version > 0 ? r.live_policy_version - 1 : 0},
                   {"staged_sync_id", r.staged_sync_id}});
  }
  return out;
}

}  // namespace deltakv::sidecar
