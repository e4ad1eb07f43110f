#include "engine.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

#include "base/utf8.h"
#include "shim/weight_checksum.h"

namespace deltakv::shim {

namespace {
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
constexpr size_t kEntriesPerStagedPart = 3000;
}  // namespace

Engine::Engine(const deltakv_engine_params& p)
    : shm_name_(p.shm_name ? p.shm_name : "deltakv"),
      rank_(p.rank < 0 ? 0 : static_cast<uint32_t>(p.rank)),
      world_(p.world_size <= 0 ? 1 : static_cast<uint32_t>(p.world_size)),
      first_global_(p.global_world_size > 0 ? static_cast<uint32_t>(p.first_global_rank) : 0),
      global_world_(p.global_world_size > 0 ? static_cast<uint32_t>(p.global_world_size)
                                            : world_),
      backend_name_(p.backend ? p.backend : "cpu"),
      poll_mode_(p.poll_mode != 0),
      attach_timeout_ms_(p.attach_timeout_ms == 0 ? 10000 : p.attach_timeout_ms),
      staging_reserve_bytes_(p.staging_reserve_bytes),
      version_id_(p.initial_version ? p.initial_version : "") {}

Engine::~Engine() {
  {
    // Under mu_: a worker between checking stop_ and sleeping on cv_ holds mu_, so it either
    // sees stop_ or is asleep when the notification comes (no lost wake-up).
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  handle_.reset();
  table_segment_.reset();  // unlinks the rank's tensor table
  SetState(DELTAKV_ENGINE_STOPPED);
}

std::string Engine::version_id() const {
  std::lock_guard<std::mutex> lock(version_mu_);
  return version_id_;
}

void Engine::set_sync_error(const Status& s) {
  std::lock_guard<std::mutex> lock(error_mu_);
  if (!s.ok()) sync_error_ = s.message();
}

void Engine::SetSyncStats(const deltakv_sync_stats& s) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_ = s;
}

void Engine::EndSyncStats(int32_t outcome, uint64_t pause_us) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  if (stats_.sync_id == 0 || stats_.outcome != 0) return;
  stats_.outcome = outcome;
  stats_.pause_us = pause_us;
}

void Engine::KeepRegions(TouchedRegions& regions) {
  for (auto& [t, v] : regions) v.clear();
  if (spare_regions_.empty()) spare_regions_.swap(regions);
}

void Engine::DropIncoming() {
  EndSyncStats(kOutcomeDropped, 0);
  if (incoming_) KeepRegions(incoming_->pc.regions);
  incoming_.reset();
  SetState(DELTAKV_ENGINE_ATTACHED);
}

deltakv_sync_stats Engine::sync_stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

std::string Engine::sync_error() const {
  std::lock_guard<std::mutex> lock(error_mu_);
  return sync_error_;
}

Status Engine::RegisterTensor(const char* name, void* device, const char* dtype,
                              const int64_t* shape, int32_t ndim, const char* layout_json) {
  if (worker_.joinable()) return FailedPrecondition("tensors must be registered before start");
  if (name == nullptr || *name == '\0') return InvalidArgument("tensor name is empty");
  if (!IsValidUtf8(name)) {
    return InvalidArgument("tensor name '" + std::string(name) +
                           "' is not valid UTF-8 (checkpoint tensor names are JSON strings)");
  }
  if (dtype == nullptr) return InvalidArgument("tensor '" + std::string(name) + "': dtype is NULL");
  auto dt = deltasync::ParseDType(dtype);
  if (!dt)
    return InvalidArgument("tensor '" + std::string(name) + "': unknown dtype '" + dtype + "'");
  if (ndim < 0 || ndim > 8 || (ndim > 0 && shape == nullptr)) {
    return InvalidArgument("tensor '" + std::string(name) + "': bad shape");
  }
  std::vector<uint64_t> dims;
  uint64_t elements = 1;
  for (int32_t i = 0; i < ndim; ++i) {
    if (shape[i] < 0) return InvalidArgument("tensor '" + std::string(name) + "': negative dim");
    dims.push_back(static_cast<uint64_t>(shape[i]));
    elements *= dims.back();
  }
  uint64_t bytes = elements * deltasync::DTypeSize(*dt);
  if (bytes > 0 && device == nullptr) {
    return InvalidArgument("tensor '" + std::string(name) + "': device pointer is NULL");
  }
  auto layout = layout_json != nullptr && *layout_json != '\0'
                    ? deltasync::TensorLayout::FromJson(layout_json)
                    : deltasync::TensorLayout::Replicated(dims, *dt, global_world_);
  if (!layout.ok()) return layout.status().WithPrefix("tensor '" + std::string(name) + "'");
  if (layout->spec().dtype != *dt) {
    return InvalidArgument("tensor '" + std::string(name) + "': dtype " + dtype +
                           " but its layout's is " +
                           std::string(deltasync::DTypeName(layout->spec().dtype)));
  }
  if (layout->world() != global_world_) {
    return InvalidArgument("tensor '" + std::string(name) + "': layout spans " +
                           std::to_string(layout->world()) + " ranks, the engine's group has " +
                           std::to_string(global_world_));
  }
  if (layout->LocalBytes(layout_rank()).total != bytes) {
    return InvalidArgument("tensor '" + std::string(name) + "': local shape holds " +
                           std::to_string(bytes) + " bytes, the layout gives rank " +
                           std::to_string(layout_rank()) + " " +
                           std::to_string(layout->LocalBytes(layout_rank()).total));
  }
  for (const auto& t : table_) {
    if (t.name == name)
      return InvalidArgument("tensor '" + std::string(name) + "' registered twice");
  }
  locals_.push_back({name, device, bytes});
  table_.push_back({name, *dt, bytes, std::move(layout).value()});
  return Status::Ok();
}

Status Engine::PublishTensorTable() {
  deltasync::EngineTensorTable t{rank_, world_, version_id(), table_};
  if (global_world_ != world_) {
    t.global_rank = layout_rank();
    t.global_world = global_world_;
  }
  std::string json = deltasync::EngineTensorTableToJson(t);
  // Drop (and unlink) the table this handle published before, so that destroying it cannot
  // unlink its successor; a stale table of a dead predecessor is replaced.
  table_segment_.reset();
  shm::CreateOptions opts;
  opts.if_exists = shm::IfExists::kReplace;
  const uint64_t body = sizeof(shm::SegmentHeader);
  ASSIGN_OR_RETURN(shm::Segment seg,
                   shm::Segment::Create(deltasync::EngineTensorTableSegmentName(shm_name_, rank_),
                                        body + 8 + json.size(), shm::SegmentKind::kScratch, opts));
  uint64_t n = json.size();
  std::memcpy(seg.At(body, 8), &n, 8);
  std::memcpy(seg.At(body + 8, json.size()), json.data(), json.size());
  seg.Publish();
  table_segment_ = std::move(seg);
  return Status::Ok();
}

Status Engine::Start() {
  if (worker_.joinable()) return FailedPrecondition("engine already started");
  ASSIGN_OR_RETURN(backend_, MakeDeviceBackend(backend_name_));
  if (staging_reserve_bytes_ > 0) {
    RETURN_IF_ERROR(backend_->ReserveStaging(staging_reserve_bytes_, locals_)
                        .WithPrefix("reserving " + std::to_string(staging_reserve_bytes_) +
                                    " bytes of staging memory"));
  }
  auto deadline = Clock::now() + std::chrono::milliseconds(attach_timeout_ms_);
  for (;;) {
    auto cb = shm::ControlBlock::Attach(shm_name_);
    if (cb.ok()) {
      control_ = std::move(cb).value();
      break;
    }
    if (Clock::now() >= deadline) {
      return cb.status().WithPrefix("cannot attach to the sidecar's control segment '" + shm_name_ +
                                    "' within " + std::to_string(attach_timeout_ms_) + " ms");
    }
    std::this_thread::sleep_for(100ms);
  }
  ASSIGN_OR_RETURN(shm::RankHandle h, control_->RegisterRank(rank_, world_));
  handle_.emplace(std::move(h));
  handle_->SetLivePolicyVersion(policy_version() + 1);
  RETURN_IF_ERROR(PublishTensorTable());
  SetState(DELTAKV_ENGINE_ATTACHED);
  worker_ = std::thread([this] { WorkerLoop(); });
  return Status::Ok();
}

void Engine::Send(const StatusOr<shm::Message>& msg) {
  if (!msg.ok()) return;
  auto bytes = shm::EncodeMessage(*msg);
  if (!bytes.ok()) return;
  (void)handle_->responses().Push(*bytes, 2s);
}

void Engine::SendReport(ReportMaker make, uint64_t id, const std::vector<shm::StagedEntry>& entries,
                        uint64_t bytes) {
  const uint32_t parts = static_cast<uint32_t>(
      std::max<size_t>(1, (entries.size() + kEntriesPerStagedPart - 1) / kEntriesPerStagedPart));
  for (uint32_t p = 0; p < parts; ++p) {
    shm::StagedReport rep;
    rep.part_index = p;
    rep.part_count = parts;
    rep.changed_bytes = p == 0 ? bytes : 0;
    const size_t begin = p * kEntriesPerStagedPart;
    const size_t end = std::min(entries.size(), begin + kEntriesPerStagedPart);
    rep.entries.assign(entries.begin() + begin, entries.begin() + end);
    Send(make(id, rep));
  }
}

void Engine::WorkerLoop() {
  std::vector<uint8_t> buf;
  auto last_check = Clock::now();
  while (!stop_.load()) {
    // Commands that arrived while a scrub ran come first, in order.
    StatusOr<bool> popped = false;
    if (!deferred_.empty()) {
      buf = std::move(deferred_.front());
      deferred_.pop_front();
      popped = true;
    } else {
      popped = handle_->commands().Pop(&buf, 200ms);
    }
    if (popped.ok() && *popped) {
      auto msg = shm::DecodeMessage(buf);
      if (!msg.ok()) continue;
      if (msg->type == shm::MessageType::kPing) {
        Send(shm::Message{shm::MessageType::kPong, msg->sync_id, msg->payload});
      } else if (msg->type == shm::MessageType::kPlan) {
        HandlePlan(*msg);
      } else if (msg->type == shm::MessageType::kVerify) {
        HandleVerify(*msg);
      } else if (msg->type == shm::MessageType::kAbort && incoming_ &&
                 incoming_->pc.sync_id == msg->sync_id) {
        DropIncoming();
      }
      continue;
    }
    CheckIncoming();
    if (Clock::now() - last_check < 1s) continue;
    last_check = Clock::now();
    arenas_.Sweep();  // arenas the sidecar retired are unmapped here too
    // A recreated control segment (new sidecar) or a reclaimed slot: register again.
    auto superseded = control_->IsSuperseded();
    if ((superseded.ok() && *superseded) || !handle_->StillRegistered()) {
      auto cb = shm::ControlBlock::Attach(shm_name_);
      if (!cb.ok()) continue;
      handle_.reset();
      if (incoming_) DropIncoming();
      newest_plan_sync_id_ = 0;  // the new segment counts its syncs afresh
      arenas_.Clear();  // a new sidecar instance has new arenas
      control_ = std::move(cb).value();
      auto h = control_->RegisterRank(rank_, world_);
      if (!h.ok()) {
        set_sync_error(h.status());
        continue;
      }
      handle_.emplace(std::move(h).value());
      handle_->SetLivePolicyVersion(policy_version() + 1);
      (void)PublishTensorTable();
    }
  }
}

Status Engine::StagePart(uint64_t sync_id, const shm::PlanRef& ref) {
  // The arena stays mapped for later parts and syncs (the sidecar rewrites it once consumed);
  // the cache checks READY and the generation on the kept mapping.
  ASSIGN_OR_RETURN(shm::PlanArenaReader * arena, arenas_.Open(ref.arena_name, ref.generation));
  ASSIGN_OR_RETURN(auto root_bytes,
                   arena->Block(arena->root_offset(), sizeof(deltasync::PlanArenaRoot)));
  deltasync::PlanArenaRoot root;
  std::memcpy(&root, root_bytes.data(), sizeof(root));
  const uint64_t version_at = arena->root_offset() + sizeof(deltasync::PlanArenaRoot);
  ASSIGN_OR_RETURN(auto version, arena->Block(version_at, root.version_len));
  ASSIGN_OR_RETURN(auto plan, arena->Block(arena->root_offset() +
                                               deltasync::PlanArenaRootBytes(root.version_len),
                                           root.plan_bytes));
  // A private copy: the rank stages it and never trusts bytes that can still change. Once it is
  // marked consumed the sidecar may rewrite the arena. The buffer is the handle's, grown to the
  // largest part seen (the sidecar's part size at most), so a part costs no allocation, zero
  // fill or page faults; the reader sees exactly plan.size() bytes of it.
  if (part_copy_.size() < plan.size() / 8 + 1) part_copy_.resize(plan.size() / 8 + 1);
  std::memcpy(part_copy_.data(), plan.data(), plan.size());
  const std::string version_id(reinterpret_cast<const char*>(version.data()), version.size());
  // Fails only if the sidecar retired the arena meanwhile: it gave the sync up.
  RETURN_IF_ERROR(arena->MarkConsumed());
  if (root.part_index == 0) {
    if (incoming_) KeepRegions(incoming_->pc.regions);
    incoming_ = IncomingPlan{};
    incoming_->pc.regions.swap(spare_regions_);  // empty lists, capacity kept
    incoming_->pc.sync_id = sync_id;
    incoming_->pc.version = version_id;
    SetState(DELTAKV_ENGINE_STAGING);
  } else if (!incoming_ || incoming_->pc.sync_id != sync_id ||
             incoming_->next_part != root.part_index) {
    return InvalidArgument("plan part " + std::to_string(root.part_index) + " of sync " +
                           std::to_string(sync_id) + " arrived out of order");
  } else if (incoming_->pc.version != version_id) {
    return InvalidArgument("plan part " + std::to_string(root.part_index) +
                           " names another version than part 0");
  }
  IncomingPlan& in = *incoming_;
  std::span<uint8_t> span(reinterpret_cast<uint8_t*>(part_copy_.data()), plan.size());
  // The staging walk checks every record (OpenLazy): one walk over the part instead of two.
  ASSIGN_OR_RETURN(deltasync::WritePlanReader reader, deltasync::WritePlanReader::OpenLazy(span));
  if (root.part_index == 0) {
    in.tensors.assign(reader.tensors().begin(), reader.tensors().end());
    in.staged.assign(in.tensors.size(), StagedTensor{});
  } else if (reader.tensors().size() != in.tensors.size() ||
             std::memcmp(reader.tensors().data(), in.tensors.data(),
                         in.tensors.size() * sizeof(deltasync::PlanTensor)) != 0) {
    return InvalidArgument("plan part " + std::to_string(root.part_index) +
                           " has another tensor table than part 0");
  }
  // Gather, XOR, partial sums and the new bytes' staging in one backend call per part.
  const auto stage_start = Clock::now();
  // With a derived-weights hook, the touched regions per tensor too (merged where adjacent).
  ASSIGN_OR_RETURN(
      std::unique_ptr<PreparedScatter> prepared,
      backend_->StagePartAndRegions(reader, locals_, &in.staged,
                                    callbacks_.derived != nullptr ? &in.pc.regions : nullptr));
  in.stage_ns += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - stage_start).count());
  {
    // The stats follow the sync part by part, so a sync dropped midway reports what it staged.
    deltakv_sync_stats st{};
    st.struct_size = sizeof(st);
    st.sync_id = sync_id;
    st.parts = in.next_part + 1;
    for (const StagedTensor& t : in.staged) st.bytes += t.bytes_changed;
    st.stage_us = in.stage_ns / 1000;
    SetSyncStats(st);
  }
  in.pc.prepared.push_back(std::move(prepared));
  ++in.next_part;
  return Status::Ok();
}

void Engine::CheckIncoming() {
  if (!incoming_) return;
  shm::AwaitOutcome o = control_->AwaitDecision(incoming_->pc.sync_id, std::chrono::nanoseconds(0));
  if (o == shm::AwaitOutcome::kAbort || o == shm::AwaitOutcome::kSidecarDead) {
    DropIncoming();
  }
}

void Engine::HandleVerify(const shm::Message& msg) {
  auto req = shm::ParseVerify(msg);
  if (!req.ok()) return;
  const deltakv_engine_state before = state();
  SetState(DELTAKV_ENGINE_VERIFYING);
  ChecksumOptions opts;
  opts.rate_bytes_per_s = req->rate_bytes_per_s;
  // A scrub yields to a sync: between chunks it looks at the command ring; ABORT for this job
  // stops it, anything else is kept (in order) for after it.
  const bool scrub = req->flags & shm::kVerifyScrub;
  bool aborted = false;
  opts.keep_going = [&] {
    if (stop_.load()) return false;
    if (!scrub) return true;
    std::vector<uint8_t> cmd;
    while (true) {
      auto got = handle_->commands().TryPop(&cmd);
      if (!got.ok() || !*got) break;
      auto m = shm::DecodeMessage(cmd);
      if (m.ok() && m->type == shm::MessageType::kAbort && m->sync_id == msg.sync_id) {
        aborted = true;
      } else {
        deferred_.push_back(std::move(cmd));
      }
    }
    return !aborted;
  };
  uint64_t bytes_read = 0;
  auto sums = ChecksumWeights(locals_, table_, layout_rank(), *backend_, opts, &bytes_read,
                              first_global_, world_);
  SetState(before);
  if (!sums.ok()) {
    if (aborted) {
      Send(shm::MakeError(msg.sync_id, "rank " + std::to_string(rank_) + ": scrub stopped"));
      return;
    }
    set_sync_error(sums.status());
    Send(shm::MakeError(msg.sync_id, "rank " + std::to_string(rank_) +
                                         ": checksum of the live weights failed: " +
                                         sums.status().message()));
    return;
  }
  using shm::VerifiedEntry;
  std::vector<shm::StagedEntry> entries;
  for (uint32_t t = 0; t < sums->size(); ++t) {
    const TensorSums& ts = (*sums)[t];
    entries.push_back({t, ts.owned.s1(), ts.owned.s2(), VerifiedEntry::Flags(VerifiedEntry::kOwned)});
    if (ts.holds_replica) {
      entries.push_back(
          {t, ts.replica.s1(), ts.replica.s2(), VerifiedEntry::Flags(VerifiedEntry::kReplica)});
    }
    for (const auto& [holder, d] : ts.refs) {
      entries.push_back(
          {t, d.s1(), d.s2(), VerifiedEntry::Flags(VerifiedEntry::kReplicaRef, holder)});
    }
  }
  SendReport(shm::MakeVerified, msg.sync_id, entries, bytes_read);
}

void Engine::HandlePlan(const shm::Message& msg) {
  const uint64_t sync_id = msg.sync_id;
  // A part of an older sync (one the sidecar gave up, still in the ring) is not acted on: it
  // must neither drop the sync being staged nor change the handle's state (PROTOCOL.md 8).
  if (sync_id < newest_plan_sync_id_) return;
  newest_plan_sync_id_ = sync_id;
  auto ref = shm::ParsePlan(msg);
  Status s = ref.ok() ? StagePart(sync_id, *ref) : ref.status();
  if (!s.ok()) {
    DropIncoming();
    set_sync_error(s);
    Send(shm::MakeError(sync_id, "rank " + std::to_string(rank_) + ": " + s.message()));
    return;
  }
  if (ref->more()) return;
  IncomingPlan plan = std::move(*incoming_);
  incoming_.reset();
  FinishPlan(std::move(plan));
}

void Engine::FinishPlan(IncomingPlan plan) {
  const uint64_t sync_id = plan.pc.sync_id;
  PendingCommit& pc = plan.pc;
  const std::vector<StagedTensor>& staged = plan.staged;
  const std::vector<deltasync::PlanTensor>& tensors = plan.tensors;
  SetState(DELTAKV_ENGINE_STAGED);
  handle_->SetStagedSyncId(sync_id);
  std::vector<shm::StagedEntry> entries;
  uint64_t changed = 0;
  for (uint32_t t = 0; t < staged.size(); ++t) {
    entries.push_back({t, staged[t].delta.s1(), staged[t].delta.s2(), 0});
    if (tensors[t].flags & deltasync::kPlanTensorFullVerify) {
      entries.push_back(
          {t, staged[t].full.s1(), staged[t].full.s2(), shm::StagedEntry::kFullChecksum});
    }
    changed += staged[t].bytes_changed;
  }
  SendReport(shm::MakeStaged, sync_id, entries, changed);
  // Wait for the decision; it lives in the control block, so it survives the sidecar. The wait
  // ends: decided (a newer decision counts as ABORT for this sync), the sidecar dead or replaced
  // (judged from its pid and heartbeat within about a second), or the handle freed.
  shm::AwaitOutcome outcome = shm::AwaitOutcome::kTimedOut;
  while (!stop_.load()) {
    outcome = control_->AwaitDecision(sync_id, 500ms);
    if (outcome != shm::AwaitOutcome::kTimedOut) break;
  }
  if (outcome == shm::AwaitOutcome::kCommit) {
    SetState(DELTAKV_ENGINE_COMMITTING);
    StatusOr<CommitPause> pause = Internal("not applied");
    if (poll_mode_) {
      std::unique_lock<std::mutex> lock(mu_);
      pending_ = std::move(pc);
      pending_done_ = false;
      cv_.wait(lock, [&] { return pending_done_ || stop_.load(); });
      pause = pending_done_ ? (pending_status_.ok() ? StatusOr<CommitPause>(pending_pause_)
                                                    : StatusOr<CommitPause>(pending_status_))
                            : StatusOr<CommitPause>(FailedPrecondition(
                                  "the engine handle was freed before it applied the commit"));
      if (pending_) pc = std::move(*pending_);  // back for what follows (its version, regions)
      pending_.reset();
    } else {
      pause = ApplyCommit(pc);
    }
    EndSyncStats(pause.ok() ? kOutcomeCommitted : kOutcomeDiverged,
                 pause.ok() ? pause->pause_us : 0);
    if (pause.ok()) {
      (void)PublishTensorTable();  // the table names the version the rank now serves
      SetState(DELTAKV_ENGINE_ATTACHED);
      Send(shm::MakeCommitted(sync_id, {policy_version() + 1, pause->pause_us,
                                        pause->start_unix_ns, pause->resume_unix_ns}));
    } else {
      // The decision was COMMIT, so other ranks write the new bytes: this rank no longer serves
      // one consistent version with them. It says so rather than claiming an abort.
      SetState(DELTAKV_ENGINE_DIVERGED);
      set_sync_error(pause.status());
      // If the new bytes were written (only the derived hook failed), the version id moved:
      // the table must name what the rank serves.
      if (version_id() == pc.version) (void)PublishTensorTable();
      Send(shm::MakeError(sync_id, "rank " + std::to_string(rank_) +
                                       ": diverged: commit failed after the COMMIT decision: " +
                                       pause.status().message()));
    }
  } else {
    if (state() != DELTAKV_ENGINE_STOPPED) SetState(DELTAKV_ENGINE_ATTACHED);
    EndSyncStats(kOutcomeDropped, 0);
    if (outcome == shm::AwaitOutcome::kAbort) {
      Send(shm::MakeText(shm::MessageType::kAborted, sync_id, "staged data dropped"));
    }
  }
  handle_->SetStagedSyncId(0);
  KeepRegions(pc.regions);
}

StatusOr<Engine::CommitPause> Engine::ApplyCommit(PendingCommit& pc) {
  auto unix_ns = [] {
    return static_cast<int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    std::chrono::system_clock::now().time_since_epoch())
                                    .count());
  };
  CommitPause pause;
  pause.start_unix_ns = unix_ns();
  auto t0 = Clock::now();
  if (!poll_mode_ && callbacks_.pause != nullptr && callbacks_.pause(callbacks_.user) != 0) {
    return DataLoss("the engine's pause callback failed; weights unchanged (old version)");
  }
  Status s = backend_->CommitScatters(pc.prepared);
  if (!s.ok()) {
    s = DataLoss("writing the staged bytes failed; weights are partly new: " + s.message());
  }
  bool written = s.ok();
  if (written) {
    // The new bytes are in place: the rank serves the new version from here on, whatever the
    // derived-weights hook reports.
    // Counter and id change under the id's lock, so a reader that sees the same counter
    // before and after reading the id (which takes the lock) has read a matching pair.
    std::lock_guard<std::mutex> lock(version_mu_);
    uint64_t v = policy_version_.fetch_add(1) + 1;
    handle_->SetLivePolicyVersion(v + 1);
    version_id_ = pc.version;
  }
  if (written && callbacks_.derived != nullptr) {
    for (const auto& [t, v] : pc.regions) {
      if (v.empty()) continue;  // kept from an earlier sync, not touched by this one
      if (callbacks_.derived(callbacks_.user, locals_[t].name.c_str(), v.data(), v.size()) != 0) {
        s = DataLoss("the engine's derived-weights callback failed for '" + locals_[t].name +
                     "'; the weights are the new version, derived weights may be stale");
        break;
      }
    }
  }
  if (!poll_mode_ && callbacks_.resume != nullptr) callbacks_.resume(callbacks_.user);
  pause.resume_unix_ns = unix_ns();
  RETURN_IF_ERROR(s);
  pause.pause_us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
  return pause;
}

StatusOr<bool> Engine::Poll() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!pending_ || pending_done_) return false;
  auto r = ApplyCommit(*pending_);
  pending_status_ = r.status();
  pending_pause_ = r.ok() ? *r : CommitPause{};
  pending_done_ = true;
  cv_.notify_all();
  if (!r.ok()) return r.status();
  return true;
}

}  // namespace deltakv::shim
