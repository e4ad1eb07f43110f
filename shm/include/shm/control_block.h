// ControlBlock: the sidecar's control segment, shared with every engine rank on the node
// (layout and state machines: shm/PROTOCOL.md §5-§7).
//
// The segment holds: the sidecar's identity (pid, start time, PID namespace and liveness token,
// so ranks of another PID namespace can judge it) and heartbeat; an instance generation, bumped
// each time a sidecar creates or adopts the segment; the two-phase-commit decision words
// (decided, commit_sync_id, abort_sync_id, and the futex word decision_seq); and a fixed array
// of rank
// slots. Each slot holds a packed 64-bit state word {claim seq, state, rank, pid} that is only
// ever changed by CAS (FREE → REGISTERING → ACTIVE → FREE), the rank's identity, heartbeat and
// live policy version, its liveness token and PID namespace, and the offsets of its two rings:
// commands (sidecar → rank) and responses (rank → sidecar).
//
// Who writes what: the sidecar writes the header, its heartbeat and the decision words; a rank
// writes only the slot it has claimed (and resets that slot's rings while REGISTERING), except
// that a rank which judges the sidecar dead decides ABORT by the same CAS of `decided` the
// sidecar decides with (and bumps decision_seq); anyone may CAS a slot whose owner is dead back
// to FREE. There is no lock: a process that dies at any
// point leaves either a slot that a liveness check reclaims or a decision that is already
// complete.
//
// Restart: a new sidecar adopts an existing compatible segment by default (ranks stay
// registered; it bumps instance_generation, aborts the sync its predecessor left undecided,
// and reclaims dead slots) or recreates it (a new segment under the same name; ranks notice
// that their sidecar is dead and IsSuperseded(), re-attach and re-register). Either way it
// refuses while the recorded sidecar is still alive.
//
// Ownership: ControlBlock owns the mapping (and, in the sidecar, the heartbeat thread); a
// RankHandle owns one claimed slot and its heartbeat thread and releases the slot when
// destroyed. REQUIRES: the ControlBlock outlives its RankHandles and RankChannels.
//
// Thread-safety: ControlBlock's methods may be called from any thread. A RankHandle's ring
// ends and a RankChannel's ring ends each belong to one thread at a time (see spsc_ring.h).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "shm/liveness.h"
#include "shm/segment.h"
#include "shm/spsc_ring.h"

namespace deltakv::shm {

inline constexpr uint64_t kControlMagic = MagicFromText("DKVCTRL1");
inline constexpr uint32_t kMaxRankSlots = 1024;
inline constexpr uint32_t kMaxRankId = 0xFFFF;  // the state word holds 16 bits of rank

// At byte 64 of the segment, after the SegmentHeader. 192 bytes; the decision words have a
// cache line of their own.
struct ControlHeader {
  // Geometry, written once at creation.
  uint64_t magic;                   // kControlMagic
  uint32_t layout_version;          // kLayoutVersion
  uint32_t header_size;             // sizeof(ControlHeader) == 192
  uint32_t max_ranks;               // number of rank slots, 1..kMaxRankSlots
  uint32_t slot_size;               // sizeof(RankSlot) == 128
  uint64_t slots_offset;            // byte offset of slot 0 (256)
  uint64_t rings_offset;            // byte offset of slot 0's command ring, 4096-aligned
  uint64_t ring_stride;             // bytes from one slot's rings to the next's
  uint64_t command_ring_capacity;   // data bytes of each command ring
  uint64_t response_ring_capacity;  // data bytes of each response ring
  uint32_t command_max_message;
  uint32_t response_max_message;
  // The sidecar instance.
  std::atomic<uint32_t> sidecar_pid;          // 0 after a clean shutdown
  uint32_t reserved0;                         // zero
  std::atomic<uint64_t> sidecar_start_ticks;  // see ProcessIdentity
  Heartbeat sidecar_heartbeat;                // bumped every heartbeat period
  std::atomic<uint64_t> instance_generation;  // bumped on every create/adopt; never 0
  std::atomic<uint64_t> last_sync_id;         // highest sync id handed out
  std::atomic<uint64_t> sidecar_token_id;     // the sidecar's LivenessToken
  // The 2PC decision, bytes 128-151, and `decided` below. Never cleared.
  std::atomic<uint64_t> commit_sync_id;  // the most recent sync decided COMMIT
  std::atomic<uint64_t> abort_sync_id;   // the most recent sync decided ABORT
  std::atomic<uint32_t> decision_seq;    // futex word; bumped and woken on every decision
  uint32_t reserved2;                    // zero
  std::atomic<uint64_t> sidecar_pid_ns;  // the sidecar's PID namespace (SelfPidNamespace)
  // The newest decided sync and its outcome, (sync_id << 1) | commit; 0 = none. Every decision
  // is one CAS of this word from a smaller sync id, by the sidecar (COMMIT or ABORT) or by a
  // rank that judged the sidecar dead (ABORT): exactly one of them decides each sync.
  std::atomic<uint64_t> decided;
  uint8_t reserved3[24];
};
static_assert(sizeof(ControlHeader) == 192);
static_assert(offsetof(ControlHeader, max_ranks) == 16);
static_assert(offsetof(ControlHeader, slots_offset) == 24);
static_assert(offsetof(ControlHeader, command_ring_capacity) == 48);
static_assert(offsetof(ControlHeader, command_max_message) == 64);
static_assert(offsetof(ControlHeader, sidecar_pid) == 72);
static_assert(offsetof(ControlHeader, sidecar_start_ticks) == 80);
static_assert(offsetof(ControlHeader, sidecar_heartbeat) == 88);
static_assert(offsetof(ControlHeader, instance_generation) == 104);
static_assert(offsetof(ControlHeader, last_sync_id) == 112);
static_assert(offsetof(ControlHeader, sidecar_token_id) == 120);
static_assert(offsetof(ControlHeader, commit_sync_id) == 128);
static_assert(offsetof(ControlHeader, abort_sync_id) == 136);
static_assert(offsetof(ControlHeader, decision_seq) == 144);
static_assert(offsetof(ControlHeader, sidecar_pid_ns) == 152);
static_assert(offsetof(ControlHeader, decided) == 160);

enum class SlotState : uint8_t { kFree = 0, kRegistering = 1, kActive = 2 };
std::string_view SlotStateName(SlotState state);

// The 64-bit state word of a rank slot: bits 0-31 pid, 32-47 rank, 48-55 SlotState, 56-63
// claim sequence (incremented by every claim so a stale CAS cannot succeed after a re-claim).
struct SlotWord {
  uint32_t pid = 0;
  uint32_t rank = 0;  // <= kMaxRankId
  SlotState state = SlotState::kFree;
  uint8_t seq = 0;

  static SlotWord Unpack(uint64_t word);
  uint64_t Pack() const;
};

// 128 bytes per slot, two cache lines.
struct RankSlot {
  std::atomic<uint64_t> state_word;           // SlotWord; changed only by CAS
  std::atomic<uint32_t> world_size;           // written while REGISTERING
  uint32_t slot_index;                        // constant
  std::atomic<uint64_t> owner_start_ticks;    // ProcessIdentity of the owner, with the pid
  Heartbeat heartbeat;                        // the rank's heartbeat
  std::atomic<uint64_t> live_policy_version;  // the version the rank serves; 0 = unknown
  std::atomic<uint64_t> staged_sync_id;       // the sync the rank has staged; 0 = none
  std::atomic<uint64_t> epoch;                // successful registrations in this slot
  uint64_t command_ring_offset;               // constant; sidecar → rank
  uint64_t response_ring_offset;              // constant; rank → sidecar
  // The claimant's LivenessToken and PID namespace, written right after its claim; `token_word`
  // is release-stored last and says which claim (state word) they belong to.
  std::atomic<uint64_t> owner_token_id;
  std::atomic<uint64_t> owner_pid_ns;
  std::atomic<uint64_t> token_word;
  uint8_t reserved[24];
};
static_assert(sizeof(RankSlot) == 128);
static_assert(offsetof(RankSlot, world_size) == 8);
static_assert(offsetof(RankSlot, owner_start_ticks) == 16);
static_assert(offsetof(RankSlot, heartbeat) == 24);
static_assert(offsetof(RankSlot, live_policy_version) == 40);
static_assert(offsetof(RankSlot, staged_sync_id) == 48);
static_assert(offsetof(RankSlot, epoch) == 56);
static_assert(offsetof(RankSlot, command_ring_offset) == 64);
static_assert(offsetof(RankSlot, response_ring_offset) == 72);
static_assert(offsetof(RankSlot, owner_token_id) == 80);
static_assert(offsetof(RankSlot, owner_pid_ns) == 88);
static_assert(offsetof(RankSlot, token_word) == 96);

inline constexpr uint64_t kControlHeaderOffset = sizeof(SegmentHeader);                 // 64
inline constexpr uint64_t kSlotsOffset = kControlHeaderOffset + sizeof(ControlHeader);  // 256

enum class OnExisting {
  kFail,             // Create fails if the name exists
  kAdopt,            // take over a compatible existing segment; fail if incompatible
  kAdoptOrRecreate,  // adopt if compatible, else replace it
  kRecreate,         // always replace it
};

struct ControlBlockOptions {
  uint32_t max_ranks = 64;
  uint64_t command_ring_capacity = 16 << 10;
  uint32_t command_max_message = 4 << 10;
  uint64_t response_ring_capacity = 256 << 10;
  uint32_t response_max_message = 64 << 10;
  OnExisting on_existing = OnExisting::kAdoptOrRecreate;
  std::chrono::nanoseconds heartbeat_period = HeartbeatThread::kDefaultPeriod;
  LivenessOptions liveness;
  bool unlink_on_destroy = false;  // keep the segment after a clean exit by default
};

struct AttachOptions {
  OpenOptions open;
  LivenessOptions liveness;
  // How long RegisterRank may wait for a concurrent registration of the same rank to resolve.
  std::chrono::milliseconds register_timeout{5000};
  std::chrono::nanoseconds heartbeat_period = HeartbeatThread::kDefaultPeriod;
};

// A consistent snapshot of one ACTIVE slot.
struct RankInfo {
  uint32_t slot = 0;
  uint32_t rank = 0;
  uint32_t world_size = 0;
  uint32_t pid = 0;
  uint64_t state_word = 0;  // identifies this incarnation of the slot
  uint64_t epoch = 0;
  uint64_t live_policy_version = 0;
  uint64_t staged_sync_id = 0;
};

enum class Decision { kPending, kCommit, kAbort };
enum class AwaitOutcome { kCommit, kAbort, kSidecarDead, kTimedOut };

struct SidecarStatus {
  PeerState state = PeerState::kProcessGone;
  uint32_t pid = 0;
  uint64_t generation = 0;
};

class ControlBlock;

// An engine rank's claim on one slot. Beats the slot's heartbeat from its own thread and
// releases the slot (ACTIVE → FREE) when destroyed.
class RankHandle {
 public:
  RankHandle(const RankHandle&) = delete;
  RankHandle& operator=(const RankHandle&) = delete;
  RankHandle(RankHandle&&) noexcept;
  RankHandle& operator=(RankHandle&&) noexcept;
  ~RankHandle();

  uint32_t slot() const { return slot_index_; }
  uint32_t rank() const { return rank_; }
  uint64_t epoch() const { return epoch_; }
  // Commands from the sidecar (this rank consumes) and responses to it (this rank produces).
  SpscRingConsumer& commands() { return commands_; }
  SpscRingProducer& responses() { return responses_; }

  // Release-store the policy version this rank now serves / the sync it has staged (0 = none).
  void SetLivePolicyVersion(uint64_t version);
  void SetStagedSyncId(uint64_t sync_id);
  // False once the slot has been reclaimed (this process was judged dead, e.g. after being
  // stopped longer than the stale threshold): the rank must register again.
  bool StillRegistered() const;
  // ACTIVE → FREE and stops the heartbeat. FailedPrecondition if the slot was already
  // reclaimed; OK otherwise. Idempotent.
  Status Unregister();

 private:
  friend class ControlBlock;
  RankHandle() = default;

  RankSlot* slot_ = nullptr;
  uint32_t slot_index_ = 0;
  uint32_t rank_ = 0;
  uint64_t epoch_ = 0;
  uint64_t word_ = 0;  // our ACTIVE state word
  std::unique_ptr<HeartbeatThread> heartbeat_;
  SpscRingConsumer commands_;
  SpscRingProducer responses_;
};

// The sidecar's ends of one rank's rings, bound to one incarnation of the slot.
struct RankChannel {
  RankInfo info;
  SpscRingProducer commands;
  SpscRingConsumer responses;
};

class ControlBlock {
 public:
  ControlBlock(const ControlBlock&) = delete;
  ControlBlock& operator=(const ControlBlock&) = delete;
  ~ControlBlock();

  // Sidecar: creates (or adopts / recreates, per options.on_existing) the control segment,
  // records this process as the sidecar, bumps instance_generation and starts the heartbeat.
  // InvalidArgument for bad options; FailedPrecondition if the name exists and on_existing
  // does not allow taking it, or if the recorded sidecar is still alive; errors of
  // Segment::Create/Open otherwise.
  static StatusOr<std::unique_ptr<ControlBlock>> Create(const std::string& name,
                                                        const ControlBlockOptions& options = {});
  // Rank: maps an existing control segment and validates its layout. Errors of Segment::Open
  // (including a refusal for another layout version); DataLoss for inconsistent geometry.
  static StatusOr<std::unique_ptr<ControlBlock>> Attach(const std::string& name,
                                                        const AttachOptions& options = {});

  // ------------------------------------------------------------------------- rank side
  // Claims a free slot for `rank` of `world_size`, resets its rings, and goes ACTIVE. Slots
  // held by dead processes (this rank's or any other, when no slot is free) are reclaimed on
  // the way. InvalidArgument for rank >= world_size or rank > kMaxRankId; FailedPrecondition
  // if a live process holds `rank` (the message names its pid); ResourceExhausted if no slot
  // is free; FailedPrecondition if a concurrent registration of the same rank did not resolve
  // within register_timeout. On failure no slot is held.
  StatusOr<RankHandle> RegisterRank(uint32_t rank, uint32_t world_size);
  // Same as handle.Unregister().
  Status UnregisterRank(RankHandle& handle) { return handle.Unregister(); }

  // The sidecar's identity, liveness and instance generation.
  SidecarStatus CheckSidecar() const;
  uint64_t instance_generation() const;
  // True if the name now refers to a different segment (recreated by a new sidecar) or to
  // none; the rank should then Attach again and re-register. Error if the name cannot be read.
  StatusOr<bool> IsSuperseded() const;

  // The decision for `sync_id` as of now (acquire): the outcome `decided` records for it; for a
  // sync older than the one `decided` names, kCommit if commit_sync_id == sync_id and kAbort
  // otherwise (an older undecided sync can never be committed any more); kPending otherwise.
  Decision ReadDecision(uint64_t sync_id) const;
  // Waits (futex on decision_seq, in slices of at most 100 ms) until `sync_id` is decided, the
  // sidecar is judged dead or replaced, or `timeout` passes. A rank that judges the sidecar dead
  // decides ABORT itself (the CAS of `decided`, so a sidecar that was only stalled can no longer
  // decide COMMIT): kSidecarDead then; a decision made first wins (kCommit or kAbort).
  AwaitOutcome AwaitDecision(uint64_t sync_id, std::chrono::nanoseconds timeout) const;

  // ----------------------------------------------------------------------- sidecar side
  // True while this process is the segment's sidecar: it created or adopted the segment and no
  // later sidecar has taken over (e.g. after this one was stalled past the stale threshold).
  bool IsCurrentSidecar() const;
  // Hands out the next sync id (> every id handed out under this segment; never 0).
  uint64_t AllocateSyncId();
  // Decides `sync_id` (the CAS of `decided`), release-stores commit_sync_id or abort_sync_id and
  // wakes every waiter. FailedPrecondition if sync_id is 0, was already decided the other way
  // (for COMMIT: also by a rank that judged this sidecar dead and decided ABORT), a newer sync
  // was decided, or this process is no longer the current sidecar.
  Status DecideCommit(uint64_t sync_id);
  Status DecideAbort(uint64_t sync_id);

  // Snapshots of the ACTIVE slots, in slot order.
  std::vector<RankInfo> ActiveRanks() const;
  // The sidecar's ring ends for `info`'s slot. FailedPrecondition if the slot is no longer the
  // incarnation `info` describes; DataLoss if its rings are corrupt.
  StatusOr<RankChannel> OpenChannel(const RankInfo& info);
  // True while the slot still holds the incarnation of `info`.
  bool IsCurrent(const RankInfo& info) const;
  // The liveness of `info`'s owner, by the rules of shm/PROTOCOL.md §5 (liveness token
  // released; in this PID namespace also process gone, a zombie or pid reused; heartbeat stale:
  // stopped or wedged), valid for an owner in any PID namespace; kProcessGone also when the
  // slot no longer holds that incarnation.
  PeerState CheckRank(const RankInfo& info) const;
  // Returns every REGISTERING or ACTIVE slot whose owner is dead (process gone, or ACTIVE with
  // a stale heartbeat) to FREE and reports what they held. Safe to run concurrently with
  // registrations.
  std::vector<RankInfo> ReclaimDead();

  const std::string& name() const { return segment_.name(); }
  uint32_t max_ranks() const { return header_->max_ranks; }
  const ControlHeader& header() const { return *header_; }
  // Size in bytes of a control segment with these options (0 if they are invalid).
  static uint64_t SegmentBytes(const ControlBlockOptions& options);

 private:
  ControlBlock() = default;

  RankSlot* slot(uint32_t index) const { return &slots_[index]; }
  bool OwnerDead(const RankSlot& slot, const SlotWord& word) const;
  bool TryFree(RankSlot& slot, uint64_t word);
  Status InitializeLayout(const ControlBlockOptions& options, uint64_t first_generation);
  Status ValidateLayout() const;
  Status Adopt();
  Status CheckMayDecide(uint64_t sync_id) const;
  Status Decide(uint64_t sync_id, bool commit);
  Status BecomeSidecar();
  // Starts the sidecar heartbeat, beating while this process is the current sidecar.
  void StartSidecarHeartbeat(std::chrono::nanoseconds period);
  std::span<uint8_t> RingBytesAt(uint64_t offset, uint64_t capacity) const;
  bool Snapshot(uint32_t index, RankInfo* info) const;

  Segment segment_;
  ControlHeader* header_ = nullptr;
  RankSlot* slots_ = nullptr;
  LivenessOptions liveness_;
  AttachOptions attach_options_;
  ControlBlockOptions create_options_;
  bool is_sidecar_ = false;
  uint64_t my_generation_ = 0;  // the generation this process made when it became sidecar
  std::unique_ptr<HeartbeatThread> heartbeat_;
};

}  // namespace deltakv::shm
