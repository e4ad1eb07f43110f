// SpscRing: a lock-free single-producer/single-consumer ring of variable-length messages that
// lives in shared memory at an offset inside a segment (layout: shm/PROTOCOL.md §3).
//
// The ring is a 192-byte RingHeader followed by `capacity` data bytes (a power of two). Each
// message is a record {u32 length, u32 ~length, payload, zero padding to 8 bytes}; records are
// written at 8-aligned positions and may wrap around the end of the data area (the copy is
// split in two), so every byte of capacity is usable.
//
// Invariants (positions are byte counts that only grow; the data index is position & (cap-1)):
//   * `tail` is written only by the producer, `head` only by the consumer.
//   * head <= tail <= head + capacity, both multiples of 8.
//   * The bytes in [head, tail) hold complete records; the producer never writes there, the
//     consumer never reads outside it.
// Memory ordering:
//   * The producer writes a record's bytes and then release-stores `tail`; the consumer
//     acquire-loads `tail` before reading the bytes, so it never sees a partial record.
//   * The consumer copies a record out and then release-stores `head`; the producer
//     acquire-loads `head` before overwriting the space, so it never clobbers unread bytes.
//   * Each side caches the other's position and reloads it only when the cached value says the
//     ring is full (producer) or empty (consumer).
// Sleeping: a consumer that finds the ring empty reads `data_seq`, sets `consumer_waiting`,
// issues a seq_cst fence and checks `tail` again before FutexWait(data_seq). The producer
// release-stores `tail`, issues a seq_cst fence and, only if `consumer_waiting` is set, bumps
// `data_seq` and wakes it. The two fences guarantee that either the consumer sees the new tail
// or the producer sees the flag, so no wake-up is lost and an idle ring costs no syscalls.
// Blocking Push mirrors this with `producer_waiting` / `space_seq`.
//
// Crashes: there is no lock. A producer that dies mid-push never advanced `tail`, so its partial
// record is invisible; a consumer that dies mid-pop never advanced `head`, so the record is
// delivered again to the next consumer (at-least-once for that one record). Waits always take a
// timeout; callers combine them with a liveness check of the peer (shm/liveness.h). Every
// length and position read from the ring is checked: a corrupt ring yields DataLoss, never a
// crash or an out-of-bounds access.
//
// Thread-safety: at most one producer object and one consumer object per ring at a time, each
// used by one thread at a time. They may live in different processes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "shm/segment.h"

namespace deltakv::shm {

inline constexpr uint64_t kRingMagic = MagicFromText("DKVRING1");

struct RingHeader {
  // Cache line 0: written once by Initialize.
  uint64_t magic;           // kRingMagic
  uint32_t layout_version;  // kLayoutVersion
  uint32_t header_size;     // sizeof(RingHeader) == 192
  uint64_t capacity;        // data bytes after the header; a power of two >= 64
  uint32_t max_message;     // largest payload accepted, <= capacity - 8
  uint32_t reserved0;       // zero
  uint8_t reserved1[32];    // zero
  // Cache line 1: written by the producer.
  std::atomic<uint64_t> tail;              // bytes ever written
  std::atomic<uint32_t> data_seq;          // futex word; bumped to wake the consumer
  std::atomic<uint32_t> producer_waiting;  // 1 while the producer sleeps for space
  uint8_t reserved2[48];
  // Cache line 2: written by the consumer.
  std::atomic<uint64_t> head;              // bytes ever consumed
  std::atomic<uint32_t> space_seq;         // futex word; bumped to wake the producer
  std::atomic<uint32_t> consumer_waiting;  // 1 while the consumer sleeps for data
  uint8_t reserved3[48];
};
static_assert(sizeof(RingHeader) == 192);
static_assert(offsetof(RingHeader, capacity) == 16);
static_assert(offsetof(RingHeader, max_message) == 24);
static_assert(offsetof(RingHeader, tail) == 64);
static_assert(offsetof(RingHeader, data_seq) == 72);
static_assert(offsetof(RingHeader, producer_waiting) == 76);
static_assert(offsetof(RingHeader, head) == 128);
static_assert(offsetof(RingHeader, space_seq) == 136);
static_assert(offsetof(RingHeader, consumer_waiting) == 140);

inline constexpr uint64_t kRingRecordHeaderBytes = 8;

// Bytes a ring with `capacity` data bytes occupies (header + data).
constexpr uint64_t RingBytes(uint64_t capacity) { return sizeof(RingHeader) + capacity; }

// Lays out an empty ring in `bytes` (which must hold RingBytes(capacity) and be 64-aligned).
// InvalidArgument if capacity is not a power of two in [64, 2^40], max_message is 0 or larger
// than capacity - 8, or the span is too small or misaligned.
// REQUIRES: nobody else is using the ring (a fresh segment, or a slot being re-claimed).
Status InitializeRing(std::span<uint8_t> bytes, uint64_t capacity, uint32_t max_message);

// Checks the header of the ring at the start of `bytes`: magic, version, header size,
// capacity and max_message, and that it fits. DataLoss / FailedPrecondition otherwise.
Status ValidateRing(std::span<const uint8_t> bytes);

// The producing end. Cheap to create; holds a cached copy of `head`.
class SpscRingProducer {
 public:
  SpscRingProducer() = default;
  // Validates the ring at the start of `bytes` (see ValidateRing).
  static StatusOr<SpscRingProducer> Attach(std::span<uint8_t> bytes);

  // Appends one message. OK; ResourceExhausted when there is no room now; InvalidArgument if
  // the payload exceeds max_message; DataLoss if the ring's positions are corrupt. On failure
  // the ring is unchanged.
  Status TryPush(std::span<const uint8_t> payload);
  // As TryPush, but sleeps (futex) up to `timeout` for room. ResourceExhausted on timeout.
  Status Push(std::span<const uint8_t> payload, std::chrono::nanoseconds timeout);

  uint32_t max_message() const { return max_message_; }
  uint64_t capacity() const { return capacity_; }

 private:
  void WakeConsumerIfWaiting();

  RingHeader* header_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t capacity_ = 0;
  uint32_t max_message_ = 0;
  uint64_t cached_head_ = 0;
};

// The consuming end. Cheap to create; holds a cached copy of `tail`.
class SpscRingConsumer {
 public:
  SpscRingConsumer() = default;
  static StatusOr<SpscRingConsumer> Attach(std::span<uint8_t> bytes);

  // Moves the oldest message into *out (resized to its length). true if a message was
  // popped, false if the ring is empty; DataLoss if the ring is corrupt (nothing consumed).
  StatusOr<bool> TryPop(std::vector<uint8_t>* out);
  // As TryPop, but sleeps (futex) up to `timeout` for a message; false on timeout.
  StatusOr<bool> Pop(std::vector<uint8_t>* out, std::chrono::nanoseconds timeout);

  uint32_t max_message() const { return max_message_; }
  uint64_t capacity() const { return capacity_; }

 private:
  void WakeProducerIfWaiting();

  RingHeader* header_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t capacity_ = 0;
  uint32_t max_message_ = 0;
  uint64_t cached_tail_ = 0;
};

}  // namespace deltakv::shm
