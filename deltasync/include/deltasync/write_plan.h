// WritePlan: the per-rank list of byte changes the sidecar hands to an engine rank for one
// sync, laid out in a flat buffer (a shared-memory plan arena).
//
// Layout (all integers little-endian, every record 8-byte aligned):
//   PlanHeader   {magic "DKVPLAN1", u32 version, u32 tensor_count, u64 record_count,
//                 u64 bytes_used (whole plan), u64 reserved}
//   PlanTensor[tensor_count]  {u32 rank_tensor (index in the rank's registered tensors),
//                              u32 flags, u64 canonical_length, u32 parent_adler32,
//                              u32 adler32}
//   records: PlanRecord {u32 tensor (index into PlanTensor[]), u32 length, u64 local_offset,
//            u64 canonical_offset, u32 flags (bit 0: owner), u32 reserved}
//            followed by `length` XOR bytes, padded with zeros to a multiple of 8.
// A rank stages a plan by replacing each record's XOR bytes with the new bytes in place.
//
// The reader checks every count, offset and length against the buffer before use and rejects
// bad input with InvalidArgument; it never reads outside the buffer.
//
// Thread-safety: a writer or reader is used by one thread; the buffer must not change while
// a reader walks it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "base/le_bytes.h"
#include "base/status.h"

namespace deltakv::deltasync {

inline constexpr uint64_t kPlanMagic = 0x314e414c50564b44ull;  // "DKVPLAN1"
inline constexpr uint32_t kPlanVersion = 1;
inline constexpr uint32_t kPlanRecordOwner = 1;
inline constexpr uint32_t kPlanTensorFullVerify = 1;  // small tensor: verify a full checksum

struct PlanHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t tensor_count;
  uint64_t record_count;
  uint64_t bytes_used;
  uint64_t reserved;
};
static_assert(sizeof(PlanHeader) == 40);

struct PlanTensor {
  uint32_t rank_tensor;
  uint32_t flags;
  uint64_t canonical_length;
  uint32_t parent_adler32;
  uint32_t adler32;
};
static_assert(sizeof(PlanTensor) == 24);

struct PlanRecord {
  uint32_t tensor;
  uint32_t length;
  uint64_t local_offset;
  uint64_t canonical_offset;
  uint32_t flags;
  uint32_t reserved;
};
static_assert(sizeof(PlanRecord) == 32 && offsetof(PlanRecord, length) == 4 &&
              offsetof(PlanRecord, local_offset) == 8 &&
              offsetof(PlanRecord, canonical_offset) == 16 && offsetof(PlanRecord, flags) == 24);

// Root block of a plan arena (shm/PROTOCOL.md section 9.2), written by the sidecar and read by
// the rank: this header, then the new version id padded to 8 bytes, then the plan (one part of
// the rank's plan: parts are numbered from 0 and each is a complete WritePlan).
struct PlanArenaRoot {
  uint64_t plan_bytes;
  uint32_t version_len;
  uint32_t part_index;
};
static_assert(sizeof(PlanArenaRoot) == 16);

// Bytes from the root block's start to the plan: the header and the padded version id.
inline constexpr uint64_t PlanArenaRootBytes(uint64_t version_len) {
  return sizeof(PlanArenaRoot) + ((version_len + 7) & ~uint64_t{7});
}

// Appends records into a caller-provided buffer (a mapped arena). ResourceExhausted when the
// buffer is full.
class WritePlanWriter {
 public:
  // REQUIRES: buffer is 8-byte aligned and outlives the writer.
  WritePlanWriter(std::span<uint8_t> buffer, std::vector<PlanTensor> tensors);
  Status status() const { return status_; }
  // Appends one run; runs longer than 2^31 bytes are split.
  Status Add(uint32_t tensor, uint64_t local_offset, uint64_t canonical_offset,
             std::span<const uint8_t> xor_bytes, bool owner);
  // Add for a run of 1 to kShortBytes bytes that fits in the buffer (most runs of a sparse
  // delta), with no Status and no call. Returns false, having written nothing, when it does not
  // apply (a longer or empty run, no room, a bad tensor, an earlier error): call Add then.
  static constexpr size_t kShortBytes = 32;
  bool TryAddShort(uint32_t tensor, uint64_t local_offset, uint64_t canonical_offset,
                   std::span<const uint8_t> bytes, bool owner) {
    const size_t n = bytes.size();
    if (n - 1 >= kShortBytes || tensor >= tensors_.size() || pos_ > buf_.size() ||
        buf_.size() - pos_ < RecordBytes(n) || !status_.ok()) {
      return false;
    }
    // The PlanRecord as four little-endian words stored straight into the buffer (a record
    // built on the stack and copied would be read back before its field stores retire), then
    // the bytes a word at a time, the last word with its zero padding.
    uint8_t* out = buf_.data() + pos_;
    StoreLE64(out, uint64_t{tensor} | uint64_t{n} << 32);  // tensor, length
    StoreLE64(out + 8, local_offset);
    StoreLE64(out + 16, canonical_offset);
    StoreLE64(out + 24, owner ? kPlanRecordOwner : 0u);  // flags, reserved
    uint8_t* const data = out + sizeof(PlanRecord);
    size_t k = 0;
    for (; k + 8 < n; k += 8) StoreLE64(data + k, LoadLE64(bytes.data() + k));
    StoreLE64(data + k, LoadShortLE(bytes.data() + k, n - k));
    pos_ += RecordBytes(n);
    ++records_;
    return true;
  }
  // Writes the header; returns the bytes used.
  StatusOr<uint64_t> Finish();
  uint64_t record_count() const { return records_; }
  // Buffer bytes still free; a run of n bytes needs RecordBytes(n) of them.
  uint64_t remaining() const { return pos_ > buf_.size() ? 0 : buf_.size() - pos_; }
  static constexpr uint64_t RecordBytes(uint64_t n) { return sizeof(PlanRecord) + ((n + 7) & ~7ull); }
  // Bytes the header and a table of `tensors` entries take before the first record.
  static constexpr uint64_t FixedBytes(uint64_t tensors) {
    return sizeof(PlanHeader) + tensors * sizeof(PlanTensor);
  }

 private:
  std::span<uint8_t> buf_;
  std::vector<PlanTensor> tensors_;
  uint64_t pos_ = 0;
  uint64_t records_ = 0;
  Status status_;
};

// A validated view of a plan. Record data spans point into the buffer.
class WritePlanReader {
 public:
  // Validates the header and tensor table, and walks all records once to validate them.
  static StatusOr<WritePlanReader> Open(std::span<uint8_t> buffer);
  std::span<const PlanTensor> tensors() const { return tensors_; }
  uint64_t record_count() const { return header_.record_count; }
  // Sum of the records' lengths (the plan's XOR bytes, padding excluded), counted by Open.
  uint64_t data_bytes() const { return data_bytes_; }
  // Calls fn(const PlanRecord&, std::span<uint8_t>) -> Status for each record in order with a
  // mutable view of its bytes (XOR bytes before staging, new bytes after); a non-OK Status
  // stops the walk and is returned. Every record is checked again as it is reached. Inline, so
  // a walk over millions of records costs no call per record.
  template <typename F>
  Status ForEach(F&& fn) const;

 private:
  enum class RecordError : uint8_t { kTruncated, kTensor, kCanonicalRange, kData };
  // InvalidArgument naming record `index` (built only when a record is bad).
  static Status BadRecord(uint64_t index, RecordError what);

  std::span<uint8_t> buf_;
  PlanHeader header_{};
  std::span<const PlanTensor> tensors_;
  uint64_t records_begin_ = 0;
  uint64_t data_bytes_ = 0;
};

template <typename F>
Status WritePlanReader::ForEach(F&& fn) const {
  uint64_t pos = records_begin_;
  const uint64_t end = header_.bytes_used;
  uint8_t* const base = buf_.data();
  for (uint64_t index = 0; pos < end; ++index) {
    if (end - pos < sizeof(PlanRecord)) return BadRecord(index, RecordError::kTruncated);
    // Field by field (the compiler keeps them in registers; one block copy into a stack record
    // read back field by field stalls the loads behind it).
    PlanRecord rec;
    const uint8_t* const at = base + pos;
    std::memcpy(&rec.tensor, at, 4);
    std::memcpy(&rec.length, at + 4, 4);
    std::memcpy(&rec.local_offset, at + 8, 8);
    std::memcpy(&rec.canonical_offset, at + 16, 8);
    std::memcpy(&rec.flags, at + 24, 4);
    rec.reserved = 0;
    if (rec.tensor >= tensors_.size()) return BadRecord(index, RecordError::kTensor);
    const PlanTensor& t = tensors_[rec.tensor];
    if (rec.canonical_offset > t.canonical_length ||
        rec.length > t.canonical_length - rec.canonical_offset) {
      return BadRecord(index, RecordError::kCanonicalRange);
    }
    const uint64_t need = sizeof(PlanRecord) + ((uint64_t{rec.length} + 7) & ~uint64_t{7});
    if (need > end - pos) return BadRecord(index, RecordError::kData);
    Status s = fn(static_cast<const PlanRecord&>(rec),
                  std::span<uint8_t>(base + pos + sizeof(PlanRecord), rec.length));
    if (!s.ok()) return s;
    pos += need;
  }
  return Status::Ok();
}

}  // namespace deltakv::deltasync
