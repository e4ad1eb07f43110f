// WritePlan: the per-rank list of byte changes the sidecar hands to an engine rank for one
// sync, laid out in a flat buffer (a shared-memory plan arena).
//
// Layout (all integers little-endian, every record 8-byte aligned):
//   PlanHeader   {magic "DKVPLAN1", u32 version (1 or 2), u32 tensor_count, u64 record_count
//                 (change records), u64 bytes_used (whole plan), u64 reserved}
//   PlanTensor[tensor_count]  {u32 rank_tensor (index in the rank's registered tensors),
//                              u32 flags, u64 canonical_length, u32 parent_adler32,
//                              u32 adler32}
//   then the records, which differ by version.
//
// Version 1: every record is a change record
//   PlanRecord {u32 tensor (index into PlanTensor[]), u32 length, u64 local_offset,
//               u64 canonical_offset, u32 flags (bit 0: owner), u32 reserved}
//   followed by `length` XOR bytes, padded with zeros to a multiple of 8 (32 bytes of header
//   per record).
//
// Version 2 (compact; the sidecar writes it): each record starts with a u64 word `h` whose low
// two bits give its kind:
//   0  short change: bit 2 owner, bits 3-8 length - 1 (1 to 64 bytes), bits 9-63 local_offset
//      (below 2^55); then the XOR bytes padded to a multiple of 8 (a 1-8 byte change takes 16
//      bytes);
//   1  tensor: bits 2-31 zero, bits 32-63 the tensor (index into PlanTensor[]); then a u64
//      `shift`. It names the tensor of the change records after it, whose canonical_offset is
//      local_offset + shift (modulo 2^64); a change record before the first tensor record is
//      invalid;
//   2  long change: bit 2 owner, bits 3-31 zero, bits 32-63 length (at least 1); then a u64
//      local_offset, then the XOR bytes padded to a multiple of 8;
//   3  invalid.
// Both versions are read into the same PlanRecord (reserved 0, flags = the owner bit), so a
// rank's code does not depend on the version.
//
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
// Versions: 1, the writer's default, and 2, the compact records the sidecar writes. The reader
// takes both.
inline constexpr uint32_t kPlanVersion = 1;
inline constexpr uint32_t kPlanVersionCompact = 2;
// Version 2's record kinds (the low two bits of a record's first word) and limits.
inline constexpr uint64_t kPlanKindShort = 0;
inline constexpr uint64_t kPlanKindTensor = 1;
inline constexpr uint64_t kPlanKindLong = 2;
inline constexpr uint64_t kPlanShortMaxLength = 64;
inline constexpr uint64_t kPlanShortOffsetLimit = uint64_t{1} << 55;  // local_offset below it
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

// Appends records into a caller-provided buffer (a mapped arena), in plan version `version`
// (kPlanVersion or kPlanVersionCompact). ResourceExhausted when the buffer is full.
class WritePlanWriter {
 public:
  // REQUIRES: buffer is 8-byte aligned and outlives the writer. An unknown version is an
  // InvalidArgument status().
  WritePlanWriter(std::span<uint8_t> buffer, std::vector<PlanTensor> tensors,
                  uint32_t version = kPlanVersion);
  // A writer of records only, for a plan of `tensor_count` tensors: no header or table (the
  // records start at the buffer's first byte and Finish fails), to be appended to a plan by
  // AppendFrom or replayed by ForEachRecorded. Records may be prepared so on other threads.
  static WritePlanWriter RecordsOnly(std::span<uint8_t> buffer, uint32_t tensor_count,
                                     uint32_t version = kPlanVersionCompact);
  Status status() const { return status_; }
  uint32_t version() const { return version_; }
  // The records appended so far (for a RecordsOnly writer, all its bytes).
  std::span<const uint8_t> records() const {
    return std::span<const uint8_t>(buf_).subspan(begin_, pos_ - begin_);
  }
  // Appends every record of `source` (another writer of the same version and tensor count,
  // e.g. a RecordsOnly one), as the Add calls that made them would have, in one copy: the
  // records, their count, the lines they touch (CountLines) and, in version 2, the current
  // tensor record. False, having written nothing, when they do not all fit, the versions or
  // tensor counts differ, or either writer has failed.
  bool AppendFrom(const WritePlanWriter& source);
  // Calls fn(tensor, local_offset, canonical_offset, std::span<const uint8_t> bytes, owner) ->
  // Status for each change record of `records` (the bytes a writer of `version` appended, as
  // records() gives them), in order; the first error is returned. InvalidArgument for bytes
  // that are not whole records.
  template <typename F>
  static Status ForEachRecorded(std::span<const uint8_t> records, uint32_t version, F&& fn);
  // Appends one run; runs longer than 2^31 bytes are split.
  Status Add(uint32_t tensor, uint64_t local_offset, uint64_t canonical_offset,
             std::span<const uint8_t> xor_bytes, bool owner);
  // Add for a run of 1 to kShortBytes bytes that fits in the buffer (most runs of a sparse
  // delta), with no Status and no call. Returns false, having written nothing, when it does not
  // apply (a longer or empty run, no room, a bad tensor, an earlier error, a version 2 offset of
  // 2^55 or more): call Add then.
  static constexpr size_t kShortBytes = 64;
  // From now on, counts into *touched the 64-byte lines of local bytes that each appended
  // record covers, a line that its tensor's previous record ended in counted once.
  // last_line[t] is 1 + the last line counted for tensor t (0: none): one entry per tensor,
  // kept by the caller across writers (the parts of one rank's plan). Both must outlive the
  // writer.
  void CountLines(uint64_t* last_line, uint64_t* touched) {
    last_line_ = last_line;
    touched_ = touched;
  }
  static_assert(kShortBytes <= kPlanShortMaxLength, "a short run fits a version 2 short record");
  [[gnu::always_inline]] bool TryAddShort(uint32_t tensor, uint64_t local_offset,
                                          uint64_t canonical_offset, std::span<const uint8_t> bytes,
                                          bool owner) {
    const size_t n = bytes.size();
    if (n - 1 >= kShortBytes || tensor >= tensor_count_ || pos_ > buf_.size() || !status_.ok()) {
      return false;
    }
    // Header words are stored straight into the buffer (a record built on the stack and
    // copied would be read back before its field stores retire), then the bytes a word at a
    // time, the last word with its zero padding.
    uint8_t* out = buf_.data() + pos_;
    uint64_t need;
    if (version_ == kPlanVersionCompact) {
      const uint64_t shift = canonical_offset - local_offset;
      const bool switch_tensor = tensor != tensor_ || shift != shift_;
      need = 8 + Align8(n) + (switch_tensor ? 16 : 0);
      if (buf_.size() - pos_ < need || local_offset >= kPlanShortOffsetLimit) return false;
      if (switch_tensor) out = PutTensorRecord(out, tensor, shift);
      StoreLE64(out, ShortWord(n, local_offset, owner));
      out += 8;
    } else {
      need = RecordBytes(n);
      if (buf_.size() - pos_ < need) return false;
      StoreLE64(out, uint64_t{tensor} | uint64_t{n} << 32);  // tensor, length
      StoreLE64(out + 8, local_offset);
      StoreLE64(out + 16, canonical_offset);
      StoreLE64(out + 24, owner ? kPlanRecordOwner : 0u);  // flags, reserved
      out += sizeof(PlanRecord);
    }
    size_t k = 0;
    for (; k + 8 < n; k += 8) StoreLE64(out + k, LoadLE64(bytes.data() + k));
    StoreLE64(out + k, LoadShortLE(bytes.data() + k, n - k));
    pos_ += need;
    ++records_;
    CountRecordLines(tensor, local_offset, n);
    return true;
  }
  // Writes the header; returns the bytes used.
  StatusOr<uint64_t> Finish();
  uint64_t record_count() const { return records_; }
  // Buffer bytes still free; a run of n <= 2^31 bytes needs at most RecordBytes(n) of them
  // (Add splits longer runs into records of at most 2^31 bytes, each with its own header;
  // exactly RecordBytes(n) in version 1; in version 2 a short record takes 8 + the padded length, a
  // long one 16 + the padded length, and either 16 more when it starts a new tensor record).
  uint64_t remaining() const { return pos_ > buf_.size() ? 0 : buf_.size() - pos_; }
  // The buffer's size.
  uint64_t capacity() const { return buf_.size(); }
  static constexpr uint64_t RecordBytes(uint64_t n) { return kMaxRecordOverhead + Align8(n); }
  // The longest record: Add splits longer runs.
  static constexpr uint64_t kMaxRecordLength = uint64_t{1} << 31;
  // The most bytes a record takes besides its padded data, in either version.
  static constexpr uint64_t kMaxRecordOverhead = sizeof(PlanRecord);
  // Bytes the header and a table of `tensors` entries take before the first record.
  static constexpr uint64_t FixedBytes(uint64_t tensors) {
    return sizeof(PlanHeader) + tensors * sizeof(PlanTensor);
  }

 private:
  static constexpr uint64_t Align8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }
  // Version 2: a change record's owner bit, and the first word of a short record.
  static constexpr uint64_t kOwnerBit = 4;
  static constexpr uint64_t ShortWord(uint64_t n, uint64_t local_offset, bool owner) {
    return kPlanKindShort | (owner ? kOwnerBit : 0) | (n - 1) << 3 | local_offset << 9;
  }
  // The lines of a record of `n` bytes at `local_offset` of `tensor`, if CountLines asked.
  // A RecordsOnly writer keeps the same count per run of records of one tensor (LineSpan),
  // for AppendFrom to carry over without reading the records again.
  void CountRecordLines(uint32_t tensor, uint64_t local_offset, uint64_t n) {
    const uint64_t first = local_offset / 64, last = (local_offset + n - 1) / 64;
    if (last_line_ != nullptr) {
      *touched_ += last - first + 1 - (last_line_[tensor] == first + 1 ? 1 : 0);
      last_line_[tensor] = last + 1;
    } else if (begin_ == 0) {
      if (spans_.empty() || spans_.back().tensor != tensor) [[unlikely]] {
        spans_.push_back({tensor, first, last, last - first + 1});
      } else {
        LineSpan& span = spans_.back();
        span.touched += last - first + 1 - (span.last == first ? 1 : 0);
        span.last = last;
      }
    }
  }
  // Records of one tensor in a row: their first record's first line, their last record's last
  // line, and the lines they touch, one that a record shares with the one before it counted once.
  struct LineSpan {
    uint32_t tensor;
    uint64_t first;
    uint64_t last;
    uint64_t touched;
  };
  // Version 2: writes a tensor record at `out`, makes it the current one, returns the end.
  uint8_t* PutTensorRecord(uint8_t* out, uint32_t tensor, uint64_t shift) {
    StoreLE64(out, kPlanKindTensor | uint64_t{tensor} << 32);
    StoreLE64(out + 8, shift);
    tensor_ = tensor;
    shift_ = shift;
    return out + 16;
  }
  WritePlanWriter(std::span<uint8_t> buffer, uint32_t tensor_count, uint32_t version);
  // The next record of `records` from `at` (advanced past it): false at the end; a change
  // record's fields in *rec and its bytes in *bytes; tensor records only update *tensor and
  // *shift. InvalidArgument status for a truncated or invalid record.
  static Status NextRecorded(std::span<const uint8_t> records, uint32_t version, uint64_t* at,
                             uint32_t* tensor, uint64_t* shift, PlanRecord* rec,
                             std::span<const uint8_t>* bytes, bool* more);

  std::span<uint8_t> buf_;
  std::vector<PlanTensor> tensors_;
  uint32_t tensor_count_ = 0;  // tensors_.size(), or a RecordsOnly writer's count
  uint32_t version_;
  uint64_t begin_ = 0;  // where the records start: after the table, or 0 (RecordsOnly)
  uint64_t pos_ = 0;
  uint64_t records_ = 0;
  // Version 2: the tensor and shift of the last tensor record (none yet: an impossible tensor).
  uint32_t tensor_ = UINT32_MAX;
  uint64_t shift_ = 0;
  uint64_t* last_line_ = nullptr;  // CountLines' arrays, if it was called
  uint64_t* touched_ = nullptr;
  std::vector<LineSpan> spans_;  // a RecordsOnly writer's line counts
  Status status_;
};

template <typename F>
Status WritePlanWriter::ForEachRecorded(std::span<const uint8_t> records, uint32_t version,
                                        F&& fn) {
  uint64_t at = 0, shift = 0;
  uint32_t tensor = UINT32_MAX;
  for (;;) {
    PlanRecord rec;
    std::span<const uint8_t> bytes;
    bool more = false;
    RETURN_IF_ERROR(NextRecorded(records, version, &at, &tensor, &shift, &rec, &bytes, &more));
    if (!more) return Status::Ok();
    RETURN_IF_ERROR(fn(rec.tensor, rec.local_offset, rec.canonical_offset, bytes,
                       (rec.flags & kPlanRecordOwner) != 0));
  }
}

// A validated view of a plan. Record data spans point into the buffer.
class WritePlanReader {
 public:
  // Validates the header and tensor table, and walks all records once to validate them.
  static StatusOr<WritePlanReader> Open(std::span<uint8_t> buffer);
  // Validates the header and tensor table only, for a caller that walks the records once (a
  // rank staging a part): ForEach checks each record as it reaches it and fails with the error
  // Open would have returned for that plan, the record count included. Until such a walk has
  // succeeded, record_count() is the header's unconfirmed claim and data_bytes() an upper bound
  // (the bytes after the tensor table).
  static StatusOr<WritePlanReader> OpenLazy(std::span<uint8_t> buffer);
  // This plan with exact counts: a copy after Open, Open's walk of the same buffer (and its
  // errors) after OpenLazy.
  StatusOr<WritePlanReader> Counted() const;
  std::span<const PlanTensor> tensors() const { return tensors_; }
  uint64_t record_count() const { return header_.record_count; }
  // Sum of the records' lengths (the plan's XOR bytes, padding excluded), counted by Open; an
  // upper bound after OpenLazy.
  uint64_t data_bytes() const { return data_bytes_; }
  // Calls fn(const PlanRecord&, std::span<uint8_t>) -> Status for each change record (version
  // 2's tensor records are not passed) in order with a
  // mutable view of its bytes (XOR bytes before staging, new bytes after); a non-OK Status
  // stops the walk and is returned. Every record is checked again as it is reached, and a walk
  // that finds another number of change records than the header's fails with InvalidArgument
  // once it has passed them all. Inline, so a walk over millions of records costs no call per
  // record.
  template <typename F>
  Status ForEach(F&& fn) const;

 private:
  enum class RecordError : uint8_t {  // in the order of BadRecord's reasons
    kTruncated,
    kTensor,
    kCanonicalRange,
    kData,
    kKind,      // version 2: kind 3, or reserved bits set
    kNoTensor,  // version 2: a change record before any tensor record
    kLength,    // version 2: a long record of length 0
  };
  template <typename F>
  Status ForEachV1(F& fn) const;
  template <typename F>
  Status ForEachV2(F& fn) const;
  // InvalidArgument naming record `index` (built only when a record is bad).
  static Status BadRecord(uint64_t index, RecordError what);
  // OK if a walk found `seen` change records, as the header says; else InvalidArgument.
  Status CheckCount(uint64_t seen) const;
  // Open and OpenLazy: the header and tensor table.
  static StatusOr<WritePlanReader> OpenHeader(std::span<uint8_t> buffer);

  std::span<uint8_t> buf_;
  PlanHeader header_{};
  std::span<const PlanTensor> tensors_;
  uint64_t records_begin_ = 0;
  uint64_t data_bytes_ = 0;
  bool counted_ = false;  // opened with Open: record_count() and data_bytes() are exact
};

template <typename F>
Status WritePlanReader::ForEach(F&& fn) const {
  return header_.version == kPlanVersionCompact ? ForEachV2(fn) : ForEachV1(fn);
}

template <typename F>
Status WritePlanReader::ForEachV1(F& fn) const {
  uint64_t pos = records_begin_;
  const uint64_t end = header_.bytes_used;
  uint8_t* const base = buf_.data();
  uint64_t index = 0;
  for (; pos < end; ++index) {
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
    rec.flags &= kPlanRecordOwner;  // as version 2: the owner bit only
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
  return CheckCount(index);
}

template <typename F>
Status WritePlanReader::ForEachV2(F& fn) const {
  uint64_t pos = records_begin_;
  const uint64_t end = header_.bytes_used;
  uint8_t* const base = buf_.data();
  // The current tensor record's tensor, shift and canonical length (none yet).
  uint32_t tensor = UINT32_MAX;
  uint64_t shift = 0, canonical_length = 0;
  uint64_t index = 0;  // change records so far
  while (pos < end) {
    if (end - pos < 8) return BadRecord(index, RecordError::kTruncated);
    const uint64_t h = LoadLE64(base + pos);
    PlanRecord rec;
    uint64_t head;
    if ((h & 3) == kPlanKindShort) [[likely]] {
      rec.length = static_cast<uint32_t>((h >> 3) & (kPlanShortMaxLength - 1)) + 1;
      rec.local_offset = h >> 9;
      head = 8;
    } else {
      if (end - pos < 16) return BadRecord(index, RecordError::kTruncated);
      const uint64_t second = LoadLE64(base + pos + 8);
      if ((h & 3) == kPlanKindTensor) {
        if ((h & 0xfffffffcull) != 0) return BadRecord(index, RecordError::kKind);
        tensor = static_cast<uint32_t>(h >> 32);
        if (tensor >= tensors_.size()) return BadRecord(index, RecordError::kTensor);
        shift = second;
        canonical_length = tensors_[tensor].canonical_length;
        pos += 16;
        continue;
      }
      if ((h & 3) != kPlanKindLong || (h & 0xfffffff8ull) != 0) {
        return BadRecord(index, RecordError::kKind);
      }
      rec.length = static_cast<uint32_t>(h >> 32);
      if (rec.length == 0) return BadRecord(index, RecordError::kLength);
      rec.local_offset = second;
      head = 16;
    }
    if (tensor == UINT32_MAX) return BadRecord(index, RecordError::kNoTensor);
    rec.tensor = tensor;
    rec.canonical_offset = rec.local_offset + shift;
    rec.flags = static_cast<uint32_t>(h >> 2) & kPlanRecordOwner;
    rec.reserved = 0;
    if (rec.canonical_offset > canonical_length ||
        rec.length > canonical_length - rec.canonical_offset) {
      return BadRecord(index, RecordError::kCanonicalRange);
    }
    const uint64_t need = head + ((uint64_t{rec.length} + 7) & ~uint64_t{7});
    if (need > end - pos) return BadRecord(index, RecordError::kData);
    Status s =
        fn(static_cast<const PlanRecord&>(rec), std::span<uint8_t>(base + pos + head, rec.length));
    if (!s.ok()) return s;
    pos += need;
    ++index;
  }
  return CheckCount(index);
}

}  // namespace deltakv::deltasync
