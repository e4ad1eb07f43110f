// ControlBlock: creation, adoption, attachment, the sidecar's identity and the 2PC decision.
// Rank registration lives in rank_registry.cc.
#include "shm/control_block.h"

#include <unistd.h>

#include <algorithm>
#include <new>

#include "shm/futex.h"
#include "shm/liveness_token.h"

namespace deltakv::shm {
namespace {

constexpr uint64_t kRingAreaAlignment = 4096;
constexpr auto kDecisionPollSlice = std::chrono::milliseconds(100);

bool IsPowerOfTwo(uint64_t n) { return n != 0 && (n & (n - 1)) == 0; }

Status ValidateOptions(const ControlBlockOptions& o) {
  if (o.max_ranks == 0 || o.max_ranks > kMaxRankSlots) {
    return InvalidArgument("control block: max_ranks " + std::to_string(o.max_ranks) +
                           " must be in [1, " + std::to_string(kMaxRankSlots) + "]");
  }
  auto check_ring = [](const char* which, uint64_t capacity, uint32_t max_message) -> Status {
    if (!IsPowerOfTwo(capacity) || capacity < 64 || capacity > (uint64_t{1} << 30)) {
      return InvalidArgument(std::string("control block: ") + which + " ring capacity " +
                             std::to_string(capacity) + " must be a power of two in [64, 2^30]");
    }
    // A record of the largest payload must fit: its header plus the payload rounded up to 8
    // bytes (PROTOCOL.md section 3).
    if (max_message == 0 ||
        kRingRecordHeaderBytes + ((uint64_t{max_message} + 7) & ~uint64_t{7}) > capacity) {
      return InvalidArgument(std::string("control block: ") + which + " max message " +
                             std::to_string(max_message) + " does not fit its ring");
    }
    return Status::Ok();
  };
  RETURN_IF_ERROR(check_ring("command", o.command_ring_capacity, o.command_max_message));
  RETURN_IF_ERROR(check_ring("response", o.response_ring_capacity, o.response_max_message));
  if (o.heartbeat_period <= std::chrono::nanoseconds::zero()) {
    return InvalidArgument("control block: heartbeat period must be positive");
  }
  return Status::Ok();
}

uint64_t RingsOffset(uint32_t max_ranks) {
  uint64_t slots_end = kSlotsOffset + uint64_t{max_ranks} * sizeof(RankSlot);
  return (slots_end + kRingAreaAlignment - 1) & ~(kRingAreaAlignment - 1);
}

uint64_t RingStride(uint64_t command_capacity, uint64_t response_capacity) {
  return RingBytes(command_capacity) + RingBytes(response_capacity);
}

std::string Label(const std::string& name) { return "control block '" + name + "'"; }

}  // namespace

uint64_t ControlBlock::SegmentBytes(const ControlBlockOptions& options) {
  if (!ValidateOptions(options).ok()) return 0;
  return RingsOffset(options.max_ranks) +
         uint64_t{options.max_ranks} *
             RingStride(options.command_ring_capacity, options.response_ring_capacity);
}

ControlBlock::~ControlBlock() {
  if (is_sidecar_) {
    heartbeat_.reset();
    // A clean exit: ranks see "process gone" at once instead of waiting for staleness. Only if
    // no other sidecar has adopted the segment since.
    uint32_t me = static_cast<uint32_t>(getpid());
    header_->sidecar_pid.compare_exchange_strong(me, 0, std::memory_order_acq_rel);
  }
}

Status ControlBlock::InitializeLayout(const ControlBlockOptions& o, uint64_t first_generation) {
  auto* h = new (segment_.data() + kControlHeaderOffset) ControlHeader{};
  h->magic = kControlMagic;
  h->layout_version = kLayoutVersion;
  h->header_size = sizeof(ControlHeader);
  h->max_ranks = o.max_ranks;
  h->slot_size = sizeof(RankSlot);
  h->slots_offset = kSlotsOffset;
  h->rings_offset = RingsOffset(o.max_ranks);
  h->ring_stride = RingStride(o.command_ring_capacity, o.response_ring_capacity);
  h->command_ring_capacity = o.command_ring_capacity;
  h->response_ring_capacity = o.response_ring_capacity;
  h->command_max_message = o.command_max_message;
  h->response_max_message = o.response_max_message;
  // BecomeSidecar bumps it to first_generation.
  h->instance_generation.store(first_generation - 1, std::memory_order_relaxed);
  header_ = h;
  slots_ = reinterpret_cast<RankSlot*>(segment_.data() + kSlotsOffset);
  for (uint32_t i = 0; i < o.max_ranks; ++i) {
    auto* s = new (&slots_[i]) RankSlot{};
    s->slot_index = i;
    s->command_ring_offset = h->rings_offset + uint64_t{i} * h->ring_stride;
    s->response_ring_offset = s->command_ring_offset + RingBytes(o.command_ring_capacity);
    RETURN_IF_ERROR(InitializeRing(RingBytesAt(s->command_ring_offset, o.command_ring_capacity),
                                   o.command_ring_capacity, o.command_max_message));
    RETURN_IF_ERROR(InitializeRing(RingBytesAt(s->response_ring_offset, o.response_ring_capacity),
                                   o.response_ring_capacity, o.response_max_message));
  }
  return Status::Ok();
}

Status ControlBlock::ValidateLayout() const {
  const std::string what = Label(segment_.name());
  if (segment_.size() < kSlotsOffset) return DataLoss(what + ": too small for its header");
  const ControlHeader* h = header_;
  if (h->magic != kControlMagic) return DataLoss(what + ": bad control header magic");
  if (h->layout_version != kLayoutVersion) {
    return FailedPrecondition(what + ": control layout version " +
                              std::to_string(h->layout_version) + ", this build speaks " +
                              std::to_string(kLayoutVersion));
  }
  if (h->header_size != sizeof(ControlHeader) || h->slot_size != sizeof(RankSlot) ||
      h->slots_offset != kSlotsOffset) {
    return DataLoss(what + ": header size, slot size or slot offset disagree with this build");
  }
  ControlBlockOptions geometry;
  geometry.max_ranks = h->max_ranks;
  geometry.command_ring_capacity = h->command_ring_capacity;
  geometry.command_max_message = h->command_max_message;
  geometry.response_ring_capacity = h->response_ring_capacity;
  geometry.response_max_message = h->response_max_message;
  if (Status s = ValidateOptions(geometry); !s.ok()) return DataLoss(what + ": " + s.message());
  if (h->rings_offset != RingsOffset(h->max_ranks) ||
      h->ring_stride != RingStride(h->command_ring_capacity, h->response_ring_capacity) ||
      SegmentBytes(geometry) != segment_.size()) {
    return DataLoss(what + ": ring geometry disagrees with the segment size " +
                    std::to_string(segment_.size()));
  }
  for (uint32_t i = 0; i < h->max_ranks; ++i) {
    const RankSlot& s = slots_[i];
    const uint64_t command = h->rings_offset + uint64_t{i} * h->ring_stride;
    if (s.slot_index != i || s.command_ring_offset != command ||
        s.response_ring_offset != command + RingBytes(h->command_ring_capacity)) {
      return DataLoss(what + ": slot " + std::to_string(i) + " has inconsistent ring offsets");
    }
  }
  return Status::Ok();
}

std::span<uint8_t> ControlBlock::RingBytesAt(uint64_t offset, uint64_t capacity) const {
  uint8_t* p = segment_.At(offset, RingBytes(capacity));
  if (p == nullptr) return {};
  return {p, static_cast<size_t>(RingBytes(capacity))};
}

Status ControlBlock::BecomeSidecar() {
  StatusOr<uint64_t> token = ProcessLivenessToken();
  if (!token.ok()) return token.status().WithPrefix(Label(segment_.name()));
  const ProcessIdentity self = SelfIdentity();
  header_->sidecar_start_ticks.store(self.start_time_ticks, std::memory_order_relaxed);
  header_->sidecar_token_id.store(*token, std::memory_order_relaxed);
  header_->sidecar_pid_ns.store(SelfPidNamespace(), std::memory_order_relaxed);
  header_->sidecar_pid.store(self.pid, std::memory_order_relaxed);
  Beat(&header_->sidecar_heartbeat);
  // Release: a rank that sees the new generation sees the new identity and heartbeat.
  my_generation_ = header_->instance_generation.fetch_add(1, std::memory_order_acq_rel) + 1;
  is_sidecar_ = true;
  return Status::Ok();
}

Status ControlBlock::Adopt() {
  RETURN_IF_ERROR(BecomeSidecar());
  // A COMMIT whose commit_sync_id store the previous instance did not live to make is
  // completed first, so older syncs keep reading their decision right (ReadDecision).
  const uint64_t decided = header_->decided.load(std::memory_order_acquire);
  if ((decided & 1) != 0 &&
      header_->commit_sync_id.load(std::memory_order_acquire) < decided >> 1) {
    header_->commit_sync_id.store(decided >> 1, std::memory_order_release);
  }
  // The sync the previous instance left undecided can never commit: say so explicitly, so a
  // rank that staged it drops it even if it missed the death of the previous sidecar.
  const uint64_t last = header_->last_sync_id.load(std::memory_order_acquire);
  if (last != 0 && ReadDecision(last) == Decision::kPending) RETURN_IF_ERROR(DecideAbort(last));
  ReclaimDead();
  return Status::Ok();
}

StatusOr<std::unique_ptr<ControlBlock>> ControlBlock::Create(const std::string& name,
                                                             const ControlBlockOptions& options) {
  RETURN_IF_ERROR(ValidateOptions(options));
  const uint64_t size = SegmentBytes(options);
  std::unique_ptr<ControlBlock> block(new ControlBlock());
  block->liveness_ = options.liveness;
  block->create_options_ = options;
  block->attach_options_.liveness = options.liveness;
  CreateOptions create;
  create.unlink_on_destroy = options.unlink_on_destroy;

  uint64_t first_generation = 1;
  StatusOr<Segment> created = Segment::Create(name, size, SegmentKind::kControl, create);
  if (!created.ok()) {
    // Create reports an existing name as FailedPrecondition; anything else is final.
    if (created.status().code() != StatusCode::kFailedPrecondition ||
        options.on_existing == OnExisting::kFail) {
      return created.status();
    }
    OpenOptions open;
    open.init_timeout = std::chrono::milliseconds(200);
    StatusOr<Segment> opened = Segment::Open(name, SegmentKind::kControl, open);
    Status compatible = opened.status();
    if (opened.ok()) {
      block->segment_ = std::move(opened).value();
      block->header_ =
          reinterpret_cast<ControlHeader*>(block->segment_.data() + kControlHeaderOffset);
      block->slots_ = reinterpret_cast<RankSlot*>(block->segment_.data() + kSlotsOffset);
      compatible = block->ValidateLayout();
      if (compatible.ok()) {
        SidecarStatus previous = block->CheckSidecar();
        if (previous.state == PeerState::kAlive) {
          return FailedPrecondition(Label(name) + ": its sidecar (pid " +
                                    std::to_string(previous.pid) + ") is still alive");
        }
        first_generation = previous.generation + 1;
        const ControlHeader& h = *block->header_;
        if (h.max_ranks != options.max_ranks ||
            h.command_ring_capacity != options.command_ring_capacity ||
            h.command_max_message != options.command_max_message ||
            h.response_ring_capacity != options.response_ring_capacity ||
            h.response_max_message != options.response_max_message) {
          compatible = FailedPrecondition(Label(name) + ": existing geometry differs from options");
        }
      }
    }
    if (compatible.ok() && options.on_existing != OnExisting::kRecreate) {
      block->segment_.set_unlink_on_destroy(options.unlink_on_destroy);
      RETURN_IF_ERROR(block->Adopt());
      block->StartSidecarHeartbeat(options.heartbeat_period);
      return block;
    }
    if (options.on_existing == OnExisting::kAdopt) {
      return compatible.WithPrefix("cannot adopt " + Label(name));
    }
    // Recreate. Ranks still mapping the old segment see its sidecar dead and IsSuperseded().
    block->segment_ = Segment();
    block->header_ = nullptr;
    block->slots_ = nullptr;
    create.if_exists = IfExists::kReplace;
    created = Segment::Create(name, size, SegmentKind::kControl, create);
    if (!created.ok()) return created.status();
  }
  block->segment_ = std::move(created).value();
  RETURN_IF_ERROR(block->InitializeLayout(options, first_generation));
  RETURN_IF_ERROR(block->BecomeSidecar());
  block->StartSidecarHeartbeat(options.heartbeat_period);
  block->segment_.Publish();
  return block;
}

StatusOr<std::unique_ptr<ControlBlock>> ControlBlock::Attach(const std::string& name,
                                                             const AttachOptions& options) {
  ASSIGN_OR_RETURN(Segment segment, Segment::Open(name, SegmentKind::kControl, options.open));
  std::unique_ptr<ControlBlock> block(new ControlBlock());
  block->segment_ = std::move(segment);
  block->header_ = reinterpret_cast<ControlHeader*>(block->segment_.data() + kControlHeaderOffset);
  block->slots_ = reinterpret_cast<RankSlot*>(block->segment_.data() + kSlotsOffset);
  block->liveness_ = options.liveness;
  block->attach_options_ = options;
  RETURN_IF_ERROR(block->ValidateLayout());
  return block;
}

// -------------------------------------------------------------------------- sidecar status

uint64_t ControlBlock::instance_generation() const {
  return header_->instance_generation.load(std::memory_order_acquire);
}

SidecarStatus ControlBlock::CheckSidecar() const {
  SidecarStatus status;
  status.generation = instance_generation();
  // The identity is four words; a torn read can only happen while a new sidecar adopts the
  // segment, i.e. when the previous one is dead, so judging "dead" from it is correct.
  PeerIdentity identity;
  identity.pid = header_->sidecar_pid.load(std::memory_order_acquire);
  identity.start_time_ticks = header_->sidecar_start_ticks.load(std::memory_order_acquire);
  identity.pid_ns = header_->sidecar_pid_ns.load(std::memory_order_acquire);
  identity.token_id = header_->sidecar_token_id.load(std::memory_order_acquire);
  status.pid = identity.pid;
  status.state = CheckPeer(identity, header_->sidecar_heartbeat, liveness_);
  return status;
}

StatusOr<bool> ControlBlock::IsSuperseded() const {
  OpenOptions open;
  open.init_timeout = std::chrono::milliseconds(100);
  StatusOr<Segment> now = Segment::Open(segment_.name(), SegmentKind::kControl, open);
  if (!now.ok()) {
    if (now.status().code() == StatusCode::kIoError) return now.status();
    return true;  // gone, unpublished or incompatible: not ours
  }
  const SegmentHeader* a = segment_.header();
  const SegmentHeader* b = now->header();
  return a->creator_pid != b->creator_pid || a->created_realtime_ns != b->created_realtime_ns;
}

// -------------------------------------------------------------------------------- decision

Decision ControlBlock::ReadDecision(uint64_t sync_id) const {
  if (sync_id == 0) return Decision::kPending;
  const uint64_t decided = header_->decided.load(std::memory_order_acquire);
  const uint64_t newest = decided >> 1;
  if (newest == sync_id) return (decided & 1) != 0 ? Decision::kCommit : Decision::kAbort;
  if (newest < sync_id) return Decision::kPending;
  // Syncs are decided in id order, one at a time: once a newer sync is decided, an older one
  // that was not committed can never be (PROTOCOL.md §7.3). commit_sync_id was stored before
  // the newer decision (a sidecar that adopts repairs it first: Adopt).
  return header_->commit_sync_id.load(std::memory_order_acquire) == sync_id ? Decision::kCommit
                                                                            : Decision::kAbort;
}

namespace {

// The CAS of `decided` to sync `sync_id` with outcome `commit`, from any smaller sync id.
// Returns the word that decides `sync_id` or a newer sync: ours on success, else the one found.
uint64_t ClaimDecision(std::atomic<uint64_t>& decided, uint64_t sync_id, bool commit) {
  const uint64_t want = sync_id << 1 | (commit ? 1 : 0);
  uint64_t seen = decided.load(std::memory_order_acquire);
  while ((seen >> 1) < sync_id) {
    if (decided.compare_exchange_weak(seen, want, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      return want;
    }
  }
  return seen;
}

}  // namespace

AwaitOutcome ControlBlock::AwaitDecision(uint64_t sync_id, std::chrono::nanoseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const uint64_t generation = instance_generation();
  auto decided = [&](Decision d) {
    return d == Decision::kCommit ? AwaitOutcome::kCommit : AwaitOutcome::kAbort;
  };
  for (;;) {
    const uint32_t seen = header_->decision_seq.load(std::memory_order_acquire);
    Decision d = ReadDecision(sync_id);
    if (d != Decision::kPending) return decided(d);
    if (CheckSidecar().state != PeerState::kAlive || instance_generation() != generation) {
      // The sidecar is judged dead or replaced: this rank decides ABORT, unless a decision came
      // first (the CAS fails then, and that decision stands). A sidecar that was only stalled
      // and resumes can then no longer decide COMMIT for a sync its ranks have dropped.
      const uint64_t word = ClaimDecision(header_->decided, sync_id, /*commit=*/false);
      if (word == sync_id << 1) {
        header_->decision_seq.fetch_add(1, std::memory_order_release);
        FutexWakeAll(&header_->decision_seq);
        return AwaitOutcome::kSidecarDead;
      }
      return decided(ReadDecision(sync_id));
    }
    auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::nanoseconds::zero()) return AwaitOutcome::kTimedOut;
    auto slice = std::min<std::chrono::nanoseconds>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(left), kDecisionPollSlice);
    FutexWait(&header_->decision_seq, seen, slice);
  }
}

void ControlBlock::StartSidecarHeartbeat(std::chrono::nanoseconds period) {
  // A sidecar that a later one replaced (it was stopped past the stale threshold) stops
  // beating: the heartbeat is the new sidecar's, and a stopped new sidecar must look stopped.
  heartbeat_ = std::make_unique<HeartbeatThread>(&header_->sidecar_heartbeat, period,
                                                 [this] { return IsCurrentSidecar(); });
}

uint64_t ControlBlock::AllocateSyncId() {
  return header_->last_sync_id.fetch_add(1, std::memory_order_acq_rel) + 1;
}

bool ControlBlock::IsCurrentSidecar() const {
  return is_sidecar_ && instance_generation() == my_generation_ &&
         header_->sidecar_pid.load(std::memory_order_acquire) == static_cast<uint32_t>(getpid());
}

Status ControlBlock::CheckMayDecide(uint64_t sync_id) const {
  if (sync_id == 0) return FailedPrecondition("sync id 0 is reserved");
  if (!IsCurrentSidecar()) {
    return FailedPrecondition("decide sync " + std::to_string(sync_id) +
                              ": this process is not the current sidecar of " +
                              Label(segment_.name()));
  }
  return Status::Ok();
}

Status ControlBlock::Decide(uint64_t sync_id, bool commit) {
  RETURN_IF_ERROR(CheckMayDecide(sync_id));
  const uint64_t word = ClaimDecision(header_->decided, sync_id, commit);
  if (word != (sync_id << 1 | (commit ? 1 : 0))) {
    if ((word >> 1) != sync_id) {
      return FailedPrecondition("sync " + std::to_string(sync_id) + ": a newer sync was decided");
    }
    if (commit) {
      return FailedPrecondition("sync " + std::to_string(sync_id) +
                                " was already aborted (by a rank that judged this sidecar dead, "
                                "if this sidecar did not abort it)");
    }
    return FailedPrecondition("sync " + std::to_string(sync_id) + " was already committed");
  }
  (commit ? header_->commit_sync_id : header_->abort_sync_id)
      .store(sync_id, std::memory_order_release);
  header_->decision_seq.fetch_add(1, std::memory_order_release);
  FutexWakeAll(&header_->decision_seq);
  return Status::Ok();
}

Status ControlBlock::DecideCommit(uint64_t sync_id) { return Decide(sync_id, true); }

// Deciding what `decided` already holds (an ABORT a rank made when it judged this sidecar
// dead) succeeds: Decide's CAS finds the same word.
Status ControlBlock::DecideAbort(uint64_t sync_id) { return Decide(sync_id, false); }

}  // namespace deltakv::shm
