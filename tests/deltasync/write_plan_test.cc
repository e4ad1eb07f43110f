// Write plans: round trip, splitting, capacity, and every kind of malformed buffer.
#include "deltasync/write_plan.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace deltakv::deltasync {
namespace {

struct Buffer {
  explicit Buffer(size_t n) : words((n + 7) / 8, 0) {}
  std::span<uint8_t> span() { return {reinterpret_cast<uint8_t*>(words.data()), words.size() * 8}; }
  std::vector<uint64_t> words;
};

TEST(WritePlan, RoundTrip) {
  Buffer buf(1 << 16);
  std::vector<PlanTensor> tensors = {{3, 0, 1000, 11, 22}, {7, kPlanTensorFullVerify, 64, 1, 2}};
  WritePlanWriter w(buf.span(), tensors);
  std::mt19937 rng(1);
  struct Want {
    uint32_t t;
    uint64_t local, canon;
    std::vector<uint8_t> bytes;
    bool owner;
  };
  std::vector<Want> want;
  for (int i = 0; i < 50; ++i) {
    uint32_t t = i % 2;
    uint64_t cap = tensors[t].canonical_length;
    uint64_t canon = rng() % cap;
    uint64_t len = 1 + rng() % std::min<uint64_t>(cap - canon, 37);
    std::vector<uint8_t> bytes(len);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    want.push_back({t, canon + 5, canon, bytes, i % 3 == 0});
    ASSERT_TRUE(w.Add(t, canon + 5, canon, bytes, i % 3 == 0).ok());
  }
  auto used = w.Finish();
  ASSERT_TRUE(used.ok());
  auto r = WritePlanReader::Open(buf.span().first(*used));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
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
}

TEST(WritePlan, TryAddShortWritesWhatAddWrites) {
  // Every length 1..kShortBytes (and the cases it refuses), written by TryAddShort into one
  // buffer and by Add into another: byte-identical plans (zero padding included).
  std::vector<PlanTensor> tensors = {{0, 0, 1 << 20, 0, 0}};
  Buffer a(1 << 17), b(1 << 17);
  WritePlanWriter fast(a.span(), tensors), slow(b.span(), tensors);
  std::mt19937 rng(4);
  uint64_t at = 0;
  for (int i = 0; i < 600; ++i) {
    const size_t n = 1 + rng() % WritePlanWriter::kShortBytes;
    std::vector<uint8_t> bytes(n);
    for (auto& x : bytes) x = static_cast<uint8_t>(rng());
    const bool owner = rng() % 2 == 0;
    ASSERT_TRUE(fast.TryAddShort(0, at + 3, at, bytes, owner)) << i;
    ASSERT_TRUE(slow.Add(0, at + 3, at, bytes, owner).ok());
    at += n + rng() % 50;
  }
  std::vector<uint8_t> nine(WritePlanWriter::kShortBytes + 1, 1);
  EXPECT_FALSE(fast.TryAddShort(0, 0, 0, nine, true));  // longer than kShortBytes
  EXPECT_FALSE(fast.TryAddShort(0, 0, 0, {}, true));    // empty
  EXPECT_FALSE(fast.TryAddShort(1, 0, 0, std::span(nine).first(2), true));  // no such tensor
  EXPECT_EQ(fast.record_count(), slow.record_count());
  auto fu = fast.Finish();
  auto su = slow.Finish();
  ASSERT_TRUE(fu.ok() && su.ok());
  ASSERT_EQ(*fu, *su);
  EXPECT_EQ(std::memcmp(a.span().data(), b.span().data(), *fu), 0);
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

TEST(WritePlan, FullBufferIsResourceExhausted) {
  Buffer buf(256);
  WritePlanWriter w(buf.span(), {{0, 0, 1 << 20, 0, 0}});
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
  auto mutate = [&](auto edit) {
    Buffer copy(4096);
    std::memcpy(copy.span().data(), buf.span().data(), 4096);
    edit(copy.span());
    return WritePlanReader::Open(copy.span().first(used)).status();
  };
  auto put32 = [](std::span<uint8_t> b, size_t at, uint32_t v) {
    std::memcpy(b.data() + at, &v, 4);
  };
  auto put64 = [](std::span<uint8_t> b, size_t at, uint64_t v) {
    std::memcpy(b.data() + at, &v, 8);
  };
  const size_t rec = sizeof(PlanHeader) + sizeof(PlanTensor);
  struct Case {
    const char* label;
    std::function<void(std::span<uint8_t>)> edit;
    const char* msg;
  } cases[] = {
      {"magic", [&](auto b) { put64(b, 0, 1); }, "bad magic"},
      {"version", [&](auto b) { put32(b, 8, 9); }, "version 9"},
      {"tensor count", [&](auto b) { put32(b, 12, 1000); }, "tensor table too long"},
      {"record count", [&](auto b) { put64(b, 16, 2); }, "found 1"},
      {"bytes used", [&](auto b) { put64(b, 24, 1 << 20); }, "claims"},
      {"record tensor", [&](auto b) { put32(b, rec, 1); }, "tensor index out of range"},
      {"canonical range", [&](auto b) { put64(b, rec + 16, 95); }, "beyond the tensor"},
      {"length", [&](auto b) { put32(b, rec + 4, 4000); }, "beyond the tensor"},
  };
  for (const Case& c : cases) {
    Status s = mutate(c.edit);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.label;
    EXPECT_NE(s.message().find(c.msg), std::string::npos) << c.label << ": " << s.message();
  }
  EXPECT_FALSE(WritePlanReader::Open(buf.span().first(10)).ok());
  EXPECT_FALSE(WritePlanReader::Open(buf.span().first(used - 8)).ok());
}

}  // namespace
}  // namespace deltakv::deltasync
