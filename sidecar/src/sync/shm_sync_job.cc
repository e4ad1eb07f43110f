// ShmSyncExecutor::Job's sync: admit, parent check, decode, stage, commit, and RunSync, which
// runs them under the executor's failure rule.
#include <sched.h>

#include <algorithm>
#include <map>
#include <set>

#include "deltasync/plan_verify.h"
#include "shm/plan_arena.h"
#include "sync/rank_collect.h"
#include "sync/shm_job.h"

namespace deltakv::sidecar {

using namespace shm_job;

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
    return FailedPrecondition(
        "syncs are refused until the engine is verified again "
        "(POST /v1/verify): " +
        table_.diverged);
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
        return InvalidArgument(
            "tensor '" + t.name +
            "': this node holds part of it and ranks "
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
    ChecksumTable rebuilt =
        TableFromLive(live, live_,
                      table_.empty() ? "live bytes (early check), not compared with a checkpoint"
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
    // One per CPU this (pinned, SCHED_IDLE) worker may use: the planning thread decodes too
    // whenever it has nothing to plan, so even 2 CPUs gain, and the ranks' staging, at normal
    // priority, still comes first (2 CPUs, cpu backend, 1 GiB, 1 % elements, medians of 5 in
    // three runs: request -> live 1 -> 2 threads 401-505 -> 321-363 ms at TP4; at TP1
    // 377-424 -> 335-418 ms, the ranks' staging taking the second CPU).
    cpu_set_t set;
    CPU_ZERO(&set);
    const int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    po.decode_threads = static_cast<unsigned>(std::max(cpus, 1));
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
      return Overlaps(rank_tables_[0].find(m_.tensors[tensor].name)->second.layout, slice_, offset,
                      length);
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
  CollectSpec spec = RankReplies(shm::MessageType::kStaged, ex_.options_.stage_timeout);
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
    RETURN_IF_ERROR(
        deltasync::VerifyStagedTensor(m_.tensors[t].name, plan_tables_[0][t], inc[t], full[t]));
  }
  Phase("stage", MsSince(t0));
  SetState(SyncState::kStaged);
  MaybeStall("staged");
  return Status::Ok();
}

Status ShmSyncExecutor::Job::RanksStillAlive() const {
  // A rank that died (or left its slot) after it reported STAGED holds nothing to commit: the
  // sync aborts (PROTOCOL.md §8), as it does for a rank that dies before staging.
  for (uint32_t r = 0; r < world_; ++r) RETURN_IF_ERROR(RankGone(r));
  return Status::Ok();
}

Status ShmSyncExecutor::Job::Commit() {
  const auto t0 = Clock::now();
  const int64_t decided_ns = UnixNs();
  // Fails when the sync was decided ABORT meanwhile: by the ranks, which judged this sidecar
  // dead while it was stalled past the stale threshold and dropped the plan.
  if (Status d = ex_.control_->DecideCommit(sync_id_); !d.ok()) {
    return AbortAll(d.WithPrefix("cannot decide COMMIT"));
  }
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
  CollectSpec spec = RankReplies(shm::MessageType::kCommitted, ex_.options_.commit_timeout);
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
                       (runs_[r].commit_error.empty()
                            ? "no confirmation (" + collected.message() + ")"
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
    return Diverge("sync " + request_.id + " to '" + request_.version +
                   "' was decided COMMIT but not every rank applied it: " +
                   (served.empty() ? "no rank confirmed"
                                   : "ranks " + served + " serve '" + request_.version + "'") +
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
  // Named by the job id the API shows (the protocol's sync ids are internal).
  t.source = "sync " + request_.id + " on " + (table_.source.empty() ? "?" : table_.source);
  if (t.source.size() > 512) t.source = "sync " + request_.id + " on a chain of syncs";
  t.ranks = ChecksumTable::RanksOf(infos_);
  t.slice_first = slice_.whole() ? 0 : slice_.first;
  t.slice_count = slice_.whole() ? 0 : slice_.count;
  t.slice_world = slice_.whole() ? 0 : slice_.world;
  t.updated_unix = UnixNow();
  ex_.SetTable(std::move(t));
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
                                  "' decided ABORT (written by node '" + (*d)->by +
                                  "'): " + (*d)->reason);
      }
      // A node that cannot run this sync at all (its delta's parent is not what it serves, a
      // diverged table) says so: that, not the key it would have used, is why it aborts.
      if (!admitted.ok()) return fail(admitted);
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
  if (s.ok()) s = RanksStillAlive();
  if (s.ok() && group != nullptr) s = GroupDecide(group_key);
  if (!s.ok()) return AbortAll(fail(s));
  if (group != nullptr) AwaitCommitPoint();
  Status committed = Commit();
  if (committed.ok()) Advance();
  // Every node reports its pause, even a diverged one: the others' views count it.
  if (group != nullptr) {
    ReportGroupPauses(group_key);
    if (committed.ok()) ex_.convergence_.Committed(request_, group_key, m_.parent_version);
  }
  return committed;
}

}  // namespace deltakv::sidecar
