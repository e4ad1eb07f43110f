// Staging a plan part: the cpu backend's in-place walk and the default path through Gather give
// the same new bytes, batch and partial sums, equal to a byte-by-byte reference; a bad record
// fails the part and leaves the sums as they were.
#include "shim/plan_stage.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backends.h"
#include "deltasync/adler32.h"
#include "deltasync/write_plan.h"
#include "shim/device_backend.h"

namespace deltakv::shim {
namespace {

using deltasync::AdlerDelta;
using deltasync::PlanTensor;
using deltasync::WritePlanReader;
using deltasync::WritePlanWriter;

// Host memory behind the generic interface only: StagePart is DeviceBackend's default.
class GatherOnlyBackend final : public DeviceBackend {
 public:
  std::string_view name() const override { return "gather-only"; }
  Status Gather(std::span<const CopyOp> ops) override {
    ++gathers;
    for (const CopyOp& op : ops) std::memcpy(op.host, op.device, op.bytes);
    return Status::Ok();
  }
  Status Scatter(std::span<const CopyOp> ops) override {
    for (const CopyOp& op : ops) std::memcpy(op.device, op.host, op.bytes);
    return Status::Ok();
  }
  int gathers = 0;
};

struct Rec {
  uint32_t tensor;
  uint64_t local;
  uint64_t canonical;
  std::vector<uint8_t> bytes;
  bool owner;
};

struct Part {
  std::vector<uint64_t> words;
  uint64_t used = 0;
  std::span<uint8_t> span() { return {reinterpret_cast<uint8_t*>(words.data()), used}; }
};

Part Write(const std::vector<PlanTensor>& table, const std::vector<Rec>& recs,
           uint32_t version = deltasync::kPlanVersion) {
  Part p;
  p.words.assign(1 << 16, 0);
  WritePlanWriter w({reinterpret_cast<uint8_t*>(p.words.data()), p.words.size() * 8}, table,
                    version);
  for (const Rec& r : recs)
    EXPECT_TRUE(w.Add(r.tensor, r.local, r.canonical, r.bytes, r.owner).ok());
  p.used = *w.Finish();
  return p;
}

TEST(PlanStage, InPlaceAndGatheredMatchTheReference) {
  // Tensor 0: canonical bytes == local bytes, long enough to cross position 65521; tensor 1:
  // small and full-verify, at local offset 100 of its rank tensor.
  const uint64_t n0 = 70000, n1 = 300;
  std::vector<uint8_t> w0(n0), w1(n1 + 100);
  std::mt19937_64 rng(3);
  for (auto& b : w0) b = static_cast<uint8_t>(rng());
  for (auto& b : w1) b = static_cast<uint8_t>(rng());
  const std::vector<PlanTensor> table = {{0, 0, n0, 0, 0},
                                         {1, deltasync::kPlanTensorFullVerify, n1, 0, 0}};
  std::vector<Rec> recs;
  uint64_t at = 0;
  for (uint32_t len : {1u, 2u, 16u, 63u, 64u, 300u, 5u, 9000u, 3u}) {
    recs.push_back({0, at, at, {}, recs.size() % 4 != 3});
    for (uint32_t i = 0; i < len; ++i) recs.back().bytes.push_back(static_cast<uint8_t>(rng()));
    at += len + rng() % 5000;
  }
  recs.push_back({0, 65515, 65515, std::vector<uint8_t>(12, 0x5a), true});  // wraps mod 65521
  recs.push_back({1, 100, 0, std::vector<uint8_t>(n1, 0x33), true});
  std::sort(recs.begin(), recs.end(), [](const Rec& a, const Rec& b) {
    return a.tensor != b.tensor ? a.tensor < b.tensor : a.canonical < b.canonical;
  });

  // Reference: byte by byte.
  std::vector<AdlerDelta> want_delta(2), want_full(2);
  uint64_t want_bytes = 0;
  std::vector<uint8_t> want_new;
  for (const Rec& r : recs) {
    const uint8_t* old = (r.tensor == 0 ? w0.data() : w1.data()) + r.local;
    for (size_t i = 0; i < r.bytes.size(); ++i) {
      const uint8_t v = old[i] ^ r.bytes[i];
      want_new.push_back(v);
      if (r.owner) {
        want_delta[r.tensor].AddByte(r.canonical + i, old[i], v);
        if (r.tensor == 1) want_full[1].AddByte(r.canonical + i, 0, v);
      }
    }
    want_bytes += r.bytes.size();
  }

  const std::vector<LocalTensor> locals = {{"a", w0.data(), n0}, {"b", w1.data(), n1 + 100}};
  GatherOnlyBackend gather_only;
  auto cpu = MakeDeviceBackend("cpu");
  ASSERT_TRUE(cpu.ok());
  for (DeviceBackend* backend : {static_cast<DeviceBackend*>(&gather_only), cpu->get()}) {
    SCOPED_TRACE(std::string(backend->name()));
    Part part = Write(table, recs);
    auto reader = WritePlanReader::Open(part.span());
    ASSERT_TRUE(reader.ok());
    std::vector<StagedTensor> sums(2);
    auto batch =
        StagePartToBatch(*reader, locals, backend == cpu->get() ? nullptr : backend, &sums);
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    EXPECT_EQ(batch->data, want_new);
    ASSERT_EQ(batch->ops.size(), recs.size());
    uint64_t packed = 0;
    for (size_t i = 0; i < recs.size(); ++i) {
      const Rec& r = recs[i];
      EXPECT_EQ(batch->ops[i].device, (r.tensor == 0 ? w0.data() : w1.data()) + r.local);
      EXPECT_EQ(batch->ops[i].host, batch->data.data() + packed);
      EXPECT_EQ(batch->ops[i].bytes, r.bytes.size());
      packed += r.bytes.size();
    }
    // The plan's bytes are the new bytes too.
    std::vector<uint8_t> in_plan;
    ASSERT_TRUE(reader
                    ->ForEach([&](const deltasync::PlanRecord&, std::span<uint8_t> b) {
                      in_plan.insert(in_plan.end(), b.begin(), b.end());
                      return Status::Ok();
                    })
                    .ok());
    EXPECT_EQ(in_plan, want_new);
    for (int t = 0; t < 2; ++t) {
      EXPECT_EQ(sums[t].delta.s1(), want_delta[t].s1()) << t;
      EXPECT_EQ(sums[t].delta.s2(), want_delta[t].s2()) << t;
      EXPECT_EQ(sums[t].full.s1(), want_full[t].s1()) << t;
      EXPECT_EQ(sums[t].full.s2(), want_full[t].s2()) << t;
    }
    EXPECT_EQ(sums[0].bytes_changed + sums[1].bytes_changed, want_bytes);

    // Through StagePart, as the engine calls it (a compact plan, opened lazily), the commit
    // writes the new bytes.
    Part again = Write(table, recs, deltasync::kPlanVersionCompact);
    auto reader2 = WritePlanReader::OpenLazy(again.span());
    ASSERT_TRUE(reader2.ok());
    std::vector<StagedTensor> sums2(2);
    const std::vector<uint8_t> w0_before = w0, w1_before = w1;
    auto prepared = backend->StagePart(*reader2, locals, &sums2);
    ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
    EXPECT_EQ(sums2[0].delta.s2(), want_delta[0].s2());
    EXPECT_EQ(w0, w0_before);  // staging changes no weight byte
    ASSERT_TRUE(backend->CommitScatter(**prepared).ok());
    for (const Rec& r : recs) {
      const uint8_t* now = (r.tensor == 0 ? w0.data() : w1.data()) + r.local;
      const uint8_t* before = (r.tensor == 0 ? w0_before.data() : w1_before.data()) + r.local;
      for (size_t i = 0; i < r.bytes.size(); ++i) ASSERT_EQ(now[i], before[i] ^ r.bytes[i]);
    }
    w0 = w0_before;  // the next backend stages the same old bytes
    w1 = w1_before;
  }
  EXPECT_EQ(gather_only.gathers, 2);  // one Gather per part
}

// StagePartAndRegions lists every record's local range per rank tensor, extending the last
// range where a record starts at its end (also from one part to the next), in record order:
// the cpu backend in its staging walk and the default (StagePart, then AppendTouchedRegions)
// give the same lists, equal to a reference. Plan tensors 0 and 2 are halves of rank tensor 0;
// plan tensor 1 is rank tensor 1. A bad record fails the part.
TEST(PlanStage, StagedRegionsMatchTheReference) {
  std::mt19937_64 rng(31);
  const uint64_t n0 = 1 << 16, n1 = 4096;
  std::vector<uint8_t> w0(n0, 0), w1(n1, 0);
  const std::vector<PlanTensor> table = {
      {0, 0, n0 / 2, 0, 0}, {1, 0, n1, 0, 0}, {0, 0, n0 / 2, 0, 0}};
  const std::vector<LocalTensor> locals = {{"a", w0.data(), n0}, {"b", w1.data(), n1}};
  // Two parts of records in plan-tensor order; the first part ends and the second starts with
  // adjoining records of plan tensor 2.
  std::vector<std::vector<Rec>> parts(2);
  for (uint32_t t : {0u, 1u, 2u}) {
    const uint64_t base = t == 2 ? n0 / 2 : 0, size = t == 1 ? n1 : n0 / 2;
    uint64_t at = rng() % 4;
    while (true) {
      const uint32_t len = 1 + static_cast<uint32_t>(rng() % 20);
      if (at + len + 2 > size) break;
      Rec r{t, base + at, at, std::vector<uint8_t>(len, 1), true};
      (t == 2 && at > size / 2 ? parts[1] : parts[0]).push_back(r);
      at += len + (rng() % 3 == 0 ? 0 : 1 + rng() % 30);  // a third adjoin the next
    }
  }
  // The reference over both parts in order.
  std::map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>> want;
  for (const auto& part : parts) {
    for (const Rec& r : part) {
      auto& v = want[table[r.tensor].rank_tensor];
      if (!v.empty() && v.back().first + v.back().second == r.local) {
        v.back().second += r.bytes.size();
      } else {
        v.emplace_back(r.local, r.bytes.size());
      }
    }
  }
  ASSERT_GT(want[0].size(), 100u);
  ASSERT_LT(want[0].size() + want[1].size(), parts[0].size() + parts[1].size());  // merged
  GatherOnlyBackend gather_only;
  auto cpu = MakeDeviceBackend("cpu");
  ASSERT_TRUE(cpu.ok());
  for (DeviceBackend* backend : {static_cast<DeviceBackend*>(&gather_only), cpu->get()}) {
    SCOPED_TRACE(std::string(backend->name()));
    TouchedRegions regions;
    regions[5];  // lists of other tensors are left alone
    std::vector<StagedTensor> sums(3);
    for (const auto& recs : parts) {
      Part part = Write(table, recs, deltasync::kPlanVersionCompact);
      auto reader = WritePlanReader::OpenLazy(part.span());
      ASSERT_TRUE(reader.ok());
      auto prepared = backend->StagePartAndRegions(*reader, locals, &sums, &regions);
      ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
    }
    ASSERT_EQ(regions.size(), 3u);
    EXPECT_TRUE(regions[5].empty());
    for (uint32_t t : {0u, 1u}) {
      std::vector<std::pair<uint64_t, uint64_t>> got;
      for (const deltakv_region& r : regions[t]) got.emplace_back(r.offset, r.length);
      EXPECT_EQ(got, want[t]) << "rank tensor " << t;
    }
    // A record outside its tensor: the part fails.
    Part bad = Write(table, {{1, n1 - 2, 0, {1, 2, 3}, true}}, deltasync::kPlanVersionCompact);
    auto reader = WritePlanReader::OpenLazy(bad.span());
    ASSERT_TRUE(reader.ok());
    EXPECT_EQ(backend->StagePartAndRegions(*reader, locals, &sums, &regions).status().code(),
              StatusCode::kInvalidArgument);
  }
}

// The cpu backend stages owner records of up to 256 bytes a word at a time with masked word
// sums: every length 1..8 and longer ones up to 300 (several words, a partial last one, and past
// the word path's limit), owners and replicas, records ending at the last byte of the local
// tensor (no room for a word load), canonical positions on both sides of a multiple of 65521,
// and many short records in a row (each word store reaches into the next record's packed bytes).
TEST(PlanStage, ShortRecordsMatchTheByteReference) {
  std::mt19937_64 rng(17);
  const uint64_t n0 = 200000;
  std::vector<uint8_t> w0(n0);
  for (auto& b : w0) b = static_cast<uint8_t>(rng());
  const std::vector<PlanTensor> table = {{0, 0, 1 << 20, 0, 0}};
  const std::vector<LocalTensor> locals = {{"a", w0.data(), n0}};
  auto cpu = MakeDeviceBackend("cpu");
  ASSERT_TRUE(cpu.ok());
  // Two rounds in three build their batch in the buffers of the round before (as the cpu
  // backend reuses a committed part's): larger or smaller, holding its bytes and ops.
  ScatterBatch previous;
  for (int round = 0; round < 20; ++round) {
    std::vector<Rec> recs;
    uint64_t local = rng() % 16;
    // Canonical offsets run near a wrap of the position mod 65521 in some rounds.
    uint64_t canonical = round % 2 ? 65521 * (1 + rng() % 8) - 40 : rng() % 1000;
    while (recs.size() < 3000) {
      const uint32_t len = 1 + static_cast<uint32_t>(rng() % 5 == 0 ? rng() % 300 : rng() % 8);
      if (local + len > n0) break;
      recs.push_back({0, local, canonical, {}, rng() % 5 != 0});
      for (uint32_t i = 0; i < len; ++i) {
        recs.back().bytes.push_back(static_cast<uint8_t>(rng() % 3 == 0 ? 0 : rng()));
      }
      const uint64_t gap = len + rng() % 4;
      local += gap;
      canonical += gap;
    }
    // One record ending exactly at the tensor's last byte.
    const uint32_t tail = 1 + static_cast<uint32_t>(rng() % (round % 3 == 0 ? 300 : 7));
    recs.push_back({0, n0 - tail, canonical + 100, std::vector<uint8_t>(tail, 0xa5), true});

    std::vector<AdlerDelta> want(1);
    std::vector<uint8_t> want_new;
    for (const Rec& r : recs) {
      for (size_t i = 0; i < r.bytes.size(); ++i) {
        const uint8_t o = w0[r.local + i], v = static_cast<uint8_t>(o ^ r.bytes[i]);
        want_new.push_back(v);
        if (r.owner) want[0].AddByte(r.canonical + i, o, v);
      }
    }
    // Both plan versions, opened with Open and with OpenLazy (the engine's).
    Part part =
        Write(table, recs, round % 2 ? deltasync::kPlanVersionCompact : deltasync::kPlanVersion);
    auto reader =
        round % 4 < 2 ? WritePlanReader::Open(part.span()) : WritePlanReader::OpenLazy(part.span());
    ASSERT_TRUE(reader.ok());
    std::vector<StagedTensor> sums(1);
    const bool recycle = round % 3 != 0;
    const uint8_t* const old_data = previous.data.data();
    const bool data_fits = previous.data.capacity() >= reader->data_bytes() + 8;
    auto batch = StagePartToBatch(*reader, locals, nullptr, &sums,
                                  recycle ? std::move(previous) : ScatterBatch{});
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    ASSERT_EQ(batch->data, want_new) << "round " << round;
    ASSERT_EQ(batch->ops.size(), recs.size());
    if (recycle && data_fits) {
      EXPECT_EQ(batch->data.data(), old_data) << "round " << round;
    }
    uint64_t at = 0;
    for (size_t i = 0; i < recs.size(); ++i) {
      const CopyOp& op = batch->ops[i];
      ASSERT_EQ(op.device, w0.data() + recs[i].local) << "round " << round << " op " << i;
      ASSERT_EQ(op.host, batch->data.data() + at) << "round " << round << " op " << i;
      ASSERT_EQ(op.bytes, recs[i].bytes.size()) << "round " << round << " op " << i;
      at += op.bytes;
    }
    EXPECT_EQ(sums[0].delta.s1(), want[0].s1()) << "round " << round;
    EXPECT_EQ(sums[0].delta.s2(), want[0].s2()) << "round " << round;
    EXPECT_EQ(sums[0].bytes_changed, want_new.size());
    // The plan holds the new bytes, and its padding (after each record's bytes, up to the next
    // multiple of 8) stays zero.
    std::vector<uint8_t> in_plan;
    uint64_t nonzero_padding = 0;
    ASSERT_TRUE(reader
                    ->ForEach([&](const deltasync::PlanRecord&, std::span<uint8_t> b) {
                      in_plan.insert(in_plan.end(), b.begin(), b.end());
                      for (size_t i = b.size(); i % 8 != 0; ++i) nonzero_padding += b.data()[i] != 0;
                      return Status::Ok();
                    })
                    .ok());
    EXPECT_EQ(in_plan, want_new);
    EXPECT_EQ(nonzero_padding, 0u);
    previous = std::move(*batch);
  }
}

TEST(PlanStage, RecordOutsideItsTensorFailsAndKeepsTheSums) {
  std::vector<uint8_t> w(64, 7);
  const std::vector<PlanTensor> table = {{0, 0, 1000, 0, 0}};
  const std::vector<LocalTensor> locals = {{"w", w.data(), w.size()}};
  GatherOnlyBackend gather_only;
  auto cpu = MakeDeviceBackend("cpu");
  ASSERT_TRUE(cpu.ok());
  for (DeviceBackend* backend : {static_cast<DeviceBackend*>(&gather_only), cpu->get()}) {
    Part part = Write(table, {{0, 0, 0, {1, 2, 3}, true}, {0, 60, 500, {1, 2, 3, 4, 5}, true}});
    auto reader = WritePlanReader::Open(part.span());
    ASSERT_TRUE(reader.ok());
    std::vector<StagedTensor> sums(1);
    auto prepared = backend->StagePart(*reader, locals, &sums);
    ASSERT_EQ(prepared.status().code(), StatusCode::kInvalidArgument) << backend->name();
    EXPECT_NE(prepared.status().message().find("outside tensor 'w'"), std::string::npos);
    EXPECT_EQ(sums[0].delta.s1(), 0u);
    EXPECT_EQ(sums[0].bytes_changed, 0u);
    EXPECT_EQ(w, std::vector<uint8_t>(64, 7));
  }
}

// A lazily opened plan that Open refuses (a bad record after many good ones, or a header
// whose record count is wrong) fails staging with Open's error on both paths, after the
// host path has begun staging: the sums and weights stay as they were.
TEST(PlanStage, LazilyOpenedBadPlanFailsWithOpensErrorAndKeepsTheSums) {
  std::vector<uint8_t> w(4096, 7);
  const std::vector<PlanTensor> table = {{0, 0, 5000, 0, 0}};
  const std::vector<LocalTensor> locals = {{"w", w.data(), w.size()}};
  std::vector<Rec> recs;
  for (uint64_t i = 0; i < 100; ++i) recs.push_back({0, 20 * i, 20 * i, {1, 2, 3}, true});
  GatherOnlyBackend gather_only;
  auto cpu = MakeDeviceBackend("cpu");
  ASSERT_TRUE(cpu.ok());
  const size_t header = sizeof(deltasync::PlanHeader) + sizeof(PlanTensor);
  struct Case {
    const char* label;
    std::function<void(std::span<uint8_t>)> edit;
  } cases[] = {
      // The last record (short: 8-byte word, 8 bytes of data) names a local offset whose
      // canonical range lies beyond the tensor.
      {"canonical range",
       [](std::span<uint8_t> b) {
         uint64_t h;
         std::memcpy(&h, b.data() + b.size() - 16, 8);
         h = (h & 511) | (uint64_t{4999} << 9);
         std::memcpy(b.data() + b.size() - 16, &h, 8);
       }},
      {"count low", [](std::span<uint8_t> b) { b[16] = 99; }},
      {"count high", [](std::span<uint8_t> b) { b[16] = 101; }},
  };
  for (const Case& c : cases) {
    for (DeviceBackend* backend : {static_cast<DeviceBackend*>(&gather_only), cpu->get()}) {
      SCOPED_TRACE(std::string(c.label) + " " + std::string(backend->name()));
      Part part = Write(table, recs, deltasync::kPlanVersionCompact);
      ASSERT_GT(part.used, header + 100 * 16);
      c.edit(part.span());
      const Status eager = WritePlanReader::Open(part.span()).status();
      ASSERT_EQ(eager.code(), StatusCode::kInvalidArgument);
      auto reader = WritePlanReader::OpenLazy(part.span());
      ASSERT_TRUE(reader.ok()) << reader.status().ToString();
      std::vector<StagedTensor> sums(1);
      auto prepared = backend->StagePart(*reader, locals, &sums);
      EXPECT_EQ(prepared.status().code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(prepared.status().message(), eager.message());
      EXPECT_EQ(sums[0].delta.s1(), 0u);
      EXPECT_EQ(sums[0].delta.s2(), 0u);
      EXPECT_EQ(sums[0].bytes_changed, 0u);
      EXPECT_EQ(w, std::vector<uint8_t>(4096, 7));
    }
  }
}

// A commit's batches written in one pass over the cpu backend's threads (enough ops that the
// work splits, boundaries falling inside and between batches) land exactly like one-by-one
// commits, and every other byte stays.
TEST(PlanStage, CommitScattersWritesEveryBatchExactly) {
  auto cpu = MakeDeviceBackend("cpu");
  ASSERT_TRUE(cpu.ok());
  std::mt19937_64 rng(9);
  std::vector<uint8_t> device(8u << 20);
  for (auto& b : device) b = static_cast<uint8_t>(rng());
  std::vector<uint8_t> expected = device;
  std::vector<std::unique_ptr<PreparedScatter>> prepared;
  size_t at = 0;
  for (int b = 0; b < 3; ++b) {
    ScatterBatch batch;
    std::vector<std::pair<size_t, size_t>> ranges;  // (device offset, length)
    for (int i = 0; i < 30000 && at + 64 < device.size(); ++i) {
      at += 1 + rng() % 64;
      const size_t len = 1 + rng() % (i % 4 == 0 ? 40 : 12);  // every copy size class
      ranges.emplace_back(at, len);
      at += len;
    }
    for (const auto& [offset, len] : ranges) {
      for (size_t k = 0; k < len; ++k) batch.data.push_back(static_cast<uint8_t>(rng()));
    }
    size_t packed = 0;
    for (const auto& [offset, len] : ranges) {
      batch.ops.push_back({device.data() + offset, batch.data.data() + packed, len});
      std::memcpy(expected.data() + offset, batch.data.data() + packed, len);
      packed += len;
    }
    auto p = (*cpu)->PrepareScatter(std::move(batch));
    ASSERT_TRUE(p.ok());
    prepared.push_back(std::move(*p));
  }
  ASSERT_TRUE((*cpu)->CommitScatters(prepared).ok());
  EXPECT_TRUE(device == expected);
}

// The cpu backend's packed ops (8 bytes per op, the host bytes implicit): StagePartPacked gives
// the new bytes, ranges and sums of StagePartToBatch's CopyOps, a range longer than an op holds
// split into several, and marks that locate every 4096th op's bytes. A commit of packed parts
// and a CopyOp batch together, split over the copy threads (ops enough for every thread, so
// threads start inside parts), writes exactly the new bytes.
TEST(PlanStage, PackedOpsStageAndCommitLikeCopyOps) {
  const uint64_t n = 8u << 20;
  std::vector<uint8_t> w(n);
  std::mt19937_64 rng(21);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  const std::vector<PlanTensor> table = {{0, 0, n, 0, 0}};
  // Two parts' records in the first 6 MiB: short ones of every size class, and in each part one
  // longer than an op holds (2 and 4 ops); a CopyOp batch over the last 2 MiB.
  std::vector<std::vector<Rec>> parts(2);
  uint64_t at = 0;
  for (int p = 0; p < 2; ++p) {
    const uint64_t end = (p + 1) * (3u << 20);
    for (int i = 0; at + 300000 < end; ++i) {
      const uint32_t len = i == 5000 ? (p == 0 ? 70000u : 200000u)
                                     : 1 + static_cast<uint32_t>(rng() % (i % 9 == 0 ? 40 : 6));
      parts[p].push_back({0, at, at, {}, i % 3 != 0});
      for (uint32_t k = 0; k < len; ++k) {
        parts[p].back().bytes.push_back(static_cast<uint8_t>(1 + rng() % 255));
      }
      at += len + 1 + rng() % 24;
    }
  }
  ASSERT_GT(parts[0].size() + parts[1].size(), 2 * 16384u);  // more than one thread's share
  auto write = [&](const std::vector<Rec>& recs) {
    Part part;
    part.words.assign(1 << 19, 0);
    WritePlanWriter writer({reinterpret_cast<uint8_t*>(part.words.data()), part.words.size() * 8},
                           table, deltasync::kPlanVersionCompact);
    for (const Rec& r : recs)
      EXPECT_TRUE(writer.Add(0, r.local, r.canonical, r.bytes, r.owner).ok());
    part.used = *writer.Finish();
    return part;
  };
  const std::vector<LocalTensor> locals = {{"w", w.data(), n}};
  std::vector<uint8_t> expected = w;
  for (const std::vector<Rec>& recs : parts) {
    for (const Rec& r : recs) {
      for (size_t k = 0; k < r.bytes.size(); ++k) expected[r.local + k] ^= r.bytes[k];
    }
  }

  // StagePartPacked against StagePartToBatch, on the first part.
  {
    Part a = write(parts[0]), b = write(parts[0]);
    auto ra = WritePlanReader::OpenLazy(a.span());
    auto rb = WritePlanReader::OpenLazy(b.span());
    ASSERT_TRUE(ra.ok() && rb.ok());
    std::vector<StagedTensor> sa(1), sb(1);
    auto copies = StagePartToBatch(*ra, locals, nullptr, &sa);
    auto packed = StagePartPacked(*rb, locals, &sb);
    ASSERT_TRUE(copies.ok()) << copies.status().ToString();
    ASSERT_TRUE(packed.ok()) << packed.status().ToString();
    EXPECT_EQ(packed->data, copies->data);
    EXPECT_EQ(packed->ranges, copies->ops.size());
    EXPECT_EQ(packed->ops.size(), copies->ops.size() + 1);  // the 70000-byte range: 2 ops
    size_t op = 0;
    uint64_t offset = 0;
    for (const CopyOp& c : copies->ops) {
      uint64_t covered = 0;
      while (covered < c.bytes) {
        ASSERT_LT(op, packed->ops.size());
        if (op % kPackedMarkEvery == 0) {
          ASSERT_EQ(packed->marks.at(op / kPackedMarkEvery), offset) << op;
        }
        EXPECT_EQ(PackedDevice(packed->ops[op]), static_cast<uint8_t*>(c.device) + covered);
        const uint32_t len = PackedLength(packed->ops[op]);
        ASSERT_GE(len, 1u);
        ASSERT_LE(len, kPackedMaxLength);
        covered += len;
        offset += len;
        ++op;
      }
      EXPECT_EQ(covered, c.bytes);
    }
    EXPECT_EQ(op, packed->ops.size());
    EXPECT_EQ(packed->marks.size(), (packed->ops.size() + kPackedMarkEvery - 1) / kPackedMarkEvery);
    EXPECT_EQ(sa[0].delta.s1(), sb[0].delta.s1());
    EXPECT_EQ(sa[0].delta.s2(), sb[0].delta.s2());
    EXPECT_EQ(sa[0].bytes_changed, sb[0].bytes_changed);
  }

  // Through the cpu backend: both parts packed, a CopyOp batch beside them, one commit.
  auto cpu = MakeDeviceBackend("cpu");
  ASSERT_TRUE(cpu.ok());
  std::vector<Part> plans = {write(parts[0]), write(parts[1])};
  std::vector<std::unique_ptr<PreparedScatter>> prepared;
  std::vector<StagedTensor> sums(1);
  for (Part& plan : plans) {
    auto reader = WritePlanReader::OpenLazy(plan.span());
    ASSERT_TRUE(reader.ok());
    auto p = (*cpu)->StagePart(*reader, locals, &sums);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_NE(dynamic_cast<PackedPreparedScatter*>(p->get()), nullptr);
    prepared.push_back(std::move(*p));
  }
  EXPECT_EQ(prepared[0]->ops(), parts[0].size());
  EXPECT_EQ(prepared[1]->ops(), parts[1].size());
  ScatterBatch tail;
  tail.data.resize(1u << 20);
  for (auto& b : tail.data) b = static_cast<uint8_t>(rng());
  for (uint64_t k = 0; k < tail.data.size(); k += 64) {
    tail.ops.push_back({w.data() + (6u << 20) + 2 * k, tail.data.data() + k, 64});
    std::memcpy(expected.data() + (6u << 20) + 2 * k, tail.data.data() + k, 64);
  }
  auto p = (*cpu)->PrepareScatter(std::move(tail));
  ASSERT_TRUE(p.ok());
  prepared.insert(prepared.begin(), std::move(*p));  // the threads then split a packed part
  ASSERT_TRUE((*cpu)->CommitScatters(prepared).ok());
  EXPECT_TRUE(w == expected);
}

// Packed ops name device addresses below 2^48; a rank whose tensors reach past that stages
// through CopyOps, with the same result.
TEST(PlanStage, TensorsPastPackedAddressesStageThroughCopyOps) {
  const uint64_t limit = kPackedAddressLimit;
  auto* high = reinterpret_cast<uint8_t*>(limit - 16);
  EXPECT_TRUE(PackedAddressable({{"a", high, 16}}));
  EXPECT_FALSE(PackedAddressable({{"a", high, 17}}));
  EXPECT_FALSE(PackedAddressable({{"a", reinterpret_cast<uint8_t*>(limit), 1}}));
  EXPECT_TRUE(PackedAddressable({}));

  std::vector<uint8_t> w(4096, 7);
  // Tensor 1 is never written (no record names it): only its address matters here.
  const std::vector<LocalTensor> locals = {{"w", w.data(), w.size()},
                                           {"far", reinterpret_cast<uint8_t*>(limit), 64}};
  const std::vector<PlanTensor> table = {{0, 0, w.size(), 0, 0}};
  Part part = Write(table, {{0, 10, 10, {1, 2, 3}, true}, {0, 1000, 1000, {0x70}, true}},
                    deltasync::kPlanVersionCompact);
  auto reader = WritePlanReader::OpenLazy(part.span());
  ASSERT_TRUE(reader.ok());
  auto cpu = MakeDeviceBackend("cpu");
  ASSERT_TRUE(cpu.ok());
  std::vector<StagedTensor> sums(1);
  auto p = (*cpu)->StagePart(*reader, locals, &sums);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_NE(dynamic_cast<HostPreparedScatter*>(p->get()), nullptr);
  EXPECT_EQ((*p)->ops(), 2u);
  ASSERT_TRUE((*cpu)->CommitScatter(**p).ok());
  EXPECT_EQ(w[10], 7 ^ 1);
  EXPECT_EQ(w[12], 7 ^ 3);
  EXPECT_EQ(w[1000], 7 ^ 0x70);
  EXPECT_EQ(w[11], 7 ^ 2);
  EXPECT_EQ(w[13], 7);
}

// The cpu backend stages a part in the buffers of a part whose scatter was committed or
// dropped: syncs of random records over one tensor, two parts each, staged, committed (or
// dropped), then dropped; the weights follow the reference and later parts reuse the buffers.
TEST(PlanStage, CpuBackendStagesLaterPartsInEarlierPartsBuffers) {
  auto cpu = MakeDeviceBackend("cpu");
  ASSERT_TRUE(cpu.ok());
  std::mt19937_64 rng(23);
  std::vector<uint8_t> w(1u << 20);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  std::vector<uint8_t> reference = w;
  const std::vector<PlanTensor> table = {{0, 0, w.size(), 0, 0}};
  const std::vector<LocalTensor> locals = {{"w", w.data(), w.size()}};
  std::vector<const uint8_t*> buffers_seen;
  for (int sync = 0; sync < 6; ++sync) {
    const bool commit = sync != 3;
    std::vector<std::unique_ptr<PreparedScatter>> prepared;
    std::vector<uint8_t> next = reference;
    std::vector<Part> parts;  // kept until the commit (the plan holds the new bytes)
    for (int part_index = 0; part_index < 2; ++part_index) {
      std::vector<Rec> recs;
      // The first sync's parts are the largest, so later ones fit in their buffers.
      const size_t count = sync == 0 ? 8000 : 2000 + rng() % 6000;
      uint64_t local = part_index * (w.size() / 2) + rng() % 8;
      while (recs.size() < count) {
        const uint32_t len = 1 + static_cast<uint32_t>(rng() % 12);
        if (local + len + 64 > (part_index + 1) * (w.size() / 2)) break;  // not reached
        recs.push_back({0, local, local, {}, true});
        for (uint32_t i = 0; i < len; ++i) {
          recs.back().bytes.push_back(static_cast<uint8_t>(1 + rng() % 255));
          next[local + i] ^= recs.back().bytes.back();
        }
        local += len + 1 + rng() % 40;
      }
      parts.push_back(Write(table, recs, deltasync::kPlanVersionCompact));
      auto reader = WritePlanReader::OpenLazy(parts.back().span());
      ASSERT_TRUE(reader.ok());
      std::vector<StagedTensor> sums(1);
      auto p = (*cpu)->StagePart(*reader, locals, &sums);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      auto* host = dynamic_cast<PackedPreparedScatter*>(p->get());
      ASSERT_NE(host, nullptr);
      ASSERT_EQ(host->batch().ops.size(), recs.size());
      ASSERT_EQ((*p)->ops(), recs.size());
      buffers_seen.push_back(host->batch().data.data());
      prepared.push_back(std::move(*p));
    }
    ASSERT_TRUE(w == reference) << "staging changed the weights, sync " << sync;
    if (commit) {
      ASSERT_TRUE((*cpu)->CommitScatters(prepared).ok());
      reference = next;
    }
    ASSERT_TRUE(w == reference) << "sync " << sync;
    prepared.clear();  // the buffers go back to the backend
  }
  // Every sync after the first staged into the two buffers the first one allocated.
  for (size_t i = 2; i < buffers_seen.size(); ++i) {
    EXPECT_TRUE(buffers_seen[i] == buffers_seen[0] || buffers_seen[i] == buffers_seen[1]) << i;
  }
}

// BatchPool keeps given batches (emptied, capacity kept) up to its limit of bytes, hands the
// last one given back first, and drops what passes the limit.
TEST(PlanStage, BatchPoolKeepsBuffersUpToItsLimit) {
  auto batch = [](size_t data, size_t ops) {
    ScatterBatch b;
    b.data.resize(data, 1);
    b.ops.resize(ops);
    return b;
  };
  BatchPool pool;
  EXPECT_EQ(pool.Take().data.capacity(), 0u);  // empty: a new batch
  ScatterBatch a = batch(1000, 10);
  const uint8_t* a_data = a.data.data();
  const uint64_t a_bytes = a.data.capacity() + a.ops.capacity() * sizeof(CopyOp);
  pool.Give(std::move(a));
  EXPECT_EQ(pool.kept_bytes(), a_bytes);
  ScatterBatch again = pool.Take();
  EXPECT_EQ(again.data.data(), a_data);
  EXPECT_TRUE(again.data.empty() && again.ops.empty());
  EXPECT_GE(again.data.capacity(), 1000u);
  EXPECT_EQ(pool.kept_bytes(), 0u);
  pool.Give(ScatterBatch{});  // nothing to keep
  EXPECT_EQ(pool.kept_bytes(), 0u);

  pool.SetLimit(a_bytes + 10);
  pool.Give(std::move(again));
  pool.Give(batch(1000, 10));  // over the limit: freed
  EXPECT_EQ(pool.kept_bytes(), a_bytes);
  pool.SetLimit(0);  // no limit
  pool.Give(batch(2000, 20));
  pool.Give(batch(3000, 30));
  EXPECT_GT(pool.kept_bytes(), 3 * a_bytes);
  EXPECT_GE(pool.Take().data.capacity(), 3000u);  // last given, first taken
  pool.SetLimit(a_bytes);                         // trims to the limit
  EXPECT_LE(pool.kept_bytes(), a_bytes);
}

// The cpu backend keeps its copy threads between calls; a process forked after they started
// (an engine that forks workers after staging) has none of them, and its commits still run
// on copy threads of its own instead of waiting for helpers that do not exist.
TEST(PlanStage, CpuBackendCommitsInAProcessForkedAfterItsThreadsStarted) {
  auto cpu = MakeDeviceBackend("cpu");
  ASSERT_TRUE(cpu.ok());
  std::vector<uint8_t> device(4u << 20, 0);
  auto commit = [&](uint8_t value) -> bool {
    ScatterBatch batch;
    const size_t ops = 1u << 16;  // enough that the commit splits over the threads
    batch.data.assign(ops, value);
    for (size_t i = 0; i < ops; ++i)
      batch.ops.push_back({device.data() + 64 * i, &batch.data[i], 1});
    auto p = (*cpu)->PrepareScatter(std::move(batch));
    if (!p.ok()) return false;
    std::vector<std::unique_ptr<PreparedScatter>> prepared;
    prepared.push_back(std::move(*p));
    if (!(*cpu)->CommitScatters(prepared).ok()) return false;
    for (size_t i = 0; i < ops; ++i) {
      if (device[64 * i] != value) return false;
    }
    return true;
  };
  ASSERT_TRUE(commit(1));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(30);  // a commit waiting for the parent's threads would hang: fail instead
    const bool ok = commit(2);
    cpu->reset();  // and its own threads are joined
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "child ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // A child that only destroys the backend it inherited does not wait for the parent's threads.
  const pid_t quitter = fork();
  ASSERT_GE(quitter, 0);
  if (quitter == 0) {
    alarm(30);
    cpu->reset();
    _exit(0);
  }
  ASSERT_EQ(waitpid(quitter, &status, 0), quitter);
  ASSERT_TRUE(WIFEXITED(status)) << "child ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(commit(3));  // the parent's threads still serve it
}

// Every copy size from 0 to 40 bytes, at every alignment, with the neighbouring bytes on both
// sides checked: Scatter and Gather write exactly their ranges.
TEST(PlanStage, CpuCopiesOfEverySizeWriteExactlyTheirRange) {
  auto cpu = MakeDeviceBackend("cpu");
  ASSERT_TRUE(cpu.ok());
  std::mt19937_64 rng(11);
  for (size_t n = 0; n <= 40; ++n) {
    for (size_t align = 0; align < 8; ++align) {
      std::vector<uint8_t> device(64), host(64);
      for (auto& b : device) b = static_cast<uint8_t>(rng());
      for (auto& b : host) b = static_cast<uint8_t>(rng());
      std::vector<uint8_t> want_device = device, want_host = host;
      std::memcpy(want_device.data() + 8 + align, host.data() + 3, n);
      const CopyOp op{device.data() + 8 + align, host.data() + 3, n};
      ASSERT_TRUE((*cpu)->Scatter({&op, 1}).ok());
      ASSERT_EQ(device, want_device) << "scatter of " << n << " at +" << align;
      std::memcpy(want_host.data() + 3, device.data() + 8 + align, n);
      for (size_t k = 0; k < n; ++k) device[8 + align + k] ^= 0x5A;  // new bytes to read back
      std::memcpy(want_host.data() + 3, device.data() + 8 + align, n);
      ASSERT_TRUE((*cpu)->Gather({&op, 1}).ok());
      ASSERT_EQ(host, want_host) << "gather of " << n << " at +" << align;
    }
  }
}

}  // namespace
}  // namespace deltakv::shim
