// Messages: the codec for the sync-protocol messages carried on the control block's rings.
//
// A message is a 16-byte header {u32 type, u32 payload_length, u64 sync_id} followed by
// `payload_length` payload bytes, all integers little-endian (shm/PROTOCOL.md §6). The codec is
// explicit about byte order (it never memcpy's structs) and treats its input as hostile:
// every length, count, enum value and reserved field is checked, and bad input yields
// InvalidArgument naming the field, never a crash or an over-read.
//
// Message carries the payload as bytes so new types can be added without touching the codec;
// typed helpers build and parse the payloads this version defines.
//
// Thread-safety: pure functions on values.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace deltakv::shm {

enum class MessageType : uint32_t {
  kPing = 1,       // either way: u64 nonce
  kPong = 2,       // reply to kPing: the same u64 nonce
  kPlan = 3,       // sidecar → rank: a plan arena to stage (PlanRef)
  kStaged = 4,     // rank → sidecar: staged; per-tensor partial Adler sums (StagedReport)
  kCommit = 5,     // sidecar → rank: the decision is COMMIT (also in the control block); empty
  kAbort = 6,      // sidecar → rank: the decision is ABORT; reason text
  kCommitted = 7,  // rank → sidecar: the sync is live (CommittedReport)
  kAborted = 8,    // rank → sidecar: staged data dropped; optional text
  kError = 9,      // either way: the sync failed on this side; text
  kVerify = 10,    // sidecar → rank: checksum every registered tensor (VerifyRequest)
  kVerified = 11,  // rank → sidecar: the live checksums' partial sums (VerifiedReport)
};
std::string_view MessageTypeName(MessageType type);

inline constexpr size_t kMessageHeaderBytes = 16;
// Largest payload the codec accepts (rings may be configured smaller).
inline constexpr uint32_t kMaxMessagePayload = 1u << 20;
// Longest text in kAbort / kAborted / kError.
inline constexpr uint32_t kMaxMessageText = 4096;

struct Message {
  MessageType type = MessageType::kPing;
  uint64_t sync_id = 0;
  std::vector<uint8_t> payload;
};

// Encodes `message`. InvalidArgument if its payload does not satisfy its type's rules (the
// same checks DecodeMessage applies), so whatever encodes also decodes.
StatusOr<std::vector<uint8_t>> EncodeMessage(const Message& message);
// Decodes one whole message: `bytes` must be exactly header + payload. InvalidArgument for a
// short buffer, an unknown type, a length that disagrees with the buffer or exceeds
// kMaxMessagePayload, or a payload that breaks its type's rules.
StatusOr<Message> DecodeMessage(std::span<const uint8_t> bytes);
// The per-type payload rules, on their own.
Status ValidatePayload(MessageType type, std::span<const uint8_t> payload);

// ----------------------------------------------------------------------------- typed payloads

// kPlan: {u64 generation, u32 name_length, u32 flags, name bytes}. The name follows
// Segment::ValidateName. flags bit 0 (kPlanMore): more parts of this rank's plan follow; a
// PLAN without it carries the last part. Other flag bits must be zero.
inline constexpr uint32_t kPlanMore = 1;
struct PlanRef {
  std::string arena_name;
  uint64_t generation = 0;
  uint32_t flags = 0;
  bool more() const { return (flags & kPlanMore) != 0; }
};
StatusOr<Message> MakePlan(uint64_t sync_id, const PlanRef& plan);
StatusOr<PlanRef> ParsePlan(const Message& message);

// kStaged: {u32 entry_count, u32 part_index, u32 part_count, u32 reserved=0,
//           u64 changed_bytes, entry_count × StagedEntry}. A report too big for one message is
// split into parts [0, part_count); changed_bytes and entries are per part.
struct StagedEntry {
  // flags
  static constexpr uint32_t kFullChecksum = 1;  // s1/s2 are the full Adler-32 halves of the
                                                // tensor's new bytes (small tensors)
  static constexpr uint32_t kKnownFlags = kFullChecksum;

  uint32_t tensor_index = 0;
  uint32_t s1 = 0;  // < 65521
  uint32_t s2 = 0;  // < 65521
  uint32_t flags = 0;

  friend bool operator==(const StagedEntry&, const StagedEntry&) = default;
};
inline constexpr size_t kStagedHeaderBytes = 24;
inline constexpr size_t kStagedEntryBytes = 16;
// Most entries one kStaged message can carry.
inline constexpr size_t kMaxStagedEntries =
    (kMaxMessagePayload - kStagedHeaderBytes) / kStagedEntryBytes;

struct StagedReport {
  uint32_t part_index = 0;
  uint32_t part_count = 1;
  uint64_t changed_bytes = 0;
  std::vector<StagedEntry> entries;
};
StatusOr<Message> MakeStaged(uint64_t sync_id, const StagedReport& report);
StatusOr<StagedReport> ParseStaged(const Message& message);

// kVerify: {u32 flags, u32 reserved = 0, u64 rate_bytes_per_s}. The rank reads every byte of
// every tensor it registered and answers with kVerified under the same sync_id (a job id from
// the same sequence as sync ids). flags bit 0 (kVerifyScrub): a background scrub (the rank may
// yield between chunks); other bits zero. rate_bytes_per_s: the most bytes per second the rank
// reads (0 = as fast as it can).
inline constexpr uint32_t kVerifyScrub = 1;
inline constexpr size_t kVerifyPayloadBytes = 16;
struct VerifyRequest {
  uint32_t flags = 0;
  uint64_t rate_bytes_per_s = 0;
};
Message MakeVerify(uint64_t job_id, const VerifyRequest& request);
StatusOr<VerifyRequest> ParseVerify(const Message& message);

// kVerified: the kStaged layout (parts, entries of 16 bytes) with `changed_bytes` holding the
// bytes the rank read, and entry flags naming what the sums cover (shm/PROTOCOL.md §9.4):
//   kind (bits 0-1) 0 kOwned:      the rank's bytes at the canonical positions it owns, as sums
//                                  against zero bytes (they add across ranks to the tensor's
//                                  Adler-32);
//                   1 kReplica:    the rank's bytes at the positions it holds but does not own;
//                   2 kReplicaRef: the owner's bytes at the positions rank `holder` (bits 16-31)
//                                  holds but does not own (what that rank's kReplica must be);
//   bits 2-15 zero; bits 16-31 the holder rank (kReplicaRef only, else zero).
struct VerifiedEntry {
  static constexpr uint32_t kOwned = 0;
  static constexpr uint32_t kReplica = 1;
  static constexpr uint32_t kReplicaRef = 2;
  static uint32_t Flags(uint32_t kind, uint32_t holder = 0) { return kind | (holder << 16); }
  static uint32_t Kind(uint32_t flags) { return flags & 3u; }
  static uint32_t Holder(uint32_t flags) { return flags >> 16; }
};
StatusOr<Message> MakeVerified(uint64_t job_id, const StagedReport& report);
StatusOr<StagedReport> ParseVerified(const Message& message);

// kCommitted: {u64 live_version, u64 pause_us} and, in the 32-byte form, {i64
// pause_start_unix_ns, i64 resume_unix_ns}: the wall clock (CLOCK_REALTIME) when the rank paused
// and resumed. ParseCommitted accepts both forms; the 16-byte one leaves the times 0 (unknown).
struct CommittedReport {
  uint64_t live_version = 0;
  uint64_t pause_us = 0;
  int64_t pause_start_unix_ns = 0;
  int64_t resume_unix_ns = 0;
};
Message MakeCommitted(uint64_t sync_id, const CommittedReport& report);
StatusOr<CommittedReport> ParseCommitted(const Message& message);

// kAbort, kAborted, kError: text bytes (UTF-8 by convention, not checked), at most
// kMaxMessageText of them (MakeText cuts longer text; DecodeMessage rejects it).
// InvalidArgument if `type` is not one of the three.
StatusOr<Message> MakeText(MessageType type, uint64_t sync_id, std::string_view text);
inline StatusOr<Message> MakeError(uint64_t sync_id, std::string_view text) {
  return MakeText(MessageType::kError, sync_id, text);
}
StatusOr<std::string> ParseText(const Message& message);

// kCommit: empty payload.
Message MakeCommit(uint64_t sync_id);
// kPing / kPong: {u64 nonce}; sync_id 0.
Message MakePing(uint64_t nonce);
Message MakePong(uint64_t nonce);
StatusOr<uint64_t> ParseNonce(const Message& message);

}  // namespace deltakv::shm
