// ControlBlock: rank slots — registration by CAS, reclaim of dead owners, snapshots, channels.
//
// Duplicate-rank rule (shm/PROTOCOL.md §7.2): after claiming a slot for rank r, a registrant
// scans every other slot. A live ACTIVE holder of r makes it give up. A live REGISTERING holder
// of r at a lower slot index makes it release and retry; one at a higher index is waited for
// until it resolves. Claims and scans are seq_cst, so of two concurrent registrants at least
// one sees the other; the lower index never yields to a REGISTERING peer and the higher never
// waits, so exactly one of them becomes ACTIVE and the wait graph has no cycles.
#include <unistd.h>

#include <thread>
#include <utility>

#include "shm/control_block.h"
#include "shm/liveness_token.h"

namespace deltakv::shm {
namespace {

constexpr auto kConflictPoll = std::chrono::microseconds(200);
constexpr auto kRetryPause = std::chrono::milliseconds(1);

std::string Label(const std::string& name) { return "control block '" + name + "'"; }

// The owner of an ACTIVE slot as it recorded itself (shm/PROTOCOL.md §7.1).
PeerIdentity SlotOwner(const RankSlot& s, uint32_t pid) {
  PeerIdentity owner;
  owner.pid = pid;
  owner.start_time_ticks = s.owner_start_ticks.load(std::memory_order_relaxed);
  owner.pid_ns = s.owner_pid_ns.load(std::memory_order_relaxed);
  owner.token_id = s.owner_token_id.load(std::memory_order_relaxed);
  return owner;
}

}  // namespace

std::string_view SlotStateName(SlotState state) {
  switch (state) {
    case SlotState::kFree:
      return "FREE";
    case SlotState::kRegistering:
      return "REGISTERING";
    case SlotState::kActive:
      return "ACTIVE";
  }
  return "INVALID";
}

SlotWord SlotWord::Unpack(uint64_t word) {
  SlotWord w;
  w.pid = static_cast<uint32_t>(word);
  w.rank = static_cast<uint32_t>((word >> 32) & 0xFFFF);
  w.state = static_cast<SlotState>((word >> 48) & 0xFF);
  w.seq = static_cast<uint8_t>(word >> 56);
  return w;
}

uint64_t SlotWord::Pack() const {
  return uint64_t{pid} | (uint64_t{rank & 0xFFFF} << 32) |
         (uint64_t{static_cast<uint8_t>(state)} << 48) | (uint64_t{seq} << 56);
}

bool ControlBlock::OwnerDead(const RankSlot& s, const SlotWord& w) const {
  switch (w.state) {
    case SlotState::kFree:
      return false;
    case SlotState::kRegistering: {
      // The heartbeat is not written yet. The token, once published for this very claim, says
      // whether the claimant lives; before that, only the pid in the word is known, and it is
      // judged by the token files that name it (the claimant's token exists before its claim).
      if (s.token_word.load(std::memory_order_acquire) == w.Pack()) {
        PeerIdentity owner;
        owner.pid = w.pid;
        owner.pid_ns = s.owner_pid_ns.load(std::memory_order_relaxed);
        owner.token_id = s.owner_token_id.load(std::memory_order_relaxed);
        return !PeerProcessAlive(owner);
      }
      return !LivenessDirectory().MayBeAlive(w.pid);
    }
    case SlotState::kActive:
      return CheckPeer(SlotOwner(s, w.pid), s.heartbeat, liveness_) != PeerState::kAlive;
  }
  return true;  // an invalid state value: garbage, reclaim it
}

bool ControlBlock::TryFree(RankSlot& s, uint64_t word) {
  SlotWord free;
  free.seq = SlotWord::Unpack(word).seq;
  return s.state_word.compare_exchange_strong(word, free.Pack(), std::memory_order_acq_rel);
}

StatusOr<RankHandle> ControlBlock::RegisterRank(uint32_t rank, uint32_t world_size) {
  if (world_size == 0 || rank >= world_size || rank > kMaxRankId) {
    return InvalidArgument("register rank " + std::to_string(rank) + " of world size " +
                           std::to_string(world_size) +
                           ": need rank < world size and rank <= " + std::to_string(kMaxRankId));
  }
  // The token must exist before this process's pid appears in any slot word.
  StatusOr<uint64_t> token = ProcessLivenessToken();
  if (!token.ok()) return token.status().WithPrefix("register rank " + std::to_string(rank));
  const uint64_t pid_ns = SelfPidNamespace();
  const ProcessIdentity self = SelfIdentity();
  const uint32_t n = header_->max_ranks;
  const auto deadline = std::chrono::steady_clock::now() + attach_options_.register_timeout;
  auto held_by = [&](const SlotWord& w, uint32_t index) {
    return "rank " + std::to_string(rank) + " is already registered by live pid " +
           std::to_string(w.pid) + " (slot " + std::to_string(index) + ")";
  };

  for (;;) {
    // 1. A live ACTIVE holder of this rank wins; dead holders are reclaimed.
    for (uint32_t i = 0; i < n; ++i) {
      uint64_t raw = slot(i)->state_word.load(std::memory_order_acquire);
      SlotWord w = SlotWord::Unpack(raw);
      if (w.state == SlotState::kFree || w.rank != rank) continue;
      if (OwnerDead(*slot(i), w)) {
        TryFree(*slot(i), raw);
      } else if (w.state == SlotState::kActive) {
        return FailedPrecondition(held_by(w, i));
      }
    }

    // 2. Claim a free slot: FREE → REGISTERING{pid, rank}. If none is free, reclaim the slots
    // of dead owners of any rank and look once more.
    uint32_t mine = n;
    uint64_t my_word = 0;
    for (int pass = 0; pass < 2 && mine == n; ++pass) {
      if (pass == 1) ReclaimDead();
      for (uint32_t i = 0; i < n && mine == n; ++i) {
        uint64_t raw = slot(i)->state_word.load(std::memory_order_acquire);
        SlotWord w = SlotWord::Unpack(raw);
        if (w.state != SlotState::kFree) continue;
        SlotWord claim{self.pid, rank, SlotState::kRegistering, static_cast<uint8_t>(w.seq + 1)};
        if (slot(i)->state_word.compare_exchange_strong(raw, claim.Pack(),
                                                        std::memory_order_seq_cst)) {
          mine = i;
          my_word = claim.Pack();
          // Publish who holds this claim, so peers of any PID namespace can judge it.
          slot(i)->owner_token_id.store(*token, std::memory_order_relaxed);
          slot(i)->owner_pid_ns.store(pid_ns, std::memory_order_relaxed);
          slot(i)->token_word.store(my_word, std::memory_order_release);
        }
      }
    }
    if (mine == n) {
      return ResourceExhausted("all " + std::to_string(n) + " rank slots of " +
                               Label(segment_.name()) + " are held by live processes");
    }
    auto release_mine = [&] { TryFree(*slot(mine), my_word); };

    // 3. Resolve concurrent registrations of the same rank (see the file comment).
    bool retry = false;
    for (uint32_t j = 0; j < n && !retry; ++j) {
      if (j == mine) continue;
      for (;;) {
        uint64_t raw = slot(j)->state_word.load(std::memory_order_seq_cst);
        SlotWord w = SlotWord::Unpack(raw);
        if (w.state == SlotState::kFree || w.rank != rank) break;
        if (OwnerDead(*slot(j), w)) {
          TryFree(*slot(j), raw);
          continue;
        }
        if (w.state == SlotState::kActive) {
          release_mine();
          return FailedPrecondition(held_by(w, j));
        }
        if (std::chrono::steady_clock::now() >= deadline) {
          release_mine();
          return FailedPrecondition("rank " + std::to_string(rank) +
                                    ": a concurrent registration by pid " + std::to_string(w.pid) +
                                    " did not resolve in time");
        }
        if (j < mine) {
          release_mine();
          retry = true;
          break;
        }
        std::this_thread::sleep_for(kConflictPoll);  // j > mine: wait for it to resolve
      }
    }
    if (retry) {
      std::this_thread::sleep_for(kRetryPause);
      continue;
    }

    // 4. Won: fill the slot, reset its rings, go ACTIVE.
    RankSlot& s = *slot(mine);
    s.world_size.store(world_size, std::memory_order_relaxed);
    s.owner_start_ticks.store(self.start_time_ticks, std::memory_order_relaxed);
    s.live_policy_version.store(0, std::memory_order_relaxed);
    s.staged_sync_id.store(0, std::memory_order_relaxed);
    const uint64_t epoch = s.epoch.fetch_add(1, std::memory_order_relaxed) + 1;
    const ControlHeader& h = *header_;
    Status rings = InitializeRing(RingBytesAt(s.command_ring_offset, h.command_ring_capacity),
                                  h.command_ring_capacity, h.command_max_message);
    if (rings.ok()) {
      rings = InitializeRing(RingBytesAt(s.response_ring_offset, h.response_ring_capacity),
                             h.response_ring_capacity, h.response_max_message);
    }
    RankHandle handle;
    handle.slot_ = &s;
    handle.slot_index_ = mine;
    handle.rank_ = rank;
    handle.epoch_ = epoch;
    StatusOr<SpscRingConsumer> commands =
        SpscRingConsumer::Attach(RingBytesAt(s.command_ring_offset, h.command_ring_capacity));
    StatusOr<SpscRingProducer> responses =
        SpscRingProducer::Attach(RingBytesAt(s.response_ring_offset, h.response_ring_capacity));
    if (!rings.ok() || !commands.ok() || !responses.ok()) {
      release_mine();
      Status bad = !rings.ok() ? rings : !commands.ok() ? commands.status() : responses.status();
      return bad.WithPrefix("register rank " + std::to_string(rank));
    }
    handle.commands_ = std::move(commands).value();
    handle.responses_ = std::move(responses).value();
    SlotWord active = SlotWord::Unpack(my_word);
    active.state = SlotState::kActive;
    // Beats once before the slot turns ACTIVE, so it is never judged stale on arrival, and
    // only while the slot is still this registration's: a rank judged dead (stopped past the
    // stale threshold) whose slot went to another rank must not beat for that rank.
    handle.heartbeat_ = std::make_unique<HeartbeatThread>(
        &s.heartbeat, attach_options_.heartbeat_period,
        [slot = &s, registering = my_word, registered = active.Pack()] {
          const uint64_t word = slot->state_word.load(std::memory_order_acquire);
          return word == registering || word == registered;
        });
    uint64_t expected = my_word;
    // Release: the fields and rings above are visible to whoever sees ACTIVE.
    if (!s.state_word.compare_exchange_strong(expected, active.Pack(), std::memory_order_seq_cst)) {
      handle.heartbeat_.reset();
      handle.slot_ = nullptr;
      return Internal("register rank " + std::to_string(rank) + ": slot " + std::to_string(mine) +
                      " was taken from a live registrant");
    }
    handle.word_ = active.Pack();
    return handle;
  }
}

std::vector<RankInfo> ControlBlock::ReclaimDead() {
  std::vector<RankInfo> reclaimed;
  // Token files of processes that exited without removing them (killed, crashed).
  (void)RemoveReleasedTokens();
  for (uint32_t i = 0; i < header_->max_ranks; ++i) {
    RankSlot& s = *slot(i);
    uint64_t raw = s.state_word.load(std::memory_order_acquire);
    SlotWord w = SlotWord::Unpack(raw);
    if (w.state == SlotState::kFree || !OwnerDead(s, w)) continue;
    RankInfo info;
    info.slot = i;
    info.rank = w.rank;
    info.pid = w.pid;
    info.state_word = raw;
    info.world_size = s.world_size.load(std::memory_order_relaxed);
    info.epoch = s.epoch.load(std::memory_order_relaxed);
    info.live_policy_version = s.live_policy_version.load(std::memory_order_relaxed);
    info.staged_sync_id = s.staged_sync_id.load(std::memory_order_relaxed);
    if (TryFree(s, raw)) reclaimed.push_back(info);
  }
  return reclaimed;
}

bool ControlBlock::Snapshot(uint32_t index, RankInfo* info) const {
  const RankSlot& s = *slot(index);
  const uint64_t before = s.state_word.load(std::memory_order_acquire);
  SlotWord w = SlotWord::Unpack(before);
  if (w.state != SlotState::kActive) return false;
  info->slot = index;
  info->rank = w.rank;
  info->pid = w.pid;
  info->state_word = before;
  info->world_size = s.world_size.load(std::memory_order_relaxed);
  info->epoch = s.epoch.load(std::memory_order_relaxed);
  info->live_policy_version = s.live_policy_version.load(std::memory_order_acquire);
  info->staged_sync_id = s.staged_sync_id.load(std::memory_order_acquire);
  // Seqlock-style: if the word did not change, the fields belong to this incarnation.
  std::atomic_thread_fence(std::memory_order_acquire);
  return s.state_word.load(std::memory_order_relaxed) == before;
}

std::vector<RankInfo> ControlBlock::ActiveRanks() const {
  std::vector<RankInfo> ranks;
  for (uint32_t i = 0; i < header_->max_ranks; ++i) {
    RankInfo info;
    if (Snapshot(i, &info)) ranks.push_back(info);
  }
  return ranks;
}

bool ControlBlock::IsCurrent(const RankInfo& info) const {
  return info.slot < header_->max_ranks &&
         slot(info.slot)->state_word.load(std::memory_order_acquire) == info.state_word;
}

PeerState ControlBlock::CheckRank(const RankInfo& info) const {
  if (!IsCurrent(info)) return PeerState::kProcessGone;
  const RankSlot& s = *slot(info.slot);
  return CheckPeer(SlotOwner(s, info.pid), s.heartbeat, liveness_);
}

StatusOr<RankChannel> ControlBlock::OpenChannel(const RankInfo& info) {
  if (!IsCurrent(info)) {
    return FailedPrecondition("rank " + std::to_string(info.rank) + " (slot " +
                              std::to_string(info.slot) + ") is no longer registered");
  }
  const RankSlot& s = *slot(info.slot);
  RankChannel channel;
  channel.info = info;
  ASSIGN_OR_RETURN(channel.commands, SpscRingProducer::Attach(RingBytesAt(
                                         s.command_ring_offset, header_->command_ring_capacity)));
  ASSIGN_OR_RETURN(channel.responses,
                   SpscRingConsumer::Attach(
                       RingBytesAt(s.response_ring_offset, header_->response_ring_capacity)));
  return channel;
}

// ------------------------------------------------------------------------------ RankHandle

RankHandle::RankHandle(RankHandle&& other) noexcept
    : slot_(std::exchange(other.slot_, nullptr)),
      slot_index_(other.slot_index_),
      rank_(other.rank_),
      epoch_(other.epoch_),
      word_(other.word_),
      heartbeat_(std::move(other.heartbeat_)),
      commands_(other.commands_),
      responses_(other.responses_) {}

RankHandle& RankHandle::operator=(RankHandle&& other) noexcept {
  if (this != &other) {
    (void)Unregister();
    slot_ = std::exchange(other.slot_, nullptr);
    slot_index_ = other.slot_index_;
    rank_ = other.rank_;
    epoch_ = other.epoch_;
    word_ = other.word_;
    heartbeat_ = std::move(other.heartbeat_);
    commands_ = other.commands_;
    responses_ = other.responses_;
  }
  return *this;
}

RankHandle::~RankHandle() { (void)Unregister(); }

// A reclaimed slot may hold another rank now: its fields are not this handle's to write.
void RankHandle::SetLivePolicyVersion(uint64_t version) {
  if (StillRegistered()) slot_->live_policy_version.store(version, std::memory_order_release);
}

void RankHandle::SetStagedSyncId(uint64_t sync_id) {
  if (StillRegistered()) slot_->staged_sync_id.store(sync_id, std::memory_order_release);
}

bool RankHandle::StillRegistered() const {
  return slot_ != nullptr && slot_->state_word.load(std::memory_order_acquire) == word_;
}

Status RankHandle::Unregister() {
  if (slot_ == nullptr) return Status::Ok();
  heartbeat_.reset();
  SlotWord free;
  free.seq = SlotWord::Unpack(word_).seq;
  uint64_t expected = word_;
  RankSlot* s = std::exchange(slot_, nullptr);
  if (!s->state_word.compare_exchange_strong(expected, free.Pack(), std::memory_order_acq_rel)) {
    return FailedPrecondition("rank " + std::to_string(rank_) + ": slot " +
                              std::to_string(slot_index_) +
                              " was reclaimed (this process was judged dead)");
  }
  return Status::Ok();
}

}  // namespace deltakv::shm
