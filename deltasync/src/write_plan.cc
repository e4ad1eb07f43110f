#include "deltasync/write_plan.h"

#include <cstring>
#include <iterator>

namespace deltakv::deltasync {

namespace {}  // namespace

WritePlanWriter::WritePlanWriter(std::span<uint8_t> buffer, std::vector<PlanTensor> tensors,
                                 uint32_t version)
    : buf_(buffer),
      tensors_(std::move(tensors)),
      tensor_count_(static_cast<uint32_t>(tensors_.size())),
      version_(version) {
  pos_ = sizeof(PlanHeader) + tensors_.size() * sizeof(PlanTensor);
  begin_ = pos_;
  if (version_ != kPlanVersion && version_ != kPlanVersionCompact) {
    status_ = InvalidArgument("plan version " + std::to_string(version_) + " is not 1 or 2");
    return;
  }
  if (pos_ > buf_.size()) {
    status_ = ResourceExhausted("plan buffer of " + std::to_string(buf_.size()) +
                                " bytes cannot hold the tensor table");
    return;
  }
  std::memcpy(buf_.data() + sizeof(PlanHeader), tensors_.data(),
              tensors_.size() * sizeof(PlanTensor));
}

Status WritePlanWriter::Add(uint32_t tensor, uint64_t local_offset, uint64_t canonical_offset,
                            std::span<const uint8_t> bytes, bool owner) {
  if (TryAddShort(tensor, local_offset, canonical_offset, bytes, owner)) return Status::Ok();
  if (!status_.ok()) return status_;
  if (tensor >= tensor_count_)
    return InvalidArgument("plan record names tensor " + std::to_string(tensor));
  while (!bytes.empty()) {
    uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(bytes.size(), kMaxRecordLength));
    // Version 2: a tensor record when the tensor or shift changes, then a short or long one.
    const uint64_t shift = canonical_offset - local_offset;
    const bool compact = version_ == kPlanVersionCompact;
    const bool switch_tensor = compact && (tensor != tensor_ || shift != shift_);
    const bool short_record =
        compact && n <= kPlanShortMaxLength && local_offset < kPlanShortOffsetLimit;
    const uint64_t head = !compact ? sizeof(PlanRecord) : short_record ? 8 : 16;
    const uint64_t need = (switch_tensor ? 16 : 0) + head + Align8(n);
    if (pos_ > buf_.size() || need > buf_.size() - pos_) {
      status_ =
          ResourceExhausted("plan buffer of " + std::to_string(buf_.size()) + " bytes is full");
      return status_;
    }
    uint8_t* out = buf_.data() + pos_;
    if (!compact) {
      PlanRecord r{tensor, n, local_offset, canonical_offset, owner ? kPlanRecordOwner : 0u, 0};
      std::memcpy(out, &r, sizeof(r));
    } else {
      if (switch_tensor) out = PutTensorRecord(out, tensor, shift);
      if (short_record) {
        StoreLE64(out, ShortWord(n, local_offset, owner));
      } else {
        StoreLE64(out, kPlanKindLong | (owner ? kOwnerBit : 0) | uint64_t{n} << 32);
        StoreLE64(out + 8, local_offset);
      }
    }
    std::memcpy(out + head, bytes.data(), n);
    std::memset(out + head + n, 0, Align8(n) - n);
    pos_ += need;
    ++records_;
    CountRecordLines(tensor, local_offset, n);
    bytes = bytes.subspan(n);
    local_offset += n;
    canonical_offset += n;
  }
  return Status::Ok();
}

WritePlanWriter::WritePlanWriter(std::span<uint8_t> buffer, uint32_t tensor_count, uint32_t version)
    : buf_(buffer), tensor_count_(tensor_count), version_(version) {
  if (version_ != kPlanVersion && version_ != kPlanVersionCompact) {
    status_ = InvalidArgument("plan version " + std::to_string(version_) + " is not 1 or 2");
  }
}

WritePlanWriter WritePlanWriter::RecordsOnly(std::span<uint8_t> buffer, uint32_t tensor_count,
                                             uint32_t version) {
  return WritePlanWriter(buffer, tensor_count, version);
}

Status WritePlanWriter::NextRecorded(std::span<const uint8_t> records, uint32_t version,
                                     uint64_t* at, uint32_t* tensor, uint64_t* shift,
                                     PlanRecord* rec, std::span<const uint8_t>* bytes, bool* more) {
  const uint64_t size = records.size();
  for (;;) {
    *more = *at < size;
    if (!*more) return Status::Ok();
    if (size - *at < 8) return InvalidArgument("recorded plan records end inside a record");
    const uint8_t* p = records.data() + *at;
    const uint64_t w = LoadLE64(p);
    uint64_t head = 0, length = 0, local = 0;
    bool owner = false;
    if (version == kPlanVersion) {
      if (size - *at < sizeof(PlanRecord)) {
        return InvalidArgument("recorded plan records end inside a record");
      }
      PlanRecord r;
      std::memcpy(&r, p, sizeof(r));
      *tensor = r.tensor;
      length = r.length;
      local = r.local_offset;
      *shift = r.canonical_offset - r.local_offset;
      owner = (r.flags & kPlanRecordOwner) != 0;
      head = sizeof(PlanRecord);
    } else {
      const uint64_t kind = w & 3;
      if (kind == kPlanKindTensor) {
        if (size - *at < 16) return InvalidArgument("recorded plan records end inside a record");
        *tensor = static_cast<uint32_t>(w >> 32);
        *shift = LoadLE64(p + 8);
        *at += 16;
        continue;
      }
      if (*tensor == UINT32_MAX) {
        return InvalidArgument("recorded plan change record before any tensor record");
      }
      owner = (w & kOwnerBit) != 0;
      if (kind == kPlanKindShort) {
        length = ((w >> 3) & 63) + 1;
        local = w >> 9;
        head = 8;
      } else if (kind == kPlanKindLong) {
        if (size - *at < 16) return InvalidArgument("recorded plan records end inside a record");
        length = w >> 32;
        local = LoadLE64(p + 8);
        head = 16;
      } else {
        return InvalidArgument("recorded plan record of invalid kind 3");
      }
    }
    if (length == 0 || Align8(length) > size - *at - head) {
      return InvalidArgument("recorded plan records end inside a record");
    }
    *rec = PlanRecord{*tensor,        static_cast<uint32_t>(length), local,
                      local + *shift, owner ? kPlanRecordOwner : 0u, 0};
    *bytes = records.subspan(*at + head, length);
    *at += head + Align8(length);
    return Status::Ok();
  }
}

bool WritePlanWriter::AppendFrom(const WritePlanWriter& source) {
  if (!status_.ok() || !source.status_.ok() || source.version_ != version_ ||
      source.tensor_count_ != tensor_count_ || pos_ > buf_.size()) {
    return false;
  }
  const std::span<const uint8_t> in = source.records();
  if (in.size() > buf_.size() - pos_) return false;
  if (last_line_ != nullptr && source.begin_ == 0 && source.last_line_ == nullptr) {
    // The lines of each run of one tensor's records, as CountRecordLines would have counted
    // them record by record.
    for (const LineSpan& span : source.spans_) {
      *touched_ += span.touched - (last_line_[span.tensor] == span.first + 1 ? 1 : 0);
      last_line_[span.tensor] = span.last + 1;
    }
  } else if (last_line_ != nullptr) {
    // The lines each record touches, as CountRecordLines counts them when records are added.
    // (The source's records were written by a writer: they parse.)
    (void)ForEachRecorded(
        in, version_,
        [&](uint32_t tensor, uint64_t local, uint64_t, std::span<const uint8_t> bytes, bool) {
          CountRecordLines(tensor, local, bytes.size());
          return Status::Ok();
        });
  }
  std::memcpy(buf_.data() + pos_, in.data(), in.size());
  pos_ += in.size();
  records_ += source.records_;
  if (source.tensor_ != UINT32_MAX) {
    tensor_ = source.tensor_;
    shift_ = source.shift_;
  }
  return true;
}

StatusOr<uint64_t> WritePlanWriter::Finish() {
  RETURN_IF_ERROR(status_);
  if (begin_ == 0) return FailedPrecondition("a records-only plan writer has no header to write");
  PlanHeader h{kPlanMagic, version_, static_cast<uint32_t>(tensors_.size()), records_, pos_, 0};
  std::memcpy(buf_.data(), &h, sizeof(h));
  return pos_;
}

StatusOr<WritePlanReader> WritePlanReader::OpenHeader(std::span<uint8_t> buffer) {
  WritePlanReader r;
  r.buf_ = buffer;
  if (buffer.size() < sizeof(PlanHeader)) return InvalidArgument("plan: shorter than its header");
  if (reinterpret_cast<uintptr_t>(buffer.data()) % 8 != 0) {
    return InvalidArgument("plan: buffer not 8-byte aligned");
  }
  std::memcpy(&r.header_, buffer.data(), sizeof(PlanHeader));
  const PlanHeader& h = r.header_;
  if (h.magic != kPlanMagic) return InvalidArgument("plan: bad magic");
  if (h.version != kPlanVersion && h.version != kPlanVersionCompact) {
    return InvalidArgument("plan: version " + std::to_string(h.version) +
                           ", this build reads 1 and 2");
  }
  if (h.bytes_used > buffer.size()) {
    return InvalidArgument("plan: claims " + std::to_string(h.bytes_used) + " bytes, buffer has " +
                           std::to_string(buffer.size()));
  }
  if (h.bytes_used < sizeof(PlanHeader)) {
    return InvalidArgument("plan: claims " + std::to_string(h.bytes_used) +
                           " bytes, shorter than its header");
  }
  uint64_t table = uint64_t{h.tensor_count} * sizeof(PlanTensor);
  if (table > h.bytes_used - sizeof(PlanHeader))
    return InvalidArgument("plan: tensor table too long");
  r.tensors_ = std::span<const PlanTensor>(
      reinterpret_cast<const PlanTensor*>(buffer.data() + sizeof(PlanHeader)), h.tensor_count);
  r.records_begin_ = sizeof(PlanHeader) + table;
  return r;
}

StatusOr<WritePlanReader> WritePlanReader::Open(std::span<uint8_t> buffer) {
  ASSIGN_OR_RETURN(WritePlanReader r, OpenHeader(buffer));
  uint64_t data_bytes = 0;
  RETURN_IF_ERROR(r.ForEach([&](const PlanRecord& rec, std::span<uint8_t>) {
    data_bytes += rec.length;
    return Status::Ok();
  }));
  r.data_bytes_ = data_bytes;
  r.counted_ = true;
  return r;
}

StatusOr<WritePlanReader> WritePlanReader::Counted() const {
  if (counted_) return *this;
  return Open(buf_);
}

StatusOr<WritePlanReader> WritePlanReader::OpenLazy(std::span<uint8_t> buffer) {
  ASSIGN_OR_RETURN(WritePlanReader r, OpenHeader(buffer));
  r.data_bytes_ = r.header_.bytes_used - r.records_begin_;
  return r;
}

Status WritePlanReader::CheckCount(uint64_t seen) const {
  if (seen == header_.record_count) return Status::Ok();
  return InvalidArgument("plan: header says " + std::to_string(header_.record_count) +
                         " records, found " + std::to_string(seen));
}

Status WritePlanReader::BadRecord(uint64_t index, RecordError what) {
  if (what == RecordError::kTruncated) return InvalidArgument("plan: truncated record header");
  // Indexed by RecordError.
  static constexpr const char* kWhy[] = {
      "",  // kTruncated, above
      "tensor index out of range",
      "canonical range beyond the tensor",
      "data runs past the plan",
      "unknown record kind or reserved bits set",
      "change record before any tensor record",
      "long record of length 0",
  };
  static_assert(std::size(kWhy) == static_cast<size_t>(RecordError::kLength) + 1);
  return InvalidArgument("plan record " + std::to_string(index) + ": " +
                         kWhy[static_cast<size_t>(what)]);
}

}  // namespace deltakv::deltasync
