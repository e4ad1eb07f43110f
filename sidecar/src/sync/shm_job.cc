// The parts of ShmSyncExecutor::Job every kind of job uses: attaching ranks, live checksums,
// the checksum table; and the job helpers of shm_job.h.
#include "sync/shm_job.h"

#include <cstdlib>
#include <cstring>
#include <thread>

#include "shm/segment.h"

namespace deltakv::sidecar {

using namespace shm_job;

namespace shm_job {

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

std::string JoinFirst(const std::vector<std::string>& items, size_t n) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < n; ++i) out += (i ? "; " : "") + items[i];
  if (items.size() > n) out += " (and " + std::to_string(items.size() - n) + " more)";
  return out;
}

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

}  // namespace shm_job

// ------------------------------------------------------------------------------ shared parts

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
  const std::string who =
      "engine rank " + std::to_string(r) + " (pid " + std::to_string(info.pid) + ")";
  switch (ex_.control_->CheckRank(info)) {
    case shm::PeerState::kAlive:
      return Status::Ok();
    case shm::PeerState::kHeartbeatStale:
      return FailedPrecondition(who +
                                " stopped answering: no heartbeat for over 1 s (stopped, "
                                "wedged or dying)");
    case shm::PeerState::kProcessGone:
      break;
  }
  return FailedPrecondition(who +
                            " died during the job (its process is gone, a zombie, or it "
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
          // A sync is waiting, or the sidecar is shutting down: tell every rank to stop reading
          // (they check between chunks).
          const bool shutdown = ex_.shutting_down_.load();
          if (!stopping) {
            stopping = true;
            auto bytes = shm::EncodeMessage(
                shm::MakeText(shm::MessageType::kAbort, job_id,
                              shutdown ? "sidecar shutting down" : "scrub stopped for a sync")
                    .value());
            for (RankRun& rr : runs_) {
              if (bytes.ok()) (void)rr.channel.commands.TryPush(*bytes);
            }
          }
          return FailedPrecondition(shutdown ? "sidecar shutting down"
                                             : "the scrub was stopped for a sync");
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

}  // namespace deltakv::sidecar
