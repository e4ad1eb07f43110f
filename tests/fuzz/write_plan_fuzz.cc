// Fuzzes the write plan reader and writer.
// 1. The input as a plan (either version, by its header): rejected with InvalidArgument or
//    walked without reading outside the buffer, every record it yields inside its tensor and
//    the buffer; OpenLazy and one walk end with Open's status and find the same records.
// 2. The input as a list of changes (tensor, offsets, length, owner; some of them long, some
//    with local offsets of 2^55 or more, shifts that change often or never), written with
//    WritePlanWriter in both versions, through TryAddShort where it applies and Add otherwise,
//    into a buffer that may fill up: the reader gives back exactly the changes the writer took,
//    in order (the list is the reference), and the two versions agree.
// 3. The same changes recorded in chunks into RecordsOnly writers (as walker threads record
//    them) replay exactly (ForEachRecorded) and, appended whole with AppendFrom, give a plan
//    with exactly those changes, records and touched lines; and the input itself, read as
//    recorded records of either version, is refused or walked inside its bytes.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "deltasync/write_plan.h"
#include "fuzz_input.h"

using namespace deltakv;
using namespace deltakv::deltasync;

namespace {

// The status OpenLazy and a walk over every record end with; the walk counts the records it
// passes and sums their lengths.
Status LazyWalk(std::span<uint8_t> buf, uint64_t& records, uint64_t& data_bytes) {
  auto lazy = WritePlanReader::OpenLazy(buf);
  if (!lazy.ok()) return lazy.status();
  if (lazy->data_bytes() > buf.size()) std::abort();  // a bound inside the buffer
  return lazy->ForEach([&](const PlanRecord& rec, std::span<uint8_t> bytes) {
    if (bytes.data() < buf.data() || bytes.data() + bytes.size() > buf.data() + buf.size()) {
      std::abort();
    }
    ++records;
    data_bytes += rec.length;
    return Status::Ok();
  });
}

void ReadAsPlan(const uint8_t* data, size_t size) {
  std::vector<uint64_t> words(size / 8 + 1);
  std::memcpy(words.data(), data, size);
  std::span<uint8_t> buf(reinterpret_cast<uint8_t*>(words.data()), size);
  auto r = WritePlanReader::Open(buf);
  // OpenLazy and one walk end as Open does, with the same status.
  uint64_t lazy_records = 0, lazy_bytes = 0;
  const Status lazy = LazyWalk(buf, lazy_records, lazy_bytes);
  if (lazy.code() != r.status().code() || lazy.message() != r.status().message()) std::abort();
  if (!r.ok()) {
    if (r.status().code() != StatusCode::kInvalidArgument) std::abort();
    return;
  }
  if (lazy_records != r->record_count() || lazy_bytes != r->data_bytes()) std::abort();
  Status s = r->ForEach([&](const PlanRecord& rec, std::span<uint8_t> bytes) {
    const PlanTensor& t = r->tensors()[rec.tensor];
    if (rec.canonical_offset + rec.length > t.canonical_length) std::abort();
    if (bytes.data() < buf.data() || bytes.data() + bytes.size() > buf.data() + buf.size()) {
      std::abort();
    }
    for (uint8_t& b : bytes) b ^= 0xff;  // writable, as a rank stages in place
    return Status::Ok();
  });
  if (!s.ok()) std::abort();  // Open validated every record
}

struct Change {
  uint32_t tensor;
  uint64_t local, canonical;
  std::vector<uint8_t> bytes;
  bool owner;
};

// Writes `changes` in `version` into a buffer of `capacity` bytes (stopping at the first that
// does not fit) and checks the reader gives back exactly those written. Returns how many.
size_t RoundTrip(const std::vector<Change>& changes, const std::vector<PlanTensor>& tensors,
                 uint32_t version, size_t capacity) {
  std::vector<uint64_t> words(capacity / 8);
  std::span<uint8_t> buf(reinterpret_cast<uint8_t*>(words.data()), words.size() * 8);
  WritePlanWriter w(buf, tensors, version);
  size_t taken = 0;
  for (const Change& c : changes) {
    if (w.TryAddShort(c.tensor, c.local, c.canonical, c.bytes, c.owner)) {
      ++taken;
      continue;
    }
    Status s = w.Add(c.tensor, c.local, c.canonical, c.bytes, c.owner);
    if (s.code() == StatusCode::kResourceExhausted) break;
    if (!s.ok()) std::abort();
    ++taken;
  }
  if (!w.status().ok()) {
    // A full buffer: the records before the failing change stay readable; drop the partial
    // one by writing the plan again without it.
    std::vector<Change> prefix(changes.begin(), changes.begin() + taken);
    return RoundTrip(prefix, tensors, version, capacity);
  }
  auto used = w.Finish();
  if (!used.ok()) std::abort();
  auto r = WritePlanReader::Open(buf.first(*used));
  if (!r.ok()) std::abort();
  size_t k = 0;
  uint64_t data_bytes = 0;
  // A change longer than 2^31 bytes would be split; the input never makes one.
  Status s = r->ForEach([&](const PlanRecord& rec, std::span<uint8_t> bytes) {
    if (k >= taken) std::abort();
    const Change& c = changes[k++];
    if (rec.tensor != c.tensor || rec.local_offset != c.local ||
        rec.canonical_offset != c.canonical || rec.length != c.bytes.size() ||
        (rec.flags == kPlanRecordOwner) != c.owner || (rec.flags & ~kPlanRecordOwner) != 0 ||
        rec.reserved != 0 || std::memcmp(bytes.data(), c.bytes.data(), bytes.size()) != 0) {
      std::abort();
    }
    data_bytes += bytes.size();
    return Status::Ok();
  });
  if (!s.ok() || k != taken || r->record_count() != taken || r->data_bytes() != data_bytes) {
    std::abort();
  }
  return taken;
}

void Recorded(const std::vector<Change>& changes, const std::vector<PlanTensor>& tensors,
              uint32_t version, FuzzInput<4>& in);

void WriteAndRead(const uint8_t* data, size_t size) {
  FuzzInput<4> in{data, size};
  const std::vector<PlanTensor> tensors = {{0, 0, uint64_t{1} << 62, 0, 0},
                                           {1, 0, 1 + in.Next(5000), 0, 0},
                                           {2, kPlanTensorFullVerify, 64, 0, 0}};
  std::vector<Change> changes;
  uint64_t local = 0, shift = in.Next(3000);
  while (!in.done() && changes.size() < 300) {
    Change c;
    c.tensor = static_cast<uint32_t>(in.Next(3));
    const uint64_t len = 1 + (in.Next(6) == 0 ? in.Next(300) : in.Next(12));
    if (in.Next(4) == 0) shift = in.Next(3) == 0 ? ~uint64_t{0} - in.Next(100) : in.Next(3000);
    local += in.Next(100);
    if (in.Next(16) == 0) local = (uint64_t{1} << 55) - in.Next(8);  // around the short limit
    c.local = local;
    c.canonical = local + shift;
    const uint64_t cap = tensors[c.tensor].canonical_length;
    if (c.canonical > cap || len > cap - c.canonical) continue;  // the writer does not check
    c.owner = in.Next(2) == 0;
    for (uint64_t i = 0; i < len; ++i) c.bytes.push_back(static_cast<uint8_t>(in.Next(256)));
    changes.push_back(std::move(c));
    local += len;
  }
  const size_t capacity = WritePlanWriter::FixedBytes(tensors.size()) + 8 * (1 + in.Next(4000));
  const size_t v1 = RoundTrip(changes, tensors, kPlanVersion, capacity);
  const size_t v2 = RoundTrip(changes, tensors, kPlanVersionCompact, capacity);
  if (v2 < v1) std::abort();  // compact records never take more room
  for (uint32_t version : {kPlanVersion, kPlanVersionCompact}) {
    Recorded(changes, tensors, version, in);
  }
}

// Part 3: `changes` recorded in chunks and appended whole, against the same changes added one
// by one.
void Recorded(const std::vector<Change>& changes, const std::vector<PlanTensor>& tensors,
              uint32_t version, FuzzInput<4>& in) {
  size_t capacity = WritePlanWriter::FixedBytes(tensors.size());  // every change fits
  for (const Change& c : changes) capacity += WritePlanWriter::RecordBytes(c.bytes.size()) + 16;
  std::vector<uint64_t> direct_words(capacity / 8), appended_words(capacity / 8);
  WritePlanWriter direct(std::span(reinterpret_cast<uint8_t*>(direct_words.data()), capacity),
                         tensors, version);
  WritePlanWriter appended(std::span(reinterpret_cast<uint8_t*>(appended_words.data()), capacity),
                           tensors, version);
  std::vector<uint64_t> direct_last(tensors.size()), appended_last(tensors.size());
  uint64_t direct_lines = 0, appended_lines = 0;
  direct.CountLines(direct_last.data(), &direct_lines);
  appended.CountLines(appended_last.data(), &appended_lines);
  for (size_t i = 0; i < changes.size();) {
    const size_t end = std::min(changes.size(), i + 1 + in.Next(40));
    std::vector<uint64_t> chunk_words(capacity / 8);
    WritePlanWriter rec = WritePlanWriter::RecordsOnly(
        std::span(reinterpret_cast<uint8_t*>(chunk_words.data()), capacity),
        static_cast<uint32_t>(tensors.size()), version);
    for (size_t k = i; k < end; ++k) {
      const Change& c = changes[k];
      if (!direct.Add(c.tensor, c.local, c.canonical, c.bytes, c.owner).ok()) std::abort();
      if (!rec.TryAddShort(c.tensor, c.local, c.canonical, c.bytes, c.owner) &&
          !rec.Add(c.tensor, c.local, c.canonical, c.bytes, c.owner).ok()) {
        std::abort();
      }
    }
    size_t k = i;
    const Status replayed = WritePlanWriter::ForEachRecorded(
        rec.records(), version,
        [&](uint32_t tensor, uint64_t local, uint64_t canonical, std::span<const uint8_t> bytes,
            bool owner) {
          if (k >= end) std::abort();
          const Change& c = changes[k++];
          if (tensor != c.tensor || local != c.local || canonical != c.canonical ||
              owner != c.owner || bytes.size() != c.bytes.size() ||
              std::memcmp(bytes.data(), c.bytes.data(), bytes.size()) != 0) {
            std::abort();
          }
          return Status::Ok();
        });
    if (!replayed.ok() || k != end) std::abort();
    if (!appended.AppendFrom(rec)) std::abort();
    i = end;
  }
  if (appended.record_count() != direct.record_count() || appended_lines != direct_lines ||
      appended_last != direct_last) {
    std::abort();
  }
  auto used = appended.Finish();
  if (!used.ok()) std::abort();
  auto r =
      WritePlanReader::Open(std::span(reinterpret_cast<uint8_t*>(appended_words.data()), *used));
  if (!r.ok()) std::abort();
  size_t k = 0;
  const Status walked = r->ForEach([&](const PlanRecord& p, std::span<uint8_t> bytes) {
    if (k >= changes.size()) std::abort();
    const Change& c = changes[k++];
    if (p.tensor != c.tensor || p.local_offset != c.local || p.canonical_offset != c.canonical ||
        (p.flags == kPlanRecordOwner) != c.owner || bytes.size() != c.bytes.size() ||
        std::memcmp(bytes.data(), c.bytes.data(), bytes.size()) != 0) {
      std::abort();
    }
    return Status::Ok();
  });
  if (!walked.ok() || k != changes.size()) std::abort();
}

// Part 3: the input read as recorded records: refused with InvalidArgument, or walked with
// every record's bytes inside the input.
void ReadAsRecorded(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  for (uint32_t version : {kPlanVersion, kPlanVersionCompact}) {
    const Status s = WritePlanWriter::ForEachRecorded(
        bytes, version, [&](uint32_t, uint64_t, uint64_t, std::span<const uint8_t> b, bool) {
          if (b.empty() || b.data() < data || b.data() + b.size() > data + size) std::abort();
          return Status::Ok();
        });
    if (!s.ok() && s.code() != StatusCode::kInvalidArgument) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ReadAsPlan(data, size);
  ReadAsRecorded(data, size);
  WriteAndRead(data, size);
  return 0;
}
