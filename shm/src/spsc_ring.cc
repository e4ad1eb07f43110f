#include "shm/spsc_ring.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "shm/futex.h"

namespace deltakv::shm {
namespace {

constexpr uint64_t kMinCapacity = 64;
constexpr uint64_t kMaxCapacity = uint64_t{1} << 40;

constexpr uint64_t RoundUp8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }
constexpr uint64_t RecordBytes(uint64_t payload) {
  return kRingRecordHeaderBytes + RoundUp8(payload);
}

bool IsPowerOfTwo(uint64_t n) { return n != 0 && (n & (n - 1)) == 0; }

// Copies `n` bytes into the ring at position `pos`, splitting at the end of the data area.
void CopyIn(uint8_t* data, uint64_t capacity, uint64_t pos, const uint8_t* src, uint64_t n) {
  uint64_t offset = pos & (capacity - 1);
  uint64_t first = std::min(n, capacity - offset);
  if (first != 0) std::memcpy(data + offset, src, first);
  if (n > first) std::memcpy(data, src + first, n - first);
}

void CopyOut(const uint8_t* data, uint64_t capacity, uint64_t pos, uint8_t* dst, uint64_t n) {
  uint64_t offset = pos & (capacity - 1);
  uint64_t first = std::min(n, capacity - offset);
  if (first != 0) std::memcpy(dst, data + offset, first);
  if (n > first) std::memcpy(dst + first, data, n - first);
}

// Sleeps on `seq` (whose value before announcing was `seen`) for up to the time left before
// `deadline`. Returns false when the deadline has passed.
bool SleepUntil(std::atomic<uint32_t>* seq, uint32_t seen,
                std::chrono::steady_clock::time_point deadline) {
  auto left = deadline - std::chrono::steady_clock::now();
  if (left <= std::chrono::nanoseconds::zero()) return false;
  FutexWait(seq, seen, std::chrono::duration_cast<std::chrono::nanoseconds>(left));
  return true;
}

Status CheckRing(const RingHeader* h, size_t available) {
  if (available < sizeof(RingHeader)) {
    return DataLoss("ring: " + std::to_string(available) + " bytes cannot hold its header");
  }
  if (h->magic != kRingMagic) return DataLoss("ring: bad magic");
  if (h->layout_version != kLayoutVersion) {
    return FailedPrecondition("ring: layout version " + std::to_string(h->layout_version) +
                              ", this build speaks " + std::to_string(kLayoutVersion));
  }
  if (h->header_size != sizeof(RingHeader)) {
    return DataLoss("ring: header size " + std::to_string(h->header_size) + ", expected 192");
  }
  if (!IsPowerOfTwo(h->capacity) || h->capacity < kMinCapacity || h->capacity > kMaxCapacity) {
    return DataLoss("ring: capacity " + std::to_string(h->capacity) +
                    " is not a power of two in [64, 2^40]");
  }
  if (h->capacity > available - sizeof(RingHeader)) {
    return DataLoss("ring: capacity " + std::to_string(h->capacity) + " overruns the " +
                    std::to_string(available) + " bytes given");
  }
  if (h->max_message == 0 || RecordBytes(h->max_message) > h->capacity) {
    return DataLoss("ring: max message " + std::to_string(h->max_message) +
                    " does not fit capacity " + std::to_string(h->capacity));
  }
  return Status::Ok();
}

}  // namespace

Status InitializeRing(std::span<uint8_t> bytes, uint64_t capacity, uint32_t max_message) {
  if (!IsPowerOfTwo(capacity) || capacity < kMinCapacity || capacity > kMaxCapacity) {
    return InvalidArgument("ring capacity " + std::to_string(capacity) +
                           " must be a power of two in [64, 2^40]");
  }
  if (max_message == 0 || RecordBytes(max_message) > capacity) {
    return InvalidArgument("ring max message " + std::to_string(max_message) +
                           " must be in [1, capacity - 8]");
  }
  if (bytes.size() < RingBytes(capacity)) {
    return InvalidArgument("ring needs " + std::to_string(RingBytes(capacity)) + " bytes, got " +
                           std::to_string(bytes.size()));
  }
  if (reinterpret_cast<uintptr_t>(bytes.data()) % 64 != 0) {
    return InvalidArgument("ring must start on a 64-byte boundary");
  }
  auto* h = new (bytes.data()) RingHeader{};
  h->magic = kRingMagic;
  h->layout_version = kLayoutVersion;
  h->header_size = sizeof(RingHeader);
  h->capacity = capacity;
  h->max_message = max_message;
  h->tail.store(0, std::memory_order_relaxed);
  h->head.store(0, std::memory_order_relaxed);
  h->data_seq.store(0, std::memory_order_relaxed);
  h->space_seq.store(0, std::memory_order_relaxed);
  h->producer_waiting.store(0, std::memory_order_relaxed);
  h->consumer_waiting.store(0, std::memory_order_relaxed);
  // The data area is not cleared: only bytes in [head, tail) are ever read, and leaving it
  // untouched keeps the pages of idle rings unallocated.
  std::atomic_thread_fence(std::memory_order_release);
  return Status::Ok();
}

Status ValidateRing(std::span<const uint8_t> bytes) {
  if (bytes.size() < sizeof(RingHeader)) return CheckRing(nullptr, bytes.size());
  return CheckRing(reinterpret_cast<const RingHeader*>(bytes.data()), bytes.size());
}

// ---------------------------------------------------------------------------------- producer

StatusOr<SpscRingProducer> SpscRingProducer::Attach(std::span<uint8_t> bytes) {
  RETURN_IF_ERROR(ValidateRing(bytes));
  SpscRingProducer p;
  p.header_ = reinterpret_cast<RingHeader*>(bytes.data());
  p.data_ = bytes.data() + sizeof(RingHeader);
  p.capacity_ = p.header_->capacity;
  p.max_message_ = p.header_->max_message;
  p.cached_head_ = p.header_->head.load(std::memory_order_acquire);
  return p;
}

Status SpscRingProducer::TryPush(std::span<const uint8_t> payload) {
  if (header_ == nullptr) return FailedPrecondition("ring producer is not attached");
  if (payload.size() > max_message_) {
    return InvalidArgument("ring message of " + std::to_string(payload.size()) +
                           " bytes exceeds the maximum " + std::to_string(max_message_));
  }
  const uint64_t need = RecordBytes(payload.size());
  const uint64_t tail = header_->tail.load(std::memory_order_relaxed);  // we are its only writer
  if (tail % 8 != 0) return DataLoss("ring: tail " + std::to_string(tail) + " is not 8-aligned");
  if (tail - cached_head_ + need > capacity_) {
    // Acquire pairs with the consumer's release of head: its reads of the space are done.
    cached_head_ = header_->head.load(std::memory_order_acquire);
    if (cached_head_ > tail || tail - cached_head_ > capacity_ || cached_head_ % 8 != 0) {
      return DataLoss("ring: head " + std::to_string(cached_head_) + " inconsistent with tail " +
                      std::to_string(tail));
    }
    if (tail - cached_head_ + need > capacity_) {
      return ResourceExhausted("ring full: " + std::to_string(tail - cached_head_) + " of " +
                               std::to_string(capacity_) + " bytes in use, need " +
                               std::to_string(need));
    }
  }
  uint8_t record_header[kRingRecordHeaderBytes];
  const auto length = static_cast<uint32_t>(payload.size());
  const uint32_t check = ~length;
  std::memcpy(record_header, &length, 4);
  std::memcpy(record_header + 4, &check, 4);
  CopyIn(data_, capacity_, tail, record_header, sizeof(record_header));
  CopyIn(data_, capacity_, tail + kRingRecordHeaderBytes, payload.data(), payload.size());
  const uint64_t padding = need - kRingRecordHeaderBytes - payload.size();
  if (padding != 0) {
    static constexpr uint8_t kZeros[8] = {};
    CopyIn(data_, capacity_, tail + kRingRecordHeaderBytes + payload.size(), kZeros, padding);
  }
  // Release: the record's bytes are visible before the new tail.
  header_->tail.store(tail + need, std::memory_order_release);
  WakeConsumerIfWaiting();
  return Status::Ok();
}

void SpscRingProducer::WakeConsumerIfWaiting() {
  // Pairs with the fence in SpscRingConsumer::Pop: either it sees our tail or we see its flag.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (header_->consumer_waiting.load(std::memory_order_relaxed) != 0) {
    header_->data_seq.fetch_add(1, std::memory_order_release);
    FutexWake(&header_->data_seq, 1);
  }
}

Status SpscRingProducer::Push(std::span<const uint8_t> payload, std::chrono::nanoseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    Status status = TryPush(payload);
    if (status.code() != StatusCode::kResourceExhausted) return status;
    const uint32_t seen = header_->space_seq.load(std::memory_order_acquire);
    header_->producer_waiting.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    status = TryPush(payload);
    if (status.code() != StatusCode::kResourceExhausted) {
      header_->producer_waiting.store(0, std::memory_order_relaxed);
      return status;
    }
    bool slept = SleepUntil(&header_->space_seq, seen, deadline);
    header_->producer_waiting.store(0, std::memory_order_relaxed);
    if (!slept) return status.WithPrefix("timed out waiting for room");
  }
}

// ---------------------------------------------------------------------------------- consumer

StatusOr<SpscRingConsumer> SpscRingConsumer::Attach(std::span<uint8_t> bytes) {
  RETURN_IF_ERROR(ValidateRing(bytes));
  SpscRingConsumer c;
  c.header_ = reinterpret_cast<RingHeader*>(bytes.data());
  c.data_ = bytes.data() + sizeof(RingHeader);
  c.capacity_ = c.header_->capacity;
  c.max_message_ = c.header_->max_message;
  c.cached_tail_ = c.header_->head.load(std::memory_order_relaxed);  // "empty" until reloaded
  return c;
}

StatusOr<bool> SpscRingConsumer::TryPop(std::vector<uint8_t>* out) {
  if (header_ == nullptr) return FailedPrecondition("ring consumer is not attached");
  const uint64_t head = header_->head.load(std::memory_order_relaxed);  // we are its only writer
  if (head % 8 != 0) return DataLoss("ring: head " + std::to_string(head) + " is not 8-aligned");
  if (cached_tail_ == head || cached_tail_ < head) {
    // Acquire pairs with the producer's release of tail: the record bytes are visible.
    cached_tail_ = header_->tail.load(std::memory_order_acquire);
    if (cached_tail_ < head || cached_tail_ - head > capacity_ || cached_tail_ % 8 != 0) {
      uint64_t bad = cached_tail_;
      cached_tail_ = head;
      return DataLoss("ring: tail " + std::to_string(bad) + " inconsistent with head " +
                      std::to_string(head));
    }
    if (cached_tail_ == head) return false;
  }
  uint8_t record_header[kRingRecordHeaderBytes];
  CopyOut(data_, capacity_, head, record_header, sizeof(record_header));
  uint32_t length = 0;
  uint32_t check = 0;
  std::memcpy(&length, record_header, 4);
  std::memcpy(&check, record_header + 4, 4);
  if (check != ~length) {
    return DataLoss("ring: corrupt record header at position " + std::to_string(head));
  }
  if (length > max_message_ || RecordBytes(length) > cached_tail_ - head) {
    return DataLoss("ring: record of " + std::to_string(length) + " bytes at position " +
                    std::to_string(head) + " overruns the " + std::to_string(cached_tail_ - head) +
                    " bytes written");
  }
  out->resize(length);
  CopyOut(data_, capacity_, head + kRingRecordHeaderBytes, out->data(), length);
  // Release: our reads of the record are done before the producer may reuse the space.
  header_->head.store(head + RecordBytes(length), std::memory_order_release);
  WakeProducerIfWaiting();
  return true;
}

void SpscRingConsumer::WakeProducerIfWaiting() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (header_->producer_waiting.load(std::memory_order_relaxed) != 0) {
    header_->space_seq.fetch_add(1, std::memory_order_release);
    FutexWake(&header_->space_seq, 1);
  }
}

StatusOr<bool> SpscRingConsumer::Pop(std::vector<uint8_t>* out, std::chrono::nanoseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    StatusOr<bool> popped = TryPop(out);
    if (!popped.ok() || *popped) return popped;
    // Announce that we are about to sleep, then look again (see the header comment).
    const uint32_t seen = header_->data_seq.load(std::memory_order_acquire);
    header_->consumer_waiting.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    popped = TryPop(out);
    if (!popped.ok() || *popped) {
      header_->consumer_waiting.store(0, std::memory_order_relaxed);
      return popped;
    }
    bool slept = SleepUntil(&header_->data_seq, seen, deadline);
    header_->consumer_waiting.store(0, std::memory_order_relaxed);
    if (!slept) return false;
  }
}

}  // namespace deltakv::shm
