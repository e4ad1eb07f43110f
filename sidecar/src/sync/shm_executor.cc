#include "sync/shm_executor.h"

#include <sched.h>
#include <signal.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "base/file_util.h"
#include "deltasync/delta_manifest.h"
#include "deltasync/engine_tensors.h"
#include "deltasync/plan_verify.h"
#include "deltasync/sync_planner.h"
#include "deltasync/write_plan.h"
#include "shm/messages.h"
#include "shm/plan_arena.h"
#include "sync/plan_stream.h"

namespace deltakv::sidecar {

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Fault injection for tests: DELTAKV_FAULT_STALL="<point>:<ms>" sleeps at that point of a
// sync ("planned": plans built, not yet sent; "staged": verified, not yet decided).
void MaybeStall(const char* point) {
  const char* env = std::getenv("DELTAKV_FAULT_STALL");
  if (env == nullptr) return;
  std::string spec(env);
  size_t colon = spec.find(':');
  if (colon == std::string::npos || spec.substr(0, colon) != point) return;
  std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(spec.c_str() + colon + 1)));
}

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

std::string ArenaPrefix(const std::string& shm) { return shm; }

StatusOr<deltasync::EngineTensorTable> ReadTensorTable(const std::string& shm, uint32_t rank) {
  const std::string name = deltasync::EngineTensorTableSegmentName(shm, rank);
  ASSIGN_OR_RETURN(shm::Segment seg, shm::Segment::Open(name, shm::SegmentKind::kScratch));
  const uint64_t body = sizeof(shm::SegmentHeader);
  uint8_t* len_ptr = seg.At(body, 8);
  if (len_ptr == nullptr) return DataLoss("tensor table segment '" + name + "' is too small");
  uint64_t len;
  std::memcpy(&len, len_ptr, 8);
  uint8_t* text = seg.At(body + 8, len);
  if (text == nullptr) return DataLoss("tensor table segment '" + name + "' is truncated");
  return deltasync::ParseEngineTensorTable(
      std::string_view(reinterpret_cast<const char*>(text), len));
}

bool PidAlive(uint32_t pid) {
  return pid != 0 && (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

// One rank's view during a sync.
struct RankRun {
  shm::RankChannel channel;
  bool staged = false;
  uint32_t staged_parts = 0;
  bool committed = false;
  uint64_t pause_us = 0;
};

}  // namespace

StatusOr<std::unique_ptr<ShmSyncExecutor>> ShmSyncExecutor::Create(
    const ShmExecutorOptions& options) {
  std::unique_ptr<ShmSyncExecutor> e(new ShmSyncExecutor(options));
  ASSIGN_OR_RETURN(e->control_, shm::ControlBlock::Create(options.shm_name));
  (void)shm::RemoveStaleArenas(ArenaPrefix(options.shm_name));
  if (!options.state_dir.empty()) {
    auto v = ReadFileToString(options.state_dir + "/live_version", 4096);
    if (v.ok()) e->live_version_ = *v;
  }
  return e;
}

std::string ShmSyncExecutor::LiveVersion() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_version_;
}

void ShmSyncExecutor::SetLiveVersion(const std::string& v) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    live_version_ = v;
  }
  if (!options_.state_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options_.state_dir, ec);
    (void)WriteFileAtomic(options_.state_dir + "/live_version", v);
  }
}

nlohmann::json ShmSyncExecutor::RanksJson() const {
  nlohmann::json out = nlohmann::json::array();
  for (const shm::RankInfo& r : control_->ActiveRanks()) {
    out.push_back({{"rank", r.rank},
                   {"world_size", r.world_size},
                   {"pid", r.pid},
                   {"policy_version", r.live_policy_version > 0 ? r.live_policy_version - 1 : 0},
                   {"staged_sync_id", r.staged_sync_id}});
  }
  return out;
}

Status ShmSyncExecutor::Run(const SyncRequest& request, const Update& update) {
  auto set_state = [&](SyncState s) { update([&](SyncRecord& r) { r.state = s; }); };
  auto phase = [&](const char* name, double ms) {
    update([&](SyncRecord& r) { r.phase_ms[name] = ms; });
  };
  set_state(SyncState::kFetching);

  // ---- fetching: manifest, ranks, tensor tables
  auto t_fetch = Clock::now();
  ASSIGN_OR_RETURN(std::unique_ptr<deltasync::ObjectStore> store,
                   OpenStore(request.delta, options_.http));
  ASSIGN_OR_RETURN(std::string manifest_text,
                   store->ReadObject(deltasync::kManifestFileName, 1ull << 30));
  ASSIGN_OR_RETURN(deltasync::DeltaManifest m, deltasync::ParseDeltaManifest(manifest_text));
  if (!m.version.empty() && m.version != request.version) {
    return InvalidArgument("the request names version '" + request.version +
                           "' but the delta produces '" + m.version + "'");
  }
  update([&](SyncRecord& r) {
    r.parent_version = m.parent_version;
    r.tensors_changed = m.tensors.size();
  });
  control_->ReclaimDead();
  std::vector<shm::RankInfo> infos = control_->ActiveRanks();
  if (infos.empty())
    return FailedPrecondition("no engine ranks are attached to '" + options_.shm_name + "'");
  std::vector<deltasync::EngineTensorTable> tables;
  for (const shm::RankInfo& info : infos) {
    auto t = ReadTensorTable(options_.shm_name, info.rank);
    if (!t.ok()) return t.status().WithPrefix("engine rank " + std::to_string(info.rank));
    tables.push_back(std::move(t).value());
  }
  const std::string live = LiveVersion().empty() ? tables[0].version : LiveVersion();
  if (!live.empty() && !m.parent_version.empty() && live != m.parent_version) {
    return FailedPrecondition("the engine serves version '" + live + "' but the delta is '" +
                              m.parent_version + "' -> '" + m.version + "'");
  }
  ASSIGN_OR_RETURN(deltasync::RankTensorTables rank_tables, deltasync::ToRankTensorTables(tables));
  ASSIGN_OR_RETURN(auto plan_tables, deltasync::PlanTensorTables(m, rank_tables));
  const uint32_t world = static_cast<uint32_t>(rank_tables.size());
  uint64_t weight_lines = 0;
  for (const deltasync::EngineTensorTable& t : tables) {
    for (const deltasync::EngineTensor& e : t.tensors) weight_lines += (e.local_bytes + 63) / 64;
  }
  std::vector<const shm::RankInfo*> by_rank(world, nullptr);
  for (const shm::RankInfo& info : infos) by_rank[info.rank] = &info;

  // ---- decoding: plans streamed to the ranks in bounded parts while the delta decodes
  set_state(SyncState::kDecoding);
  const uint64_t sync_id = control_->AllocateSyncId();
  std::vector<RankRun> runs(world);
  std::vector<shm::RankChannel*> channels;
  for (uint32_t r = 0; r < world; ++r) {
    ASSIGN_OR_RETURN(runs[r].channel, control_->OpenChannel(*by_rank[r]));
    channels.push_back(&runs[r].channel);
  }
  auto rank_gone = [&](uint32_t r) -> Status {
    const shm::RankInfo& info = runs[r].channel.info;
    if (!control_->IsCurrent(info) || !PidAlive(info.pid)) {
      return FailedPrecondition("engine rank " + std::to_string(r) + " (pid " +
                                std::to_string(info.pid) + ") died during the sync");
    }
    return Status::Ok();
  };
  // From here on, every failure must decide ABORT so no rank keeps a staged plan.
  auto abort_all = [&](const Status& why) -> Status {
    (void)control_->DecideAbort(sync_id);
    for (RankRun& rr : runs) {
      auto msg = shm::MakeText(shm::MessageType::kAbort, sync_id, why.message());
      if (msg.ok()) {
        auto bytes = shm::EncodeMessage(*msg);
        if (bytes.ok()) (void)rr.channel.commands.TryPush(*bytes);
      }
    }
    return why;
  };
  PlanStreamOptions so;
  so.prefix = ArenaPrefix(options_.shm_name);
  so.sync_id = sync_id;
  so.version = request.version;
  so.part_bytes = std::max<uint64_t>(options_.plan_buffer_bytes / (2 * world), 64 << 10);
  so.max_in_flight = 1;
  so.consume_timeout = options_.stage_timeout;
  PlanStreamer streamer(so, channels, plan_tables, rank_gone);
  const auto t_plan = Clock::now();
  deltasync::PlannerOptions po;
  po.decoder = options_.decoder;
  po.max_window_log = options_.max_window_log;
  po.fetch_window_bytes = std::max<uint64_t>(options_.plan_buffer_bytes / 8, 1 << 20);
  po.decode_threads = options_.decode_threads;
  if (po.decode_threads == 0) {
    // One per CPU this (pinned, low-priority) worker may use, from 4 CPUs up: with fewer, the
    // ranks' staging needs the other CPUs and collecting runs for the replay costs more than
    // decoding beside them gains (measured on 2 CPUs with the cpu backend).
    cpu_set_t set;
    CPU_ZERO(&set);
    const int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    po.decode_threads = cpus >= 4 ? static_cast<unsigned>(cpus) : 1;
  }
  po.decode_threads = std::clamp(po.decode_threads, 1u, 256u);
  auto planned = deltasync::BuildSyncPlans(m, *store, rank_tables, streamer, po);
  if (!planned.ok()) return abort_all(planned.status());
  const deltasync::PlanStats& stats = *planned;
  phase("fetch", std::chrono::duration<double, std::milli>(t_plan - t_fetch).count() +
                    stats.fetch_ms);
  phase("decode", stats.decode_ms);
  update([&](SyncRecord& r) {
    r.bytes_fetched = stats.bytes_fetched;
    r.nonzero_bytes = stats.nonzero_bytes;
  });

  // ---- staged: send the last parts, collect partial sums, verify
  MaybeStall("planned");
  auto t_stage = Clock::now();
  Status sent = streamer.Finish();
  if (!sent.ok()) return abort_all(sent);
  update([&](SyncRecord& r) {
    r.plan_parts = streamer.parts_sent();
    r.plan_records = streamer.records();
    r.touched_lines = streamer.touched_lines();
    r.weight_lines = weight_lines;
  });
  std::vector<deltasync::AdlerDelta> inc(m.tensors.size()), full(m.tensors.size());
  // Waits for every rank's messages of `want` type; fails on errors, deaths, timeout.
  auto collect = [&](shm::MessageType want, std::chrono::milliseconds timeout,
                     const std::function<Status(uint32_t, const shm::Message&)>& on) -> Status {
    auto deadline = Clock::now() + timeout;
    std::vector<uint8_t> buf;
    for (;;) {
      bool all = true;
      for (uint32_t r = 0; r < world; ++r) {
        RankRun& rr = runs[r];
        bool done = want == shm::MessageType::kStaged ? rr.staged : rr.committed;
        if (done) continue;
        all = false;
        auto popped = rr.channel.responses.Pop(&buf, 20ms);
        if (!popped.ok()) return popped.status().WithPrefix("rank " + std::to_string(r));
        if (*popped) {
          auto msg = shm::DecodeMessage(buf);
          if (!msg.ok()) return msg.status().WithPrefix("rank " + std::to_string(r));
          if (msg->sync_id != sync_id) continue;
          RETURN_IF_ERROR(RankErrorStatus(*msg, sync_id, r));
          if (msg->type == want) RETURN_IF_ERROR(on(r, *msg));
        } else {
          RETURN_IF_ERROR(rank_gone(r));
        }
      }
      if (all) return Status::Ok();
      if (Clock::now() > deadline) return FailedPrecondition("engine ranks did not answer in time");
    }
  };
  Status staged =
      collect(shm::MessageType::kStaged, options_.stage_timeout,
              [&](uint32_t r, const shm::Message& msg) -> Status {
                ASSIGN_OR_RETURN(shm::StagedReport rep, shm::ParseStaged(msg));
                for (const shm::StagedEntry& e : rep.entries) {
                  if (e.tensor_index >= m.tensors.size())
                    return DataLoss("rank reported an unknown tensor");
                  auto d = deltasync::AdlerDelta::FromSums(e.s1, e.s2);
                  (e.flags & shm::StagedEntry::kFullChecksum ? full : inc)[e.tensor_index].Merge(d);
                }
                if (++runs[r].staged_parts == rep.part_count) runs[r].staged = true;
                return Status::Ok();
              });
  if (!staged.ok()) return abort_all(staged);
  for (size_t t = 0; t < m.tensors.size(); ++t) {
    Status v = deltasync::VerifyStagedTensor(m.tensors[t].name, plan_tables[0][t], inc[t], full[t]);
    if (!v.ok()) return abort_all(v);
  }
  phase("stage", MsSince(t_stage));
  set_state(SyncState::kStaged);
  MaybeStall("staged");

  // ---- committing
  auto t_commit = Clock::now();
  RETURN_IF_ERROR(control_->DecideCommit(sync_id));
  set_state(SyncState::kCommitting);
  for (RankRun& rr : runs) {
    auto bytes = shm::EncodeMessage(shm::MakeCommit(sync_id));
    if (bytes.ok()) (void)rr.channel.commands.TryPush(*bytes);
  }
  uint64_t pause_us = 0;
  Status committed = collect(shm::MessageType::kCommitted, options_.commit_timeout,
                             [&](uint32_t r, const shm::Message& msg) -> Status {
                               ASSIGN_OR_RETURN(shm::CommittedReport rep, shm::ParseCommitted(msg));
                               runs[r].committed = true;
                               pause_us = std::max(pause_us, rep.pause_us);
                               return Status::Ok();
                             });
  if (!committed.ok()) {
    return Internal("COMMIT was decided but not every rank confirmed: " + committed.message());
  }
  phase("commit", MsSince(t_commit));
  phase("pause", static_cast<double>(pause_us) / 1000.0);
  SetLiveVersion(request.version);
  return Status::Ok();
}

}  // namespace deltakv::sidecar
