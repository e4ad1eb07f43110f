// Write plans: round trip, splitting, capacity, and every kind of malformed buffer.
#include "deltasync/write_plan.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <utility>

namespace deltakv::deltasync {
namespace {

struct Buffer {
  explicit Buffer(size_t n) : words((n + 7) / 8, 0) {}
  std::span<uint8_t> span() { return {reinterpret_cast<uint8_t*>(words.data()), words.size() * 8}; }
  std::vector<uint64_t> words;
};

void Put32(std::span<uint8_t> b, size_t at, uint32_t v) { std::memcpy(b.data() + at, &v, 4); }
void Put64(std::span<uint8_t> b, size_t at, uint64_t v) { std::memcpy(b.data() + at, &v, 8); }

// OpenLazy, then a walk that takes every record: the status a rank staging the plan ends with.
Status OpenLazyAndWalk(std::span<uint8_t> plan) {
  auto lazy = WritePlanReader::OpenLazy(plan);
  if (!lazy.ok()) return lazy.status();
  return lazy->ForEach([](const PlanRecord&, std::span<uint8_t>) { return Status::Ok(); });
}

// Opens the first `size` bytes of a copy of `plan` (4096 bytes) after `edit` changed the copy;
// OpenLazy and a walk, and OpenLazy and Counted, must end with the same status as Open.
template <typename Edit>
Status OpenEdited(Buffer& plan, Edit edit, uint64_t size) {
  Buffer copy(4096);
  std::memcpy(copy.span().data(), plan.span().data(), 4096);
  edit(copy.span());
  const std::span<uint8_t> edited = copy.span().first(size);
  const Status eager = WritePlanReader::Open(edited).status();
  const Status walked = OpenLazyAndWalk(edited);
  EXPECT_EQ(walked.code(), eager.code()) << eager.ToString();
  EXPECT_EQ(walked.message(), eager.message());
  auto lazy = WritePlanReader::OpenLazy(edited);
  const Status counted = lazy.ok() ? lazy->Counted().status() : lazy.status();
  EXPECT_EQ(counted.message(), eager.message());
  return eager;
}

class WritePlanVersions : public ::testing::TestWithParam<uint32_t> {};
INSTANTIATE_TEST_SUITE_P(Both, WritePlanVersions,
                         ::testing::Values(kPlanVersion, kPlanVersionCompact));

// Version 1 keeps 32 flag bits per record; the reader hands out the owner bit only, as for
// version 2 (PlanRecord: flags = the owner bit).
TEST(WritePlanV1, ReaderKeepsOnlyTheOwnerFlag) {
  const std::vector<PlanTensor> tensors = {{0, 0, 100, 0, 0}};
  for (bool owner : {false, true}) {
    Buffer buf(4096);
    WritePlanWriter w(buf.span(), tensors, kPlanVersion);
    ASSERT_TRUE(w.Add(0, 10, 10, std::vector<uint8_t>{1, 2, 3}, owner).ok());
    auto used = w.Finish();
    ASSERT_TRUE(used.ok());
    const size_t flags_at = WritePlanWriter::FixedBytes(1) + 24;
    Put32(buf.span(), flags_at, owner ? 0xFFFFFFFFu : 0xFFFFFFFEu);  // unknown bits set
    auto r = WritePlanReader::Open(buf.span().first(*used));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    int seen = 0;
    ASSERT_TRUE(r->ForEach([&](const PlanRecord& rec, std::span<uint8_t>) {
                   EXPECT_EQ(rec.flags, owner ? kPlanRecordOwner : 0u);
                   ++seen;
                   return Status::Ok();
                 }).ok());
    EXPECT_EQ(seen, 1);
  }
}

TEST_P(WritePlanVersions, RoundTrip) {
  Buffer buf(1 << 16);
  std::vector<PlanTensor> tensors = {{3, 0, 1000, 11, 22}, {7, kPlanTensorFullVerify, 64, 1, 2}};
  WritePlanWriter w(buf.span(), tensors, GetParam());
  std::mt19937 rng(1);
  struct Want {
    uint32_t t;
    uint64_t local, canon;
    std::vector<uint8_t> bytes;
    bool owner;
  };
  std::vector<Want> want;
  for (int i = 0; i < 50; ++i) {
    uint32_t t = i % 5 < 3 ? 0 : 1;  // runs of records of one tensor, then switches
    uint64_t cap = tensors[t].canonical_length;
    uint64_t canon = rng() % cap;
    uint64_t len = 1 + rng() % std::min<uint64_t>(cap - canon, i % 7 == 0 ? 200 : 37);
    std::vector<uint8_t> bytes(len);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    want.push_back({t, canon + 5, canon, bytes, i % 3 == 0});
    ASSERT_TRUE(w.Add(t, canon + 5, canon, bytes, i % 3 == 0).ok());
  }
  auto used = w.Finish();
  ASSERT_TRUE(used.ok());
  auto r = WritePlanReader::Open(buf.span().first(*used));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  uint32_t version;
  std::memcpy(&version, buf.span().data() + 8, 4);
  EXPECT_EQ(version, GetParam());
  EXPECT_EQ(r->record_count(), want.size());
  ASSERT_EQ(r->tensors().size(), 2u);
  EXPECT_EQ(r->tensors()[1].rank_tensor, 7u);
  uint64_t data_bytes = 0;
  for (const Want& x : want) data_bytes += x.bytes.size();
  EXPECT_EQ(r->data_bytes(), data_bytes);
  size_t k = 0;
  ASSERT_TRUE(r->ForEach([&](const PlanRecord& rec, std::span<uint8_t> bytes) {
                 const Want& x = want[k++];
                 EXPECT_EQ(rec.tensor, x.t);
                 EXPECT_EQ(rec.local_offset, x.local);
                 EXPECT_EQ(rec.canonical_offset, x.canon);
                 EXPECT_EQ((rec.flags & kPlanRecordOwner) != 0, x.owner);
                 EXPECT_TRUE(
                     std::equal(bytes.begin(), bytes.end(), x.bytes.begin(), x.bytes.end()));
                 return Status::Ok();
               }).ok());
  EXPECT_EQ(k, want.size());

  // OpenLazy walks the same records; its data_bytes() is a bound until Counted().
  auto lazy = WritePlanReader::OpenLazy(buf.span().first(*used));
  ASSERT_TRUE(lazy.ok()) << lazy.status().ToString();
  EXPECT_EQ(lazy->record_count(), want.size());
  EXPECT_EQ(lazy->data_bytes(), *used - sizeof(PlanHeader) - 2 * sizeof(PlanTensor));
  EXPECT_GE(lazy->data_bytes(), data_bytes);
  k = 0;
  ASSERT_TRUE(lazy->ForEach([&](const PlanRecord& rec, std::span<uint8_t> bytes) {
                    const Want& x = want[k++];
                    EXPECT_EQ(rec.tensor, x.t);
                    EXPECT_EQ(rec.local_offset, x.local);
                    EXPECT_EQ(rec.canonical_offset, x.canon);
                    EXPECT_TRUE(
                        std::equal(bytes.begin(), bytes.end(), x.bytes.begin(), x.bytes.end()));
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_EQ(k, want.size());
  auto counted = lazy->Counted();
  ASSERT_TRUE(counted.ok()) << counted.status().ToString();
  EXPECT_EQ(counted->data_bytes(), data_bytes);
  EXPECT_EQ(counted->record_count(), want.size());
  EXPECT_EQ(r->Counted()->data_bytes(), data_bytes);
}

// After OpenLazy the header's record count is checked by each walk once it has passed every
// record; a walk its callback stops returns the callback's status.
TEST_P(WritePlanVersions, LazyWalkChecksTheRecordCount) {
  Buffer buf(4096);
  WritePlanWriter w(buf.span(), {{0, 0, 1000, 0, 0}}, GetParam());
  for (uint64_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(w.Add(0, 10 * i, 10 * i, std::vector<uint8_t>{1, 2}, true).ok());
  }
  const uint64_t used = *w.Finish();
  for (uint64_t claim : {uint64_t{0}, uint64_t{4}, uint64_t{6}, uint64_t{1} << 40}) {
    Buffer copy(4096);
    std::memcpy(copy.span().data(), buf.span().data(), 4096);
    Put64(copy.span(), 16, claim);
    const std::span<uint8_t> plan = copy.span().first(used);
    EXPECT_FALSE(WritePlanReader::Open(plan).ok()) << claim;
    auto lazy = WritePlanReader::OpenLazy(plan);
    ASSERT_TRUE(lazy.ok()) << lazy.status().ToString();
    EXPECT_EQ(lazy->record_count(), claim);
    int seen = 0;
    const Status s = lazy->ForEach([&](const PlanRecord&, std::span<uint8_t>) {
      ++seen;
      return Status::Ok();
    });
    EXPECT_EQ(seen, 5);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), "plan: header says " + std::to_string(claim) + " records, found 5");
    EXPECT_EQ(lazy->Counted().status().message(), s.message());
    const Status stopped = lazy->ForEach(
        [](const PlanRecord&, std::span<uint8_t>) { return Status(DataLoss("stop")); });
    EXPECT_EQ(stopped.message(), "stop");
  }
}

TEST_P(WritePlanVersions, TryAddShortWritesWhatAddWrites) {
  // Every length 1..kShortBytes (and the cases it refuses), written by TryAddShort into one
  // buffer and by Add into another: byte-identical plans (zero padding included), with the
  // shift between canonical and local offsets changing now and then (version 2's tensor
  // records).
  std::vector<PlanTensor> tensors = {{0, 0, 1 << 20, 0, 0}, {1, 0, 1 << 20, 0, 0}};
  Buffer a(1 << 17), b(1 << 17);
  WritePlanWriter fast(a.span(), tensors, GetParam()), slow(b.span(), tensors, GetParam());
  std::mt19937 rng(4);
  uint64_t at = 0;
  for (int i = 0; i < 600; ++i) {
    const size_t n = 1 + rng() % WritePlanWriter::kShortBytes;
    std::vector<uint8_t> bytes(n);
    for (auto& x : bytes) x = static_cast<uint8_t>(rng());
    const bool owner = rng() % 2 == 0;
    const uint32_t t = i % 50 < 40 ? 0 : 1;
    const uint64_t local = at + 3 + (i / 25) * 7;
    ASSERT_TRUE(fast.TryAddShort(t, local, at, bytes, owner)) << i;
    ASSERT_TRUE(slow.Add(t, local, at, bytes, owner).ok());
    at += n + rng() % 50;
  }
  std::vector<uint8_t> nine(WritePlanWriter::kShortBytes + 1, 1);
  EXPECT_FALSE(fast.TryAddShort(0, 0, 0, nine, true));  // longer than kShortBytes
  EXPECT_FALSE(fast.TryAddShort(0, 0, 0, {}, true));    // empty
  EXPECT_FALSE(fast.TryAddShort(2, 0, 0, std::span(nine).first(2), true));  // no such tensor
  EXPECT_EQ(fast.record_count(), slow.record_count());
  auto fu = fast.Finish();
  auto su = slow.Finish();
  ASSERT_TRUE(fu.ok() && su.ok());
  ASSERT_EQ(*fu, *su);
  EXPECT_EQ(std::memcmp(a.span().data(), b.span().data(), *fu), 0);
}

// Records prepared in RecordsOnly writers (as walker threads prepare them) and appended whole
// with AppendFrom give the plan that adding the same pieces directly gives: the same records in
// order, count and touched lines; ForEachRecorded replays exactly those pieces.
TEST_P(WritePlanVersions, RecordedRecordsAppendAsTheirPiecesWould) {
  std::vector<PlanTensor> tensors = {{0, 0, 1 << 24, 0, 0}, {1, 0, 1 << 24, 0, 0}};
  struct Piece {
    uint32_t tensor;
    uint64_t local, canonical;
    std::vector<uint8_t> bytes;
    bool owner;
    bool operator==(const Piece&) const = default;
  };
  std::mt19937 rng(21);
  std::vector<Piece> pieces;
  uint64_t at = 0;
  for (int i = 0; i < 900; ++i) {
    const size_t n = rng() % 10 == 0 ? 65 + rng() % 200 : 1 + rng() % 64;
    std::vector<uint8_t> bytes(n);
    for (auto& x : bytes) x = static_cast<uint8_t>(rng() | 1);
    const uint32_t t = (i / 100) % 2;
    pieces.push_back({t, at, at + (i / 300) * 4096, bytes, rng() % 3 != 0});
    at += n + rng() % 80;
  }
  Buffer direct_buf(1 << 20), appended_buf(1 << 20);
  WritePlanWriter direct(direct_buf.span(), tensors, GetParam());
  WritePlanWriter appended(appended_buf.span(), tensors, GetParam());
  std::vector<uint64_t> direct_last(2, 0), appended_last(2, 0);
  uint64_t direct_lines = 0, appended_lines = 0;
  direct.CountLines(direct_last.data(), &direct_lines);
  appended.CountLines(appended_last.data(), &appended_lines);
  // Chunks of 1 to 60 pieces, each recorded into a fresh RecordsOnly writer.
  for (size_t i = 0; i < pieces.size();) {
    const size_t end = std::min(pieces.size(), i + 1 + rng() % 60);
    Buffer chunk(1 << 16);
    WritePlanWriter rec = WritePlanWriter::RecordsOnly(chunk.span(), 2, GetParam());
    std::vector<Piece> replayed;
    for (size_t k = i; k < end; ++k) {
      const Piece& p = pieces[k];
      ASSERT_TRUE(direct.Add(p.tensor, p.local, p.canonical, p.bytes, p.owner).ok());
      ASSERT_TRUE(rec.Add(p.tensor, p.local, p.canonical, p.bytes, p.owner).ok());
    }
    ASSERT_TRUE(WritePlanWriter::ForEachRecorded(
                    rec.records(), rec.version(),
                    [&](uint32_t t, uint64_t local, uint64_t canonical,
                        std::span<const uint8_t> bytes, bool owner) {
                      replayed.push_back({t, local, canonical,
                                          std::vector<uint8_t>(bytes.begin(), bytes.end()), owner});
                      return Status::Ok();
                    })
                    .ok());
    EXPECT_EQ(replayed, std::vector<Piece>(pieces.begin() + i, pieces.begin() + end));
    ASSERT_TRUE(appended.AppendFrom(rec));
    i = end;
  }
  EXPECT_EQ(appended.record_count(), direct.record_count());
  EXPECT_EQ(appended_lines, direct_lines);
  EXPECT_EQ(appended_last, direct_last);
  auto collect = [](std::span<uint8_t> plan) {
    std::vector<Piece> out;
    auto reader = WritePlanReader::Open(plan);
    EXPECT_TRUE(reader.ok()) << reader.status().ToString();
    if (!reader.ok()) return out;
    EXPECT_TRUE(reader
                    ->ForEach([&](const PlanRecord& r, std::span<uint8_t> bytes) {
                      out.push_back({r.tensor, r.local_offset, r.canonical_offset,
                                     std::vector<uint8_t>(bytes.begin(), bytes.end()),
                                     (r.flags & kPlanRecordOwner) != 0});
                      return Status::Ok();
                    })
                    .ok());
    return out;
  };
  auto used = appended.Finish();
  auto direct_used = direct.Finish();
  ASSERT_TRUE(used.ok() && direct_used.ok());
  EXPECT_EQ(collect(appended_buf.span().first(*used)), pieces);
  EXPECT_EQ(collect(direct_buf.span().first(*direct_used)), pieces);
  // A writer appended to after AppendFrom continues the plan: version 2 knows the current
  // tensor record.
  const std::vector<uint8_t> one(1, 9);
  Buffer more_buf(1 << 20);
  WritePlanWriter more(more_buf.span(), tensors, GetParam());
  Buffer chunk(4096);
  WritePlanWriter rec = WritePlanWriter::RecordsOnly(chunk.span(), 2, GetParam());
  ASSERT_TRUE(rec.Add(1, 100, 5100, one, true).ok());
  ASSERT_TRUE(more.AppendFrom(rec));
  ASSERT_TRUE(more.TryAddShort(1, 200, 5200, one, false));  // same tensor and shift
  auto more_used = more.Finish();
  ASSERT_TRUE(more_used.ok());
  EXPECT_EQ(collect(more_buf.span().first(*more_used)),
            (std::vector<Piece>{{1, 100, 5100, one, true}, {1, 200, 5200, one, false}}));
}

// AppendFrom refuses, writing nothing, records that do not fit, another version or tensor
// count, and a failed writer; a records-only writer has no header to finish.
TEST_P(WritePlanVersions, AppendFromRefusesWhatItCannotTakeWhole) {
  std::vector<PlanTensor> tensors = {{0, 0, 1 << 20, 0, 0}};
  const std::vector<uint8_t> bytes(40, 3);
  Buffer chunk(4096);
  WritePlanWriter rec = WritePlanWriter::RecordsOnly(chunk.span(), 1, GetParam());
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(rec.Add(0, i * 100, i * 100, bytes, true).ok());
  EXPECT_EQ(rec.Finish().status().code(), StatusCode::kFailedPrecondition);
  const uint64_t fixed = WritePlanWriter::FixedBytes(1);
  Buffer small(fixed + rec.records().size() - 8);
  WritePlanWriter tight(small.span(), tensors, GetParam());
  EXPECT_FALSE(tight.AppendFrom(rec));
  EXPECT_EQ(tight.record_count(), 0u);
  EXPECT_EQ(tight.remaining(), small.span().size() - fixed);
  Buffer exact(fixed + rec.records().size());
  WritePlanWriter fits(exact.span(), tensors, GetParam());
  EXPECT_TRUE(fits.AppendFrom(rec));
  EXPECT_EQ(fits.remaining(), 0u);
  Buffer big(1 << 16);
  WritePlanWriter other_version(big.span(), tensors, GetParam() == 1 ? 2 : 1);
  EXPECT_FALSE(other_version.AppendFrom(rec));
  WritePlanWriter two_tensors(big.span(), {tensors[0], tensors[0]}, GetParam());
  EXPECT_FALSE(two_tensors.AppendFrom(rec));
  Buffer tiny(8);
  WritePlanWriter failed(tiny.span(), tensors, GetParam());
  ASSERT_FALSE(failed.status().ok());
  EXPECT_FALSE(failed.AppendFrom(rec));
}

// ForEachRecorded refuses bytes that are not whole records.
TEST(WritePlan, ForEachRecordedRefusesBrokenRecords) {
  auto count = [](std::vector<uint64_t> words, uint32_t version, size_t drop = 0) {
    std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(words.data()),
                                   words.size() * 8 - drop);
    size_t n = 0;
    Status s = WritePlanWriter::ForEachRecorded(
        bytes, version, [&](uint32_t, uint64_t, uint64_t, std::span<const uint8_t>, bool) {
          ++n;
          return Status::Ok();
        });
    return s.ok() ? static_cast<int>(n) : -1;
  };
  const uint64_t tensor0 = kPlanKindTensor;  // tensor 0, then its shift word
  const uint64_t short2 = kPlanKindShort | (uint64_t{1} << 3) | (uint64_t{64} << 9);  // 2 bytes
  EXPECT_EQ(count({tensor0, 0, short2, 0xABCD}, 2), 1);
  EXPECT_EQ(count({}, 2), 0);
  EXPECT_EQ(count({short2, 0xABCD}, 2), -1);                 // a change before any tensor record
  EXPECT_EQ(count({tensor0, 0, 3, 0}, 2), -1);               // kind 3
  EXPECT_EQ(count({tensor0, 0, short2}, 2), -1);             // its bytes missing
  EXPECT_EQ(count({tensor0, 0, short2, 0xABCD}, 2, 4), -1);  // cut inside its padding
  EXPECT_EQ(count({tensor0}, 2), -1);                        // a tensor record cut short
  const uint64_t long0 = kPlanKindLong | (uint64_t{0} << 32);
  EXPECT_EQ(count({tensor0, 0, long0, 8}, 2), -1);        // a long record of length 0
  EXPECT_EQ(count({uint64_t{2} << 32, 8, 0, 0}, 1), -1);  // version 1: a header cut short
}

TEST_P(WritePlanVersions, CountLinesCountsEachRecordsLinesOnceAcrossWriters) {
  // Records through TryAddShort and Add (long runs too) at increasing offsets per tensor, in two
  // writers that share one count as the parts of one rank's plan do: the count is the number of
  // distinct 64-byte lines the records cover.
  std::vector<PlanTensor> tensors = {{0, 0, 1 << 24, 0, 0}, {1, 0, 1 << 24, 0, 0}};
  std::vector<uint64_t> last_line(tensors.size(), 0);
  uint64_t touched = 0;
  std::set<std::pair<uint32_t, uint64_t>> lines;  // the reference
  std::mt19937 rng(11);
  uint64_t at[2] = {0, 0};
  for (int part = 0; part < 2; ++part) {
    Buffer buf(1 << 18);
    WritePlanWriter w(buf.span(), tensors, GetParam());
    w.CountLines(last_line.data(), &touched);
    for (int i = 0; i < 400; ++i) {
      const uint32_t t = rng() % 4 == 0 ? 1 : 0;
      const size_t n = rng() % 8 == 0 ? 65 + rng() % 300 : 1 + rng() % 64;
      const std::vector<uint8_t> bytes(n, 7);
      const uint64_t local = at[t];
      if (n <= WritePlanWriter::kShortBytes && rng() % 2 == 0) {
        ASSERT_TRUE(w.TryAddShort(t, local, local, bytes, true));
      } else {
        ASSERT_TRUE(w.Add(t, local, local, bytes, true).ok());
      }
      for (uint64_t b = local; b < local + n; ++b) lines.insert({t, b / 64});
      at[t] += n + rng() % 100;  // gaps of 0 to 99 bytes: many lines shared
    }
  }
  EXPECT_EQ(touched, lines.size());
  // A record that goes back is counted in full unless it starts in the line its tensor's
  // previous record ended in: lines 0-1, then 1 (shared), then 0 again (counted), then 5.
  Buffer buf(4096);
  WritePlanWriter w(buf.span(), tensors, GetParam());
  std::vector<uint64_t> last(tensors.size(), 0);
  uint64_t count = 0;
  w.CountLines(last.data(), &count);
  const std::vector<uint8_t> bytes(70, 1);
  ASSERT_TRUE(w.TryAddShort(0, 10, 10, std::span(bytes).first(60), true));   // lines 0, 1
  ASSERT_TRUE(w.TryAddShort(0, 100, 100, std::span(bytes).first(4), true));  // line 1
  ASSERT_TRUE(w.TryAddShort(0, 0, 0, std::span(bytes).first(1), true));      // line 0
  ASSERT_TRUE(w.Add(1, 320, 320, bytes, true).ok());                         // lines 5, 6
  EXPECT_EQ(count, 5u);
  EXPECT_EQ(last, (std::vector<uint64_t>{1, 7}));
  // Without CountLines nothing is counted.
  WritePlanWriter quiet(buf.span(), tensors, GetParam());
  ASSERT_TRUE(quiet.TryAddShort(0, 1000, 1000, std::span(bytes).first(2), true));
  EXPECT_EQ(count, 5u);
}

TEST(WritePlan, TryAddShortRefusesWhenFull) {
  // Room for the header, the table and exactly two short records of 2 bytes, then one of 20
  // that fits only in the room of three words.
  std::vector<PlanTensor> tensors = {{0, 0, 100, 0, 0}};
  const size_t room = WritePlanWriter::FixedBytes(1) + 2 * WritePlanWriter::RecordBytes(8);
  {
    const size_t size = room + WritePlanWriter::RecordBytes(20) - 1;
    Buffer big(size);
    WritePlanWriter w(big.span().first(size), tensors);
    const std::vector<uint8_t> twenty(20, 3);
    EXPECT_TRUE(w.TryAddShort(0, 0, 0, std::span(twenty).first(2), true));
    EXPECT_TRUE(w.TryAddShort(0, 10, 10, std::span(twenty).first(2), true));
    EXPECT_FALSE(w.TryAddShort(0, 40, 40, twenty, true));  // one byte short of its room
    EXPECT_TRUE(w.TryAddShort(0, 40, 40, std::span(twenty).first(16), true));
  }
  Buffer buf(room);
  WritePlanWriter w(buf.span().first(room), tensors);
  const std::vector<uint8_t> two = {1, 2};
  EXPECT_TRUE(w.TryAddShort(0, 0, 0, two, true));
  EXPECT_TRUE(w.TryAddShort(0, 10, 10, two, true));
  EXPECT_FALSE(w.TryAddShort(0, 20, 20, two, true));
  EXPECT_EQ(w.record_count(), 2u);
  EXPECT_EQ(w.Add(0, 20, 20, two, true).code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(w.TryAddShort(0, 30, 30, std::span(two).first(1), true));  // after an error
}

TEST_P(WritePlanVersions, FullBufferIsResourceExhausted) {
  Buffer buf(256);
  WritePlanWriter w(buf.span(), {{0, 0, 1 << 20, 0, 0}}, GetParam());
  std::vector<uint8_t> bytes(100, 1);
  EXPECT_TRUE(w.Add(0, 0, 0, bytes, true).ok());
  Status s = w.Add(0, 100, 100, bytes, true);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(w.Finish().ok());
}

TEST(WritePlan, RejectsMalformedBuffers) {
  Buffer buf(4096);
  WritePlanWriter w(buf.span(), {{0, 0, 100, 0, 0}});
  std::vector<uint8_t> bytes(10, 9);
  ASSERT_TRUE(w.Add(0, 0, 90, bytes, true).ok());
  uint64_t used = *w.Finish();
  const size_t rec = sizeof(PlanHeader) + sizeof(PlanTensor);
  struct Case {
    const char* label;
    std::function<void(std::span<uint8_t>)> edit;
    const char* msg;
  } cases[] = {
      {"magic", [&](auto b) { Put64(b, 0, 1); }, "bad magic"},
      {"version", [&](auto b) { Put32(b, 8, 9); }, "version 9"},
      {"tensor count", [&](auto b) { Put32(b, 12, 1000); }, "tensor table too long"},
      {"record count", [&](auto b) { Put64(b, 16, 2); }, "found 1"},
      {"bytes used", [&](auto b) { Put64(b, 24, 1 << 20); }, "claims"},
      {"bytes used short", [&](auto b) { Put64(b, 24, 16); }, "shorter than its header"},
      {"record tensor", [&](auto b) { Put32(b, rec, 1); }, "tensor index out of range"},
      {"canonical range", [&](auto b) { Put64(b, rec + 16, 95); }, "beyond the tensor"},
      {"length", [&](auto b) { Put32(b, rec + 4, 4000); }, "beyond the tensor"},
  };
  for (const Case& c : cases) {
    Status s = OpenEdited(buf, c.edit, used);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.label;
    EXPECT_NE(s.message().find(c.msg), std::string::npos) << c.label << ": " << s.message();
  }
  EXPECT_FALSE(WritePlanReader::Open(buf.span().first(10)).ok());
  EXPECT_FALSE(WritePlanReader::Open(buf.span().first(used - 8)).ok());
}

TEST(WritePlan, CompactRecordSizes) {
  // Version 2: a 1-8 byte change takes 16 bytes, 9-16 bytes 24; a tensor record (16 bytes)
  // only where the tensor or the shift between canonical and local offsets changes; runs of
  // more than 64 bytes, and offsets of 2^55 or more, take a long record (16 bytes + data).
  std::vector<PlanTensor> tensors = {{0, 0, uint64_t{1} << 60, 0, 0}, {1, 0, 1 << 20, 0, 0}};
  Buffer buf(1 << 12);
  WritePlanWriter w(buf.span(), tensors, kPlanVersionCompact);
  const uint64_t fixed = WritePlanWriter::FixedBytes(2);
  auto used = [&] { return buf.span().size() - w.remaining() - fixed; };
  const std::vector<uint8_t> bytes(100, 7);
  ASSERT_TRUE(w.TryAddShort(0, 10, 1010, std::span(bytes).first(1), true));
  EXPECT_EQ(used(), 16u + 16u);  // tensor record + short record
  ASSERT_TRUE(w.TryAddShort(0, 20, 1020, std::span(bytes).first(8), false));
  EXPECT_EQ(used(), 48u);  // same shift: no tensor record
  ASSERT_TRUE(w.TryAddShort(0, 40, 1040, std::span(bytes).first(9), true));
  EXPECT_EQ(used(), 72u);
  ASSERT_TRUE(w.TryAddShort(0, 60, 2000, std::span(bytes).first(2), true));
  EXPECT_EQ(used(), 104u);  // new shift
  ASSERT_TRUE(w.TryAddShort(1, 60, 2000, std::span(bytes).first(2), true));
  EXPECT_EQ(used(), 136u);  // new tensor, same shift
  ASSERT_TRUE(w.Add(1, 100, 2040, std::span(bytes).first(64), true).ok());
  EXPECT_EQ(used(), 208u);  // a short record of 64 bytes
  ASSERT_TRUE(w.Add(1, 200, 2140, std::span(bytes).first(65), true).ok());
  EXPECT_EQ(used(), 208u + 16 + 72);  // long
  const uint64_t far = uint64_t{1} << 55;
  EXPECT_FALSE(w.TryAddShort(0, far, far + 1000, std::span(bytes).first(3), true));
  ASSERT_TRUE(w.Add(0, far, far + 1000, std::span(bytes).first(3), false).ok());
  EXPECT_EQ(used(), 296u + 16 + 24);  // tensor record + long record
  EXPECT_EQ(w.record_count(), 8u);
  auto total = w.Finish();
  ASSERT_TRUE(total.ok());
  auto r = WritePlanReader::Open(buf.span().first(*total));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<PlanRecord> got;
  ASSERT_TRUE(r->ForEach([&](const PlanRecord& rec, std::span<uint8_t>) {
                 got.push_back(rec);
                 return Status::Ok();
               }).ok());
  ASSERT_EQ(got.size(), 8u);
  EXPECT_EQ(got[3].canonical_offset, 2000u);
  EXPECT_EQ(got[4].tensor, 1u);
  EXPECT_EQ(got[6].length, 65u);
  EXPECT_EQ(got[6].canonical_offset, 2140u);
  EXPECT_EQ(got[7].local_offset, far);
  EXPECT_EQ(got[7].canonical_offset, far + 1000);
  EXPECT_EQ(got[7].flags, 0u);
  EXPECT_EQ(got[0].flags, kPlanRecordOwner);
  EXPECT_EQ(r->data_bytes(), 1u + 8 + 9 + 2 + 2 + 64 + 65 + 3);
}

TEST(WritePlan, CompactLayoutAsDocumented) {
  // A version 2 plan assembled word by word from the layout in write_plan.h, without the
  // writer: tensor 0 with shift 1000, a 3-byte owner change at 10 and a 1-byte change at 40,
  // tensor 1 with shift 0 and a 9-byte change at 0, tensor 0 again and a 70-byte long change
  // at 100.
  std::vector<uint64_t> w = {0x314e414c50564b44ull, 2 | uint64_t{2} << 32, 4, 0, 0};
  auto tensor = [&](uint32_t rank_tensor, uint32_t flags, uint64_t length) {
    w.push_back(rank_tensor | uint64_t{flags} << 32);
    w.push_back(length);
    w.push_back(0);
  };
  tensor(0, 0, 4096);
  tensor(1, kPlanTensorFullVerify, 64);
  w.insert(w.end(), {1, 1000});
  w.insert(w.end(), {4 | 2 << 3 | 10 << 9, 0x030201});
  w.insert(w.end(), {0 | 40 << 9, 0x07});
  w.insert(w.end(), {1 | uint64_t{1} << 32, 0});
  w.insert(w.end(), {4 | 8 << 3, 0x0909090909090909ull, 0x09});
  w.insert(w.end(), {1, 1000});
  w.insert(w.end(), {2 | 4 | uint64_t{70} << 32, 100});
  for (int i = 0; i < 9; ++i) w.push_back(0x0505050505050505ull >> (i == 8 ? 16 : 0));
  w[3] = w.size() * 8;  // bytes_used
  std::span<uint8_t> buf(reinterpret_cast<uint8_t*>(w.data()), w.size() * 8);
  auto r = WritePlanReader::Open(buf);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  struct Got {
    uint32_t tensor, length, flags;
    uint64_t local, canonical;
    uint8_t last;
  };
  std::vector<Got> got;
  ASSERT_TRUE(r->ForEach([&](const PlanRecord& rec, std::span<uint8_t> b) {
                 got.push_back({rec.tensor, rec.length, rec.flags, rec.local_offset,
                                rec.canonical_offset, b.back()});
                 return Status::Ok();
               }).ok());
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(r->data_bytes(), 3u + 1 + 9 + 70);
  const Got want[] = {{0, 3, kPlanRecordOwner, 10, 1010, 3},
                      {0, 1, 0, 40, 1040, 7},
                      {1, 9, kPlanRecordOwner, 0, 0, 9},
                      {0, 70, kPlanRecordOwner, 100, 1100, 5}};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(got[i].tensor, want[i].tensor) << i;
    EXPECT_EQ(got[i].length, want[i].length) << i;
    EXPECT_EQ(got[i].flags, want[i].flags) << i;
    EXPECT_EQ(got[i].local, want[i].local) << i;
    EXPECT_EQ(got[i].canonical, want[i].canonical) << i;
    EXPECT_EQ(got[i].last, want[i].last) << i;
  }
  // The writer writes the same bytes for the same changes.
  std::vector<uint64_t> again(w.size(), 0);
  WritePlanWriter writer({reinterpret_cast<uint8_t*>(again.data()), again.size() * 8},
                         {{0, 0, 4096, 0, 0}, {1, kPlanTensorFullVerify, 64, 0, 0}},
                         kPlanVersionCompact);
  ASSERT_TRUE(writer.Add(0, 10, 1010, std::vector<uint8_t>{1, 2, 3}, true).ok());
  ASSERT_TRUE(writer.Add(0, 40, 1040, std::vector<uint8_t>{7}, false).ok());
  ASSERT_TRUE(writer.Add(1, 0, 0, std::vector<uint8_t>(9, 9), true).ok());
  ASSERT_TRUE(writer.Add(0, 100, 1100, std::vector<uint8_t>(70, 5), true).ok());
  ASSERT_EQ(*writer.Finish(), w.size() * 8);
  EXPECT_EQ(again, w);
}

TEST(WritePlan, CompactShiftWrapsModulo64Bits) {
  // A canonical offset below the local one: the shift is negative as a signed number.
  std::vector<PlanTensor> tensors = {{0, 0, 100, 0, 0}};
  Buffer buf(1024);
  WritePlanWriter w(buf.span(), tensors, kPlanVersionCompact);
  const std::vector<uint8_t> two = {5, 6};
  ASSERT_TRUE(w.Add(0, 5000, 40, two, true).ok());
  auto total = w.Finish();
  ASSERT_TRUE(total.ok());
  auto r = WritePlanReader::Open(buf.span().first(*total));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->ForEach([&](const PlanRecord& rec, std::span<uint8_t> b) {
                 EXPECT_EQ(rec.local_offset, 5000u);
                 EXPECT_EQ(rec.canonical_offset, 40u);
                 EXPECT_EQ(b[1], 6);
                 return Status::Ok();
               }).ok());
}

TEST(WritePlan, CompactTryAddShortRefusesWhenFull) {
  // Room for exactly: tensor record + a 2-byte record + a 2-byte record (48 bytes).
  std::vector<PlanTensor> tensors = {{0, 0, 100, 0, 0}};
  const size_t room = WritePlanWriter::FixedBytes(1) + 48;
  Buffer buf(room);
  WritePlanWriter w(buf.span().first(room), tensors, kPlanVersionCompact);
  const std::vector<uint8_t> two = {1, 2};
  EXPECT_TRUE(w.TryAddShort(0, 0, 0, two, true));
  EXPECT_TRUE(w.TryAddShort(0, 10, 10, two, true));
  EXPECT_EQ(w.remaining(), 0u);
  EXPECT_FALSE(w.TryAddShort(0, 20, 20, two, true));
  EXPECT_EQ(w.Add(0, 20, 20, two, true).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(w.record_count(), 2u);
  // No room for a tensor record and its first change: nothing is written.
  Buffer small(WritePlanWriter::FixedBytes(1) + 24);
  WritePlanWriter s(small.span(), tensors, kPlanVersionCompact);
  EXPECT_FALSE(s.TryAddShort(0, 0, 0, two, true));
  EXPECT_EQ(s.remaining(), 24u);
  EXPECT_EQ(s.Add(0, 0, 0, two, true).code(), StatusCode::kResourceExhausted);
}

TEST(WritePlan, UnknownWriterVersionIsAnError) {
  Buffer buf(1024);
  WritePlanWriter w(buf.span(), {{0, 0, 100, 0, 0}}, 3);
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  const std::vector<uint8_t> two = {1, 2};
  EXPECT_FALSE(w.TryAddShort(0, 0, 0, two, true));
  EXPECT_EQ(w.Add(0, 0, 0, two, true).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(w.Finish().ok());
}

TEST(WritePlan, RejectsMalformedCompactBuffers) {
  // A version 2 plan: tensor record at `rec`, a short record at rec + 16 (3 bytes), a long
  // record at rec + 32 (70 bytes).
  Buffer buf(4096);
  WritePlanWriter w(buf.span(), {{0, 0, 200, 0, 0}}, kPlanVersionCompact);
  ASSERT_TRUE(w.Add(0, 10, 20, std::vector<uint8_t>(3, 9), true).ok());
  ASSERT_TRUE(w.Add(0, 100, 110, std::vector<uint8_t>(70, 9), true).ok());
  const uint64_t used = *w.Finish();
  ASSERT_TRUE(WritePlanReader::Open(buf.span().first(used)).ok());
  const size_t rec = sizeof(PlanHeader) + sizeof(PlanTensor);
  auto get64 = [&](size_t at) {
    uint64_t v;
    std::memcpy(&v, buf.span().data() + at, 8);
    return v;
  };
  const uint64_t tensor_word = get64(rec), short_word = get64(rec + 16),
                 long_word = get64(rec + 32);
  ASSERT_EQ(tensor_word & 3, kPlanKindTensor);
  ASSERT_EQ(short_word & 3, kPlanKindShort);
  ASSERT_EQ(long_word & 3, kPlanKindLong);
  struct Case {
    const char* label;
    std::function<void(std::span<uint8_t>)> edit;
    uint64_t size;
    const char* msg;
  } cases[] = {
      {"kind 3", [&](auto b) { Put64(b, rec + 16, short_word | 3); }, used, "record kind"},
      {"tensor reserved bits", [&](auto b) { Put64(b, rec, tensor_word | 8); }, used,
       "reserved bits"},
      {"long reserved bits", [&](auto b) { Put64(b, rec + 32, long_word | 16); }, used,
       "reserved bits"},
      {"tensor index", [&](auto b) { Put64(b, rec, tensor_word | uint64_t{1} << 32); }, used,
       "tensor index out of range"},
      {"no tensor record", [&](auto b) { Put64(b, rec, kPlanKindLong | uint64_t{8} << 32); }, used,
       "before any tensor record"},
      {"long length 0", [&](auto b) { Put64(b, rec + 32, long_word & 0xffffffffull); }, used,
       "length 0"},
      {"shift", [&](auto b) { Put64(b, rec + 8, 150); }, used, "beyond the tensor"},
      {"short offset", [&](auto b) { Put64(b, rec + 16, short_word + (uint64_t{200} << 9)); }, used,
       "beyond the tensor"},
      {"long length", [&](auto b) { Put64(b, rec + 32, long_word + (uint64_t{100} << 32)); }, used,
       "beyond the tensor"},
      {"truncated tensor record", [&](auto b) { Put64(b, 24, rec + 8); }, rec + 8, "truncated"},
      {"truncated long record", [&](auto b) { Put64(b, 24, rec + 40); }, rec + 40, "truncated"},
      {"data past the plan", [&](auto b) { Put64(b, 24, used - 8); }, used - 8, "past the plan"},
      {"record count", [&](auto b) { Put64(b, 16, 3); }, used, "found 2"},
  };
  for (const Case& c : cases) {
    Status s = OpenEdited(buf, c.edit, c.size);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.label;
    EXPECT_NE(s.message().find(c.msg), std::string::npos) << c.label << ": " << s.message();
  }
}

}  // namespace
}  // namespace deltakv::deltasync
