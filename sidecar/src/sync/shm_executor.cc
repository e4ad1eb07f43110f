#include "sync/shm_executor.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "base/file_util.h"
#include "deltasync/checkpoint.h"
#include "deltasync/delta_manifest.h"
#include "deltasync/engine_tensors.h"
#include "deltasync/plan_verify.h"
#include "deltasync/sync_planner.h"
#include "deltasync/write_plan.h"
#include "shm/messages.h"
#include "shm/plan_arena.h"
#include "sync/live_checksums.h"
#include "sync/node_slice.h"
#include "sync/plan_stream.h"
#include "sync/rank_collect.h"

namespace deltakv::sidecar {

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using deltasync::FormatChecksum;

// Fault injection for tests: DELTAKV_FAULT_STALL="<point>:<ms>" sleeps at that point of a
// sync ("planned": plans built, not yet sent; "staged": verified, not yet decided;
// "committing": COMMIT decided, not yet sent to the ranks).
void MaybeStall(const char* point) {
  const char* env = std::getenv("DELTAKV_FAULT_STALL");
  if (env == nullptr) return;
  std::string spec(env);
  size_t colon = spec.find(':');
  if (colon == std::string::npos || spec.substr(0, colon) != point) return;
  std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(spec.c_str() + colon + 1)));
}

int64_t UnixNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
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

std::string Hex(uint32_t adler) { return "0x" + FormatChecksum(adler); }

// "a; b; c (and N more)" for messages that must stay readable.
std::string JoinFirst(const std::vector<std::string>& items, size_t n = 8) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < n; ++i) out += (i ? "; " : "") + items[i];
  if (items.size() > n) out += " (and " + std::to_string(items.size() - n) + " more)";
  return out;
}

// One rank's view during a sync.
struct RankRun {
  shm::RankChannel channel;
  bool staged = false;
  uint32_t staged_parts = 0;
  bool committed = false;
  std::string commit_error;
  uint64_t pause_us = 0;
  std::vector<deltasync::AdlerDelta> inc;  // per delta tensor: this rank's incremental sums
};

}  // namespace

// The ranks attached now and one job's work on them. Each phase is a method; a phase that
// fails returns the reason, and Run applies the failure rule of the header.
class ShmSyncExecutor::Job {
 public:
  Job(ShmSyncExecutor& ex, const SyncRequest& request, const Update& update)
      : ex_(ex), request_(request), update_(update) {}

  Status RunSync();
  Status RunVerify();
  Status RunScrub();

 private:
  // ---- shared by every kind of job
  Status AttachRanks();
  Status RankGone(uint32_t r) const;
  StatusOr<LiveChecksums> Checksum(uint64_t rate_bytes_per_s, uint32_t flags);
  std::vector<shm::RankChannel*> Channels();
  void SetState(SyncState s) {
    update_([&](SyncRecord& r) { r.state = s; });
  }
  void Phase(const char* name, double ms) {
    update_([&](SyncRecord& r) { r.phase_ms[name] = ms; });
  }
  // Marks the table diverged with `why`, the record diverged, and returns DataLoss(why).
  Status Diverge(const std::string& why);
  // Per-tensor comparison of live checksums with the table; mismatch messages.
  std::vector<std::string> CompareWithTable(const LiveChecksums& live,
                                            const ChecksumTable& table) const;
  ChecksumTable TableFromLive(const LiveChecksums& live, const std::string& version,
                              const std::string& source) const;
  // The version id every rank's table names ("" if none names one); FailedPrecondition if two
  // ranks name different ones.
  StatusOr<std::string> RanksVersion() const;

  // ---- sync phases
  Status Admit();
  Status CheckParents();
  Status Decode();
  Status Stage();
  // Multi-node: PREPARED to the group, then its decision (FailedPrecondition for ABORT).
  Status GroupDecide(const std::string& key);
  // Multi-node: waits for the decision's commit point, at most the commit margin.
  void AwaitCommitPoint();
  // Multi-node, after the commit: publishes this node's pause and records the group's view.
  void ReportGroupPauses(const std::string& key);
  Status Commit();
  void Advance();
  Status AbortAll(const Status& why);

  ShmSyncExecutor& ex_;
  const SyncRequest& request_;
  const Update& update_;

  std::vector<shm::RankInfo> infos_;  // index = rank
  std::vector<deltasync::EngineTensorTable> tables_;
  std::vector<RankRun> runs_;
  uint32_t world_ = 0;

  std::unique_ptr<deltasync::ObjectStore> store_;
  deltasync::DeltaManifest m_;
  deltasync::RankTensorTables rank_tables_;
  std::vector<std::vector<deltasync::PlanTensor>> plan_tables_;
  ChecksumTable table_;  // the executor's table as of Admit
  std::string live_;  // the version the ranks serve, as of Admit
  double admit_ms_ = 0;
  uint64_t sync_id_ = 0;
  std::unique_ptr<PlanStreamer> streamer_;
  // The global ranks the attached ranks serve, and per delta tensor whether this node holds only
  // part of it (then the group verifies it from every node's sums, see GroupDecide).
  NodeSlice slice_;
  std::vector<bool> partial_;
  std::vector<deltasync::AdlerDelta> partial_parent_, partial_inc_, partial_full_;
  // The sums of the tensors split over nodes, as this node publishes them with PREPARED.
  nlohmann::json PartialJson() const;
  // Every member's PREPARED sums combined, against the delta's checksums.
  Status CheckPartials(const std::vector<nlohmann::json>& partials) const;
  // Pipeline stages: this node's engine serves one stage of the topology as a whole
  // tensor-parallel group, and holds only the tensors its ranks registered. Admit drops the
  // others from m_ (held_: their indices in the delta's full list of all_names_); the group
  // checks before COMMIT that every changed tensor is held by some node (CheckHeld).
  bool stage_ = false;
  std::set<std::string> stage_objects_;  // objects holding frames of other stages' tensors
  std::vector<std::string> all_names_;
  std::vector<uint32_t> held_;
  Status CheckHeld(const std::vector<nlohmann::json>& records) const;
  // "2..3 of 4": the global ranks this node's engine serves.
  std::string SliceText() const {
    return std::to_string(slice_.first) + ".." + std::to_string(slice_.first + slice_.count - 1) +
           " of " + std::to_string(slice_.world);
  }
  // This node's name in its group ("this node" without one).
  std::string NodeName() const {
    return ex_.options_.group != nullptr ? ex_.options_.group->options().node : "this node";
  }
  static std::string SumsText(const deltasync::AdlerDelta& d) {
    return "S1 " + std::to_string(d.s1()) + " S2 " + std::to_string(d.s2());
  }
  GroupDecision decision_;  // multi-node: the group's COMMIT, as read from etcd
  NodePause pause_;         // this node's pause (all ranks together), set by Commit()
};

// ------------------------------------------------------------------------------ shared parts

// A rank that died without freeing its handle (SIGKILL, a crash, an engine that exits on SIGTERM
// without cleaning up) leaves its tensor table behind; remove it when it is still the dead
// process's (a successor's table has another creator).
void RemoveTablesOf(const std::string& shm_name, const std::vector<shm::RankInfo>& dead) {
  for (const shm::RankInfo& info : dead) {
    const std::string name = deltasync::EngineTensorTableSegmentName(shm_name, info.rank);
    auto seg = shm::Segment::Open(name, shm::SegmentKind::kScratch);
    if (seg.ok() && seg->header()->creator_pid == info.pid) (void)shm::Segment::Unlink(name);
  }
}

Status ShmSyncExecutor::Job::AttachRanks() {
  RemoveTablesOf(ex_.options_.shm_name, ex_.control_->ReclaimDead());
  std::vector<shm::RankInfo> infos = ex_.control_->ActiveRanks();
  if (infos.empty()) {
    return FailedPrecondition("no engine ranks are attached to '" + ex_.options_.shm_name + "'");
  }
  std::vector<deltasync::EngineTensorTable> tables;
  for (const shm::RankInfo& info : infos) {
    auto t = ReadTensorTable(ex_.options_.shm_name, info.rank);
    if (!t.ok()) return t.status().WithPrefix("engine rank " + std::to_string(info.rank));
    tables.push_back(std::move(t).value());
  }
  // ToRankTensorTables checks that ranks 0..world-1 are each present once.
  ASSIGN_OR_RETURN(rank_tables_, deltasync::ToRankTensorTables(tables));
  world_ = static_cast<uint32_t>(rank_tables_.size());
  slice_ = NodeSlice{tables[0].LayoutRank() - tables[0].rank, world_, tables[0].LayoutWorld()};
  if (ex_.options_.group != nullptr && ex_.options_.group->options().topology) {
    const Topology& topo = *ex_.options_.group->options().topology;
    const std::string& node = ex_.options_.group->options().node;
    std::vector<uint32_t> attached;
    for (uint32_t r = 0; r < world_; ++r) attached.push_back(slice_.first + r);
    const std::vector<uint32_t>& mine = topo.RanksOf(node);
    // A pipeline stage: the node's ranks are exactly one stage's tp ranks, and its engine
    // serves that stage as a whole tensor-parallel group of tp ranks (layouts of tp ranks).
    stage_ = topo.pp > 1 && slice_.whole() && slice_.world == topo.tp && !mine.empty() &&
             mine.size() == topo.tp && mine[0] % topo.tp == 0;
    if (!stage_ && (topo.world != slice_.world || mine != attached)) {
      return FailedPrecondition(
          "the engine's ranks are global ranks " + std::to_string(slice_.first) + ".." +
          std::to_string(slice_.first + world_ - 1) + " of " + std::to_string(slice_.world) +
          ", but the topology gives node '" + node + "' " +
          std::to_string(topo.RanksOf(node).size()) + " rank(s) of " + std::to_string(topo.world));
    }
  }
  infos_.assign(world_, {});
  tables_.assign(world_, {});
  for (size_t i = 0; i < infos.size(); ++i) {
    infos_[infos[i].rank] = infos[i];
    tables_[infos[i].rank] = std::move(tables[i]);
  }
  runs_.clear();
  runs_.resize(world_);
  for (uint32_t r = 0; r < world_; ++r) {
    ASSIGN_OR_RETURN(runs_[r].channel, ex_.control_->OpenChannel(infos_[r]));
  }
  return Status::Ok();
}

std::vector<shm::RankChannel*> ShmSyncExecutor::Job::Channels() {
  std::vector<shm::RankChannel*> out;
  for (RankRun& rr : runs_) out.push_back(&rr.channel);
  return out;
}

Status ShmSyncExecutor::Job::RankGone(uint32_t r) const {
  const shm::RankInfo& info = runs_[r].channel.info;
  const std::string who = "engine rank " + std::to_string(r) + " (pid " + std::to_string(info.pid) + ")";
  switch (ex_.control_->CheckRank(info)) {
    case shm::PeerState::kAlive:
      return Status::Ok();
    case shm::PeerState::kHeartbeatStale:
      return FailedPrecondition(who + " stopped answering: no heartbeat for over 1 s (stopped, "
                                      "wedged or dying)");
    case shm::PeerState::kProcessGone:
      break;
  }
  return FailedPrecondition(who + " died during the job (its process is gone, a zombie, or it "
                                  "left its slot)");
}

StatusOr<LiveChecksums> ShmSyncExecutor::Job::Checksum(uint64_t rate_bytes_per_s, uint32_t flags) {
  shm::VerifyRequest req;
  req.flags = flags;
  req.rate_bytes_per_s = rate_bytes_per_s;
  const uint64_t job_id = ex_.control_->AllocateSyncId();
  const bool scrub = flags & shm::kVerifyScrub;
  bool stopping = false;
  auto live = CollectLiveChecksums(
      Channels(), tables_, job_id, req, ex_.options_.verify_timeout, [&](uint32_t r) -> Status {
        if (scrub && ex_.stop_scrub_.load()) {
          // A sync is waiting: tell every rank to stop reading (they check between chunks).
          if (!stopping) {
            stopping = true;
            auto bytes = shm::EncodeMessage(shm::MakeText(shm::MessageType::kAbort, job_id,
                                                          "scrub stopped for a sync").value());
            for (RankRun& rr : runs_) {
              if (bytes.ok()) (void)rr.channel.commands.TryPush(*bytes);
            }
          }
          return FailedPrecondition("the scrub was stopped for a sync");
        }
        return RankGone(r);
      });
  if (live.ok()) {
    update_([&](SyncRecord& rec) {
      rec.tensors_checked = live->tensors.size();
      rec.bytes_checked = live->bytes_read;
    });
  }
  return live;
}

Status ShmSyncExecutor::Job::Diverge(const std::string& why) {
  ChecksumTable t = ex_.table();
  t.diverged = why;
  t.updated_unix = UnixNow();
  ex_.SetTable(std::move(t));
  // The manager ends the record `diverged` when the job returns (a terminal state set now would
  // let a client read the record before its error is written).
  update_([](SyncRecord& r) { r.diverges = true; });
  return DataLoss(why);
}

std::vector<std::string> ShmSyncExecutor::Job::CompareWithTable(const LiveChecksums& live,
                                                                const ChecksumTable& table) const {
  std::vector<std::string> out;
  for (const auto& [name, t] : live.tensors) {
    auto it = table.adler32.find(name);
    if (it == table.adler32.end()) continue;  // registered after the table was made
    const uint32_t now = t.Adler32();
    if (now == it->second) continue;
    std::string ranks;
    auto owned = table.owned.find(name);
    if (owned != table.owned.end() && owned->second.size() == t.ranks.size()) {
      ranks = DifferingRanks(t, owned->second);
    }
    out.push_back("tensor '" + name + "'" + (ranks.empty() ? "" : " (" + ranks + ")") +
                  ": the engine holds Adler-32 " + Hex(now) + ", the table (" + table.version +
                  ") says " + Hex(it->second));
  }
  for (std::string& s : live.ReplicaMismatches()) out.push_back(std::move(s));
  return out;
}

ChecksumTable ShmSyncExecutor::Job::TableFromLive(const LiveChecksums& live,
                                                  const std::string& version,
                                                  const std::string& source) const {
  ChecksumTable t;
  t.version = version;
  t.source = source;
  t.updated_unix = UnixNow();
  t.ranks = ChecksumTable::RanksOf(infos_);
  if (!slice_.whole()) {
    t.slice_first = slice_.first;
    t.slice_count = slice_.count;
    t.slice_world = slice_.world;
  }
  for (const auto& [name, tl] : live.tensors) {
    t.adler32[name] = tl.Adler32();
    std::vector<deltasync::AdlerDelta>& owned = t.owned[name];
    for (const RankTensorSums& r : tl.ranks) owned.push_back(r.owned);
  }
  return t;
}

StatusOr<std::string> ShmSyncExecutor::Job::RanksVersion() const {
  std::string version;
  uint32_t named_by = 0;
  for (uint32_t r = 0; r < world_; ++r) {
    const std::string& v = tables_[r].version;
    if (v.empty()) continue;
    if (version.empty()) {
      version = v;
      named_by = r;
    } else if (v != version) {
      return FailedPrecondition("engine ranks disagree about the version they serve: rank " +
                                std::to_string(named_by) + " serves '" + version + "', rank " +
                                std::to_string(r) + " serves '" + v + "'");
    }
  }
  return version;
}

// ------------------------------------------------------------------------------ sync phases

Status ShmSyncExecutor::Job::Admit() {
  SetState(SyncState::kFetching);
  const auto t0 = Clock::now();
  ASSIGN_OR_RETURN(store_, OpenStore(request_.delta, ex_.options_.http, ex_.options_.volume_store));
  ASSIGN_OR_RETURN(std::string manifest_text,
                   store_->ReadObject(deltasync::kManifestFileName, 1ull << 30));
  ASSIGN_OR_RETURN(m_, deltasync::ParseDeltaManifest(manifest_text));
  if (!m_.version.empty() && m_.version != request_.version) {
    return InvalidArgument("the request names version '" + request_.version +
                           "' but the delta produces '" + m_.version + "'");
  }
  update_([&](SyncRecord& r) {
    r.parent_version = m_.parent_version;
    r.tensors_changed = m_.tensors.size();
  });
  table_ = ex_.table();
  if (!table_.diverged.empty()) {
    return FailedPrecondition("syncs are refused until the engine is verified again "
                              "(POST /v1/verify): " + table_.diverged);
  }
  RETURN_IF_ERROR(AttachRanks());
  for (uint32_t r = 0; r < world_; ++r) {
    const uint64_t staged = infos_[r].staged_sync_id;
    if (staged != 0 && ex_.control_->ReadDecision(staged) == shm::Decision::kCommit) {
      return FailedPrecondition("engine rank " + std::to_string(r) +
                                " has not finished applying committed sync " +
                                std::to_string(staged));
    }
  }
  // What the engine serves: the ranks say so in their tables; the sidecar's record (table,
  // state dir) counts only when no rank names a version.
  ASSIGN_OR_RETURN(std::string live, RanksVersion());
  if (live.empty()) live = ex_.LiveVersion();
  live_ = live;
  if (!live.empty() && !m_.parent_version.empty() && live != m_.parent_version) {
    return FailedPrecondition("the engine serves version '" + live + "' but the delta is '" +
                              m_.parent_version + "' -> '" + m_.version + "'");
  }
  all_names_.clear();
  held_.clear();
  stage_objects_.clear();
  if (stage_) {
    // Another stage's tensors: registered by none of this node's ranks. One some ranks
    // registered and others not is refused below (PlanTensorTables).
    std::vector<deltasync::DeltaTensor> mine;
    for (uint32_t i = 0; i < m_.tensors.size(); ++i) {
      all_names_.push_back(m_.tensors[i].name);
      bool registered = false;
      for (const auto& ranks : rank_tables_) registered |= ranks.count(m_.tensors[i].name) > 0;
      if (!registered) {
        for (const deltasync::DeltaFrame& f : m_.tensors[i].frames) stage_objects_.insert(f.object);
        continue;
      }
      held_.push_back(i);
      mine.push_back(std::move(m_.tensors[i]));
    }
    m_.tensors = std::move(mine);
  }
  ASSIGN_OR_RETURN(plan_tables_, deltasync::PlanTensorTables(m_, rank_tables_, slice_.world));
  partial_.assign(m_.tensors.size(), false);
  if (!slice_.whole()) {
    for (size_t i = 0; i < m_.tensors.size(); ++i) {
      const deltasync::DeltaTensor& t = m_.tensors[i];
      const deltasync::TensorLayout& layout = rank_tables_[0].find(t.name)->second.layout;
      ASSIGN_OR_RETURN(NodeHolding h, HoldingOf(layout, slice_));
      partial_[i] = h.bytes < t.length;
      if (partial_[i] && h.shared) {
        return InvalidArgument("tensor '" + t.name + "': this node holds part of it and ranks "
                               "of another node hold some of the same bytes; no node could "
                               "verify its copy of those bytes (place each replica set on one node)");
      }
      if (partial_[i] && ex_.options_.group == nullptr) {
        return FailedPrecondition("the engine's ranks hold only part of tensor '" + t.name +
                                  "' (global ranks " + std::to_string(slice_.first) + ".." +
                                  std::to_string(slice_.first + world_ - 1) + " of " +
                                  std::to_string(slice_.world) +
                                  "): a slice of a group syncs only with --group");
      }
    }
  }
  if (!live.empty() && table_.version != live) table_ = ChecksumTable{};  // another version's
  admit_ms_ = MsSince(t0);
  return Status::Ok();
}

Status ShmSyncExecutor::Job::CheckParents() {
  const auto t0 = Clock::now();
  // A table made for another slice of the group (another topology) holds other bytes' sums for
  // split tensors: it vouches for nothing here and is not compared with.
  if (!table_.ForSlice(slice_.first, slice_.count, slice_.world)) table_ = ChecksumTable{};
  bool covered = table_.CurrentFor(infos_);
  for (size_t i = 0; i < m_.tensors.size(); ++i) {
    const deltasync::DeltaTensor& t = m_.tensors[i];
    covered &= table_.adler32.count(t.name) > 0;
    // A tensor split over nodes needs this node's parent sums from the table.
    auto owned = table_.owned.find(t.name);
    if (partial_[i]) covered &= owned != table_.owned.end() && owned->second.size() == world_;
  }
  std::vector<std::string> wrong;
  if (!covered) {
    // Early check: the table cannot vouch for these ranks (it is absent, for another version,
    // or from other rank processes), so the ranks checksum what they serve now.
    ASSIGN_OR_RETURN(LiveChecksums live, Checksum(0, 0));
    wrong = table_.empty() ? live.ReplicaMismatches() : CompareWithTable(live, table_);
    ChecksumTable rebuilt = TableFromLive(
        live, live_, table_.empty() ? "live bytes (early check), not compared with a checkpoint"
                                    : table_.source + ", re-checked on new rank processes");
    rebuilt.checkpoint_verified = table_.checkpoint_verified && wrong.empty();
    table_ = std::move(rebuilt);
  }
  partial_parent_.assign(m_.tensors.size(), {});
  for (size_t i = 0; i < m_.tensors.size(); ++i) {
    const deltasync::DeltaTensor& t = m_.tensors[i];
    if (partial_[i]) {
      // Only the group can compare these with the delta's parent (CheckPartials).
      auto owned = table_.owned.find(t.name);
      if (owned == table_.owned.end() || owned->second.size() != world_) {
        wrong.push_back("tensor '" + t.name + "': no sums of this node's part");
        continue;
      }
      for (const deltasync::AdlerDelta& d : owned->second) partial_parent_[i].Merge(d);
      continue;
    }
    auto it = table_.adler32.find(t.name);
    if (it == table_.adler32.end()) continue;  // PlanTensorTables refused unregistered tensors
    if (it->second != t.parent_adler32) {
      wrong.push_back("the engine holds tensor '" + t.name + "' with Adler-32 " + Hex(it->second) +
                      ", the delta's parent is " + Hex(t.parent_adler32));
    }
  }
  if (!covered) Phase("check", MsSince(t0));  // the early check's time; the table lookup is free
  if (!wrong.empty()) {
    return FailedPrecondition("refused before decoding: " + JoinFirst(wrong));
  }
  if (!covered) ex_.SetTable(table_);  // the early check's result is the new base
  return Status::Ok();
}

Status ShmSyncExecutor::Job::AbortAll(const Status& why) {
  (void)ex_.control_->DecideAbort(sync_id_);
  for (RankRun& rr : runs_) {
    auto msg = shm::MakeText(shm::MessageType::kAbort, sync_id_, why.message());
    if (msg.ok()) {
      auto bytes = shm::EncodeMessage(*msg);
      if (bytes.ok()) (void)rr.channel.commands.TryPush(*bytes);
    }
  }
  return why;
}

Status ShmSyncExecutor::Job::Decode() {
  SetState(SyncState::kDecoding);
  const ShmExecutorOptions& o = ex_.options_;
  PlanStreamOptions so;
  so.sync_id = sync_id_;
  so.version = request_.version;
  // Parts of at most kPartBytes, so ranks stage while the delta is still being walked (a part is
  // sent when full): the stage that remains after the walk is about one part (measured on the
  // cpu backend, 1 GiB at 0.1 %: 5-8 ms after the walk with 4 MiB parts, 1-2 ms with 1 MiB).
  // The budget is then spent on more parts in flight per rank, world * (in flight + 1) * part
  // <= budget.
  constexpr uint64_t kPartBytes = 1ull << 20;
  so.part_bytes =
      std::clamp<uint64_t>(o.plan_buffer_bytes / (2 * world_), uint64_t{64} << 10, kPartBytes);
  so.max_in_flight = static_cast<size_t>(
      std::clamp<uint64_t>(o.plan_buffer_bytes / (world_ * so.part_bytes), 2, 8) - 1);
  so.consume_timeout = o.stage_timeout;
  streamer_ = std::make_unique<PlanStreamer>(
      so, Channels(), plan_tables_, ex_.ArenaPools(world_),
      [this] { return ++ex_.arena_generation_; }, [this](uint32_t r) { return RankGone(r); });
  const auto t_plan = Clock::now();
  deltasync::PlannerOptions po;
  po.decoder = o.decoder;
  po.max_window_log = o.max_window_log;
  po.fetch_window_bytes = std::max<uint64_t>(o.plan_buffer_bytes / 8, 1 << 20);
  po.decode_threads = o.decode_threads;
  if (po.decode_threads == 0) {
    // One per CPU this (pinned, low-priority) worker may use, from 4 CPUs up: with fewer, the
    // ranks' staging needs the other CPUs, and walking beside planning gains nothing (measured
    // on 2 CPUs with the cpu backend: 1 GiB, 1 % elements, 0.80 s with 1 thread or 2).
    cpu_set_t set;
    CPU_ZERO(&set);
    const int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    po.decode_threads = cpus >= 4 ? static_cast<unsigned>(cpus) : 1;
  }
  po.decode_threads = std::clamp(po.decode_threads, 1u, 256u);
  deltasync::PlanOutput* out = streamer_.get();
  std::unique_ptr<NodePlanOutput> node_out;
  // Objects that hold other stages' frames are read in part: this stage's frames only.
  po.partial_objects = stage_objects_;
  if (!slice_.whole()) {
    // A slice of a group: fetch only the frames that overlap bytes this node's ranks hold, and
    // plan only for them.
    node_out = std::make_unique<NodePlanOutput>(*streamer_, slice_, m_.tensors.size());
    out = node_out.get();
    po.frame_filter = [this](uint32_t tensor, uint64_t offset, uint64_t length) {
      return Overlaps(rank_tables_[0].find(m_.tensors[tensor].name)->second.layout, slice_,
                      offset, length);
    };
  }
  ASSIGN_OR_RETURN(deltasync::PlanStats stats,
                   deltasync::BuildSyncPlans(m_, *store_, rank_tables_, *out, po));
  Phase("fetch", admit_ms_ + stats.fetch_ms);
  Phase("decode", stats.decode_ms);
  Phase("plan", MsSince(t_plan));
  update_([&](SyncRecord& r) {
    r.bytes_fetched = stats.bytes_fetched;
    r.nonzero_bytes = stats.nonzero_bytes;
  });
  return Status::Ok();
}

Status ShmSyncExecutor::Job::Stage() {
  MaybeStall("planned");
  const auto t0 = Clock::now();
  RETURN_IF_ERROR(streamer_->Finish());
  uint64_t weight_lines = 0;
  for (const deltasync::EngineTensorTable& t : tables_) {
    for (const deltasync::EngineTensor& e : t.tensors) weight_lines += (e.local_bytes + 63) / 64;
  }
  update_([&](SyncRecord& r) {
    r.plan_parts = streamer_->parts_sent();
    r.plan_records = streamer_->records();
    r.touched_lines = streamer_->touched_lines();
    r.weight_lines = weight_lines;
  });
  const size_t n = m_.tensors.size();
  std::vector<deltasync::AdlerDelta> inc(n), full(n);
  for (RankRun& rr : runs_) rr.inc.assign(n, {});
  CollectSpec spec;
  spec.id = sync_id_;
  spec.want = shm::MessageType::kStaged;
  spec.timeout = ex_.options_.stage_timeout;
  spec.rank_gone = [this](uint32_t r) { return RankGone(r); };
  spec.on_reply = [&](uint32_t r, const shm::Message& msg) -> StatusOr<bool> {
    ASSIGN_OR_RETURN(shm::StagedReport rep, shm::ParseStaged(msg));
    for (const shm::StagedEntry& e : rep.entries) {
      if (e.tensor_index >= n) {
        return DataLoss("engine rank " + std::to_string(r) + " reported an unknown tensor");
      }
      auto d = deltasync::AdlerDelta::FromSums(e.s1, e.s2);
      if (e.flags & shm::StagedEntry::kFullChecksum) {
        full[e.tensor_index].Merge(d);
      } else {
        inc[e.tensor_index].Merge(d);
        runs_[r].inc[e.tensor_index].Merge(d);
      }
    }
    return ++runs_[r].staged_parts == rep.part_count;
  };
  RETURN_IF_ERROR(CollectFromRanks(Channels(), spec));
  partial_inc_.assign(n, {});
  partial_full_.assign(n, {});
  for (size_t t = 0; t < n; ++t) {
    if (partial_[t]) {
      // Verified by the group from every node's sums before COMMIT (CheckPartials).
      partial_inc_[t] = inc[t];
      partial_full_[t] = full[t];
      continue;
    }
    RETURN_IF_ERROR(deltasync::VerifyStagedTensor(m_.tensors[t].name, plan_tables_[0][t], inc[t],
                                                  full[t]));
  }
  Phase("stage", MsSince(t0));
  SetState(SyncState::kStaged);
  MaybeStall("staged");
  return Status::Ok();
}

Status ShmSyncExecutor::Job::Commit() {
  const auto t0 = Clock::now();
  const int64_t decided_ns = UnixNs();
  RETURN_IF_ERROR(ex_.control_->DecideCommit(sync_id_));
  SetState(SyncState::kCommitting);
  MaybeStall("committing");
  for (RankRun& rr : runs_) {
    auto bytes = shm::EncodeMessage(shm::MakeCommit(sync_id_));
    if (bytes.ok()) (void)rr.channel.commands.TryPush(*bytes);
  }
  uint64_t pause_us = 0;
  // The node's pause: the first rank's pause start to the last rank's resume. A rank that does
  // not report its times (an older shim) counts from the decision to its confirmation.
  int64_t pause_start_ns = 0, resume_ns = 0;
  CollectSpec spec;
  spec.id = sync_id_;
  spec.want = shm::MessageType::kCommitted;
  spec.timeout = ex_.options_.commit_timeout;
  spec.rank_gone = [this](uint32_t r) { return RankGone(r); };
  spec.on_reply = [&](uint32_t r, const shm::Message& msg) -> StatusOr<bool> {
    ASSIGN_OR_RETURN(shm::CommittedReport rep, shm::ParseCommitted(msg));
    runs_[r].committed = true;
    pause_us = std::max(pause_us, rep.pause_us);
    const bool timed = rep.pause_start_unix_ns > 0 && rep.resume_unix_ns >= rep.pause_start_unix_ns;
    const int64_t start = timed ? rep.pause_start_unix_ns : decided_ns;
    const int64_t end = timed ? rep.resume_unix_ns : UnixNs();
    pause_start_ns = pause_start_ns == 0 ? start : std::min(pause_start_ns, start);
    resume_ns = std::max(resume_ns, end);
    return true;
  };
  spec.on_error = [&](uint32_t r, const std::string& why) -> StatusOr<bool> {
    runs_[r].commit_error = why;
    return true;
  };
  Status collected = CollectFromRanks(Channels(), spec);
  std::vector<std::string> ok, failed;
  for (uint32_t r = 0; r < world_; ++r) {
    if (runs_[r].committed) {
      ok.push_back(std::to_string(r));
    } else {
      failed.push_back("rank " + std::to_string(r) + ": " +
                       (runs_[r].commit_error.empty() ? "no confirmation (" + collected.message() + ")"
                                                      : runs_[r].commit_error));
    }
  }
  Phase("commit", MsSince(t0));
  Phase("pause", static_cast<double>(pause_us) / 1000.0);
  pause_ = NodePause{ex_.options_.group ? ex_.options_.group->options().node : "", pause_start_ns,
                     resume_ns, static_cast<double>(pause_us) / 1000.0};
  if (!failed.empty()) {
    std::string served;
    for (const std::string& r : ok) served += (served.empty() ? "" : ", ") + r;
    return Diverge("sync " + std::to_string(sync_id_) + " to '" + request_.version +
                   "' was decided COMMIT but not every rank applied it: " +
                   (served.empty() ? "no rank confirmed" : "ranks " + served + " serve '" +
                                                               request_.version + "'") +
                   "; " + JoinFirst(failed));
  }
  return Status::Ok();
}

void ShmSyncExecutor::Job::Advance() {
  ChecksumTable t = table_;
  for (size_t i = 0; i < m_.tensors.size(); ++i) {
    const deltasync::DeltaTensor& d = m_.tensors[i];
    t.adler32[d.name] = d.adler32;
    auto owned = t.owned.find(d.name);
    if (owned == t.owned.end()) continue;
    if (owned->second.size() != world_) {
      t.owned.erase(owned);
      continue;
    }
    for (uint32_t r = 0; r < world_; ++r) owned->second[r].Merge(runs_[r].inc[i]);
    if (partial_[i]) {
      // The node's table holds what its ranks serve of a split tensor: their sums' checksum.
      deltasync::AdlerDelta node;
      for (const deltasync::AdlerDelta& o : owned->second) node.Merge(o);
      t.adler32[d.name] = node.Apply(deltasync::Adler32OfZeros(d.length), d.length);
    }
  }
  for (size_t i = 0; i < m_.tensors.size(); ++i) {
    auto owned = t.owned.find(m_.tensors[i].name);
    if (partial_[i] && owned == t.owned.end()) t.adler32.erase(m_.tensors[i].name);
  }
  t.version = request_.version;
  t.source = "sync " + std::to_string(sync_id_) + " on " + (table_.source.empty() ? "?" : table_.source);
  if (t.source.size() > 512) t.source = "sync " + std::to_string(sync_id_) + " on a chain of syncs";
  t.ranks = ChecksumTable::RanksOf(infos_);
  t.slice_first = slice_.whole() ? 0 : slice_.first;
  t.slice_count = slice_.whole() ? 0 : slice_.count;
  t.slice_world = slice_.whole() ? 0 : slice_.world;
  t.updated_unix = UnixNow();
  ex_.SetTable(std::move(t));
}

nlohmann::json ShmSyncExecutor::Job::PartialJson() const {
  // [[tensor index, parent s1, s2, change s1, s2, full s1, s2], ...] over the bytes this node holds.
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < partial_.size(); ++i) {
    if (!partial_[i]) continue;
    out.push_back({i, partial_parent_[i].s1(), partial_parent_[i].s2(), partial_inc_[i].s1(),
                   partial_inc_[i].s2(), partial_full_[i].s1(), partial_full_[i].s2()});
  }
  return out;
}

Status ShmSyncExecutor::Job::CheckHeld(const std::vector<nlohmann::json>& records) const {
  if (!stage_) return Status::Ok();
  // A record without "held" is a node that holds every tensor.
  std::vector<bool> held(all_names_.size(), false);
  for (const nlohmann::json& r : records) {
    if (!r.is_object() || !r.contains("held")) return Status::Ok();
    const nlohmann::json& h = r["held"];
    if (!h.is_object() || !h.contains("of") || !h["of"].is_number_unsigned() ||
        h["of"].get<uint64_t>() != all_names_.size() || !h.contains("tensors") ||
        !h["tensors"].is_array()) {
      return DataLoss("a PREPARED record's 'held' is not {\"of\": " +
                      std::to_string(all_names_.size()) + ", \"tensors\": [...]}");
    }
    for (const nlohmann::json& i : h["tensors"]) {
      if (!i.is_number_unsigned() || i.get<uint64_t>() >= held.size()) {
        return DataLoss("a PREPARED record's 'held' names tensor " + i.dump());
      }
      held[i.get<uint64_t>()] = true;
    }
  }
  for (size_t i = 0; i < held.size(); ++i) {
    if (!held[i]) {
      return FailedPrecondition("the delta changes tensor '" + all_names_[i] +
                                "', which no node's engine registered (pipeline stages)");
    }
  }
  return Status::Ok();
}

Status ShmSyncExecutor::Job::CheckPartials(const std::vector<nlohmann::json>& partials) const {
  const size_t n = m_.tensors.size();
  std::vector<deltasync::AdlerDelta> parent(n), inc(n), full(n);
  std::vector<bool> seen(n, false);
  for (const nlohmann::json& p : partials) {
    if (p.is_null()) continue;
    if (!p.is_array()) return DataLoss("a PREPARED record's 'partial' is not an array");
    for (const nlohmann::json& e : p) {
      if (!e.is_array() || e.size() != 7) return DataLoss("a 'partial' entry is not 7 numbers");
      for (const nlohmann::json& v : e) {
        if (!v.is_number_unsigned()) return DataLoss("a 'partial' entry holds a non-integer");
      }
      const uint64_t i = e[0].get<uint64_t>();
      if (i >= n) return DataLoss("a 'partial' entry names tensor " + std::to_string(i));
      auto sums = [&](size_t k) {
        return deltasync::AdlerDelta::FromSums(static_cast<uint32_t>(e[k].get<uint64_t>() % 65521),
                                               static_cast<uint32_t>(e[k + 1].get<uint64_t>() % 65521));
      };
      parent[i].Merge(sums(1));
      inc[i].Merge(sums(3));
      full[i].Merge(sums(5));
      seen[i] = true;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (!partial_[i]) continue;
    const deltasync::DeltaTensor& t = m_.tensors[i];
    if (!seen[i]) return DataLoss("tensor '" + t.name + "': no node's sums");
    const uint32_t held = parent[i].Apply(deltasync::Adler32OfZeros(t.length), t.length);
    if (held != t.parent_adler32) {
      return FailedPrecondition("tensor '" + t.name + "' (split over nodes): the nodes hold "
                                "Adler-32 " + Hex(held) + ", the delta's parent is " +
                                Hex(t.parent_adler32));
    }
    RETURN_IF_ERROR(deltasync::VerifyStagedTensor(t.name + "' (split over nodes", plan_tables_[0][i],
                                                  inc[i], full[i]));
  }
  return Status::Ok();
}

Status ShmSyncExecutor::Job::GroupDecide(const std::string& key) {
  GroupCommit& group = *ex_.options_.group;
  const auto t0 = Clock::now();
  const bool split = std::find(partial_.begin(), partial_.end(), true) != partial_.end();
  nlohmann::json fields = nlohmann::json::object();
  if (split) fields["partial"] = PartialJson();
  if (stage_) fields["held"] = {{"of", all_names_.size()}, {"tensors", held_}};
  auto d = group.PrepareAndAwait(key, request_.version, live_, request_.delta, sync_id_, fields,
                                 [this](const std::vector<nlohmann::json>& records) {
                                   std::vector<nlohmann::json> partials;
                                   for (const nlohmann::json& r : records) {
                                     partials.push_back(r.is_object() && r.contains("partial")
                                                            ? r["partial"]
                                                            : nlohmann::json());
                                   }
                                   RETURN_IF_ERROR(CheckPartials(partials));
                                   return CheckHeld(records);
                                 });
  Phase("group", MsSince(t0));
  RETURN_IF_ERROR(d.status());
  decision_ = *d;
  update_([&](SyncRecord& r) {
    if (r.group) r.group->decision_learnt = d->learnt;
  });
  if (!d->commit) {
    return FailedPrecondition("group '" + group.options().group + "' decided ABORT (written by node '" +
                              d->by + "'): " + d->reason);
  }
  MaybeStall("decided");
  return Status::Ok();
}

void ShmSyncExecutor::Job::AwaitCommitPoint() {
  const auto margin = ex_.options_.group->options().commit_margin;
  const int64_t wait_ns =
      std::clamp<int64_t>(decision_.commit_at_unix_ns - UnixNs(), 0,
                          std::chrono::duration_cast<std::chrono::nanoseconds>(margin).count());
  if (wait_ns > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait_ns));
  update_([&](SyncRecord& r) {
    if (!r.group) return;
    r.group->commit_at_unix_ns = decision_.commit_at_unix_ns;
    r.group->commit_wait_ms = static_cast<double>(wait_ns) / 1e6;
  });
}

void ShmSyncExecutor::Job::ReportGroupPauses(const std::string& key) {
  GroupCommit& group = *ex_.options_.group;
  update_([&](SyncRecord& r) {
    if (r.group) r.group->pause = pause_;
  });
  if (pause_.pause_start_ns <= 0) return;  // no rank confirmed: nothing to report
  Status published = group.PublishPause(key, pause_);
  auto view = group.AwaitPauses(key);
  update_([&](SyncRecord& r) {
    if (!r.group) return;
    if (view.ok()) {
      r.group->view = *view;
    } else {
      r.group->view_error = view.status().message();
    }
    if (!published.ok()) {
      r.group->view_error = "this node's pause was not published: " + published.message() +
                            (r.group->view_error.empty() ? "" : "; " + r.group->view_error);
    }
  });
}

Status ShmSyncExecutor::Job::RunSync() {
  GroupCommit* group = ex_.options_.group.get();
  std::string group_key;
  // In a group, a node that fails before its PREPARED writes ABORT, so the others stop waiting.
  auto fail = [&](const Status& why) {
    if (group != nullptr && !group_key.empty()) {
      (void)group->Abort(group_key, "node '" + group->options().node + "': " + why.message());
    }
    return why;
  };
  Status admitted = Admit();
  std::string parent = live_;
  if (group != nullptr && parent.empty() && !admitted.ok()) {
    // Admit failed before it learnt what the engine serves (for example a diverged table): the
    // delta's parent, or else the sidecar's record, names the sync the other nodes run, so this
    // node's ABORT still reaches them instead of leaving them to their prepare deadline.
    parent = !m_.parent_version.empty() ? m_.parent_version : ex_.LiveVersion();
  }
  if (group != nullptr && !parent.empty()) {
    auto key = group->SyncKey(request_.version, parent);
    if (!key.ok()) return key.status().WithPrefix("group '" + group->options().group + "'");
    group_key = *key;
    if (!request_.group_key.empty() && request_.group_key != group_key) {
      // Asked to join a sync this node cannot run under that key: the group must not wait.
      const std::string asked = request_.group_key;
      group_key = asked;
      update_([&](SyncRecord& r) {
        r.group = GroupSyncReport{group->options().group, group->options().node, asked,
                                  request_.group_catch_up};
      });
      // Most often the group already aborted the asked key (a refused or late peer).
      if (auto d = group->Decision(asked); d.ok() && d->has_value() && !(*d)->commit) {
        return FailedPrecondition("group '" + group->options().group +
                                  "' decided ABORT (written by node '" + (*d)->by + "'): " +
                                  (*d)->reason);
      }
      return fail(FailedPrecondition("asked to run sync '" + asked + "', but from version '" +
                                     parent + "' this node's sync key is '" + *key + "'"));
    }
    update_([&](SyncRecord& r) {
      r.group = GroupSyncReport{group->options().group, group->options().node, group_key,
                                request_.group_catch_up};
    });
  }
  if (!admitted.ok()) return fail(admitted);
  if (Status s = CheckParents(); !s.ok()) return fail(s);
  sync_id_ = ex_.control_->AllocateSyncId();
  // From here on, every failure before the decision must decide ABORT so no rank keeps a
  // staged plan; after it, Commit() reports divergence itself. In a group, the decision is the
  // group's: this node commits only once etcd holds COMMIT.
  // A sidecar that is shutting down takes no new decision: before it, the sync aborts.
  auto running = [&] {
    return ex_.shutting_down_.load() ? FailedPrecondition("sidecar shutting down") : Status::Ok();
  };
  Status s = running();
  if (s.ok()) s = Decode();
  if (s.ok()) s = Stage();
  if (s.ok()) s = running();
  if (s.ok() && group != nullptr) s = GroupDecide(group_key);
  if (!s.ok()) return AbortAll(fail(s));
  if (group != nullptr) AwaitCommitPoint();
  Status committed = Commit();
  if (committed.ok()) Advance();
  // Every node reports its pause, even a diverged one: the others' views count it.
  if (group != nullptr) {
    ReportGroupPauses(group_key);
    if (committed.ok()) ex_.convergence_.Committed(request_, group_key);
  }
  return committed;
}

// ------------------------------------------------------------------------------ verify, scrub

namespace {

// The checkpoint's manifest: manifest.json from the store, or computed from a local directory
// that has none.
StatusOr<deltasync::CheckpointManifest> ReadCheckpointManifest(deltasync::ObjectStore& store,
                                                               const std::string& location) {
  auto text = store.ReadObject(deltasync::kManifestFileName, 1ull << 30);
  if (text.ok()) return deltasync::ParseCheckpointManifest(*text);
  if (text.status().code() != StatusCode::kNotFound) return text.status();
  std::string dir = location.rfind("file://", 0) == 0 ? location.substr(7) : location;
  if (dir.empty() || dir[0] != '/' || !std::filesystem::is_directory(dir)) {
    return NotFound("checkpoint '" + location + "' has no " + deltasync::kManifestFileName +
                    " (write one with `deltakv checkpoint manifest`)");
  }
  ASSIGN_OR_RETURN(deltasync::Checkpoint ckpt, deltasync::Checkpoint::Open(dir));
  return deltasync::ComputeCheckpointManifest(ckpt, "", 0, false);
}

}  // namespace

Status ShmSyncExecutor::Job::RunVerify() {
  SetState(SyncState::kVerifying);
  const auto t0 = Clock::now();
  ASSIGN_OR_RETURN(auto store, OpenStore(request_.checkpoint, ex_.options_.http,
                                         ex_.options_.volume_store, VolumeView::kFiles));
  ASSIGN_OR_RETURN(deltasync::CheckpointManifest cm,
                   ReadCheckpointManifest(*store, request_.checkpoint));
  Phase("manifest", MsSince(t0));
  RETURN_IF_ERROR(AttachRanks());
  ASSIGN_OR_RETURN(std::string ranks_version, RanksVersion());
  const auto t1 = Clock::now();
  ASSIGN_OR_RETURN(LiveChecksums live, Checksum(request_.rate_bytes_per_s, 0));
  Phase("checksum", MsSince(t1));
  std::map<std::string, const deltasync::ManifestTensor*> by_name;
  for (const deltasync::ManifestTensor& t : cm.tensors) by_name[t.name] = &t;
  std::vector<std::string> wrong;
  if (!cm.version.empty() && !ranks_version.empty() && cm.version != ranks_version) {
    wrong.push_back("the engine says it serves '" + ranks_version + "' but the checkpoint is '" +
                    cm.version + "'");
  }
  for (const auto& [name, t] : live.tensors) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      wrong.push_back("tensor '" + name + "' is registered by the engine but not in the checkpoint");
      continue;
    }
    const deltasync::ManifestTensor& mt = *it->second;
    if (mt.end - mt.begin != t.canonical_bytes) {
      wrong.push_back("tensor '" + name + "': the checkpoint has " +
                      std::to_string(mt.end - mt.begin) + " bytes, the engine's layout " +
                      std::to_string(t.canonical_bytes));
      continue;
    }
    // The checkpoint's bytes [offset, offset + length) of the tensor.
    auto read = [&](uint64_t offset, uint64_t length) {
      return store->ReadRange(mt.file, mt.begin + offset, length);
    };
    bool partial = false;
    if (!slice_.whole() && t.layout != nullptr) {
      ASSIGN_OR_RETURN(NodeHolding h, HoldingOf(*t.layout, slice_));
      partial = h.bytes < t.canonical_bytes;
    }
    if (partial) {
      // The node holds part of the tensor: its ranks' sums cover only those bytes, so compare
      // them with the checkpoint's bytes at exactly those positions (read only those).
      auto expected = NodeOwnedSumsFromReads(*t.layout, slice_, read);
      if (!expected.ok()) {
        wrong.push_back("tensor '" + name + "': reading this node's part from the checkpoint: " +
                        expected.status().message());
        continue;
      }
      deltasync::AdlerDelta want, have;
      for (const deltasync::AdlerDelta& d : *expected) want.Merge(d);
      for (const RankTensorSums& r : t.ranks) have.Merge(r.owned);
      const std::string ranks = DifferingRanks(t, *expected);
      if (ranks.empty() && want.s1() == have.s1() && want.s2() == have.s2()) continue;
      wrong.push_back("tensor '" + name + "' (split over nodes; node '" + NodeName() +
                      "' holds part of it at global ranks " + SliceText() +
                      (ranks.empty() ? "" : "; differing: local " + ranks) +
                      "): the engine's part has Adler-32 partial sums " + SumsText(have) +
                      ", the checkpoint's bytes there give " + SumsText(want));
      continue;
    }
    const uint32_t now = t.Adler32();
    if (now == mt.adler32) continue;
    // Name the ranks: read the tensor from the checkpoint and compare each rank's owned bytes.
    std::string ranks;
    if (t.layout != nullptr && slice_.whole()) {
      auto bytes = read(0, mt.end - mt.begin);
      if (bytes.ok()) {
        std::span<const uint8_t> span(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size());
        ranks = DifferingRanks(t, ExpectedOwnedSums(*t.layout, span, world_));
      }
    } else if (t.layout != nullptr) {
      // A slice's ranks own bytes at the lowest node rank holding them, not the group's.
      auto expected = NodeOwnedSumsFromReads(*t.layout, slice_, read);
      if (expected.ok()) ranks = DifferingRanks(t, *expected);
    }
    wrong.push_back("tensor '" + name + "'" + (ranks.empty() ? "" : " (" + ranks + ")") +
                    ": the engine holds Adler-32 " + Hex(now) + ", the checkpoint has " +
                    Hex(mt.adler32));
  }
  for (std::string& s : live.ReplicaMismatches()) wrong.push_back(std::move(s));
  update_([&](SyncRecord& r) { r.mismatches = wrong; });
  if (!wrong.empty()) {
    return Diverge("verify against '" + request_.checkpoint + "' found " +
                   std::to_string(wrong.size()) + " difference(s): " + JoinFirst(wrong));
  }
  ChecksumTable t = TableFromLive(live, ranks_version.empty() ? cm.version : ranks_version,
                                  "checkpoint " + request_.checkpoint);
  t.checkpoint_verified = true;
  ex_.SetTable(std::move(t));
  return Status::Ok();
}

Status ShmSyncExecutor::Job::RunScrub() {
  SetState(SyncState::kVerifying);
  // A stop request is for this scrub only: clear it when the scrub ends, however it ends.
  struct ClearStop {
    std::atomic<bool>& flag;
    ~ClearStop() { flag.store(false); }
  } clear_stop{ex_.stop_scrub_};
  ChecksumTable table = ex_.table();
  if (table.empty()) {
    return FailedPrecondition("nothing to scrub against: no checksum table yet (POST /v1/verify "
                              "with the checkpoint the engine loaded, or run a sync)");
  }
  RETURN_IF_ERROR(AttachRanks());
  if (!table.ForSlice(slice_.first, slice_.count, slice_.world)) {
    return FailedPrecondition("nothing to scrub against: the checksum table was made for other "
                              "ranks of the group than global ranks " + SliceText() +
                              " (POST /v1/verify with the checkpoint the engine loaded)");
  }
  const auto t0 = Clock::now();
  ASSIGN_OR_RETURN(LiveChecksums live, Checksum(request_.rate_bytes_per_s, shm::kVerifyScrub));
  Phase("checksum", MsSince(t0));
  std::vector<std::string> wrong = CompareWithTable(live, table);
  update_([&](SyncRecord& r) { r.mismatches = wrong; });
  if (!wrong.empty()) {
    return Diverge("scrub found the live weights differ from the checksum table: " +
                   JoinFirst(wrong));
  }
  return Status::Ok();
}

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
