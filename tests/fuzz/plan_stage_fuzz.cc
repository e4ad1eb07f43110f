// Fuzzes a rank's staging of a plan part on host memory (StagePartToBatch without a gather
// backend, and StagePartPacked, the cpu backend's): plans built from the input with records of 1 to
// 300 bytes (the word-at-a-time path up to 256 bytes and the byte path), owners and replicas, a
// full-verify tensor, canonical offsets around multiples of 65521, local ranges up to and past
// the end of their tensor, and now and then padding bytes that are not zero; plans of both
// versions, opened with Open or OpenLazy. Either the part is refused with InvalidArgument (then
// a record lies outside its tensor, and no sum changed) or its new bytes, ops and sums equal a
// byte-by-byte reference, and the touched regions it lists equal a reference too. Each part is
// staged in the buffers of the last input's batch (as the cpu backend reuses a committed part's),
// holding that input's bytes and ops. A copy of the plan as written is staged into packed ops
// too: the same verdict, and the same new bytes, ranges, sums and regions. The weights are
// allocated at their exact sizes, so a read
// past a tensor's end is caught by the sanitizers (the fuzz build instruments the libraries too).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "backends.h"
#include "deltasync/adler32.h"
#include "deltasync/write_plan.h"
#include "fuzz_input.h"
#include "shim/plan_stage.h"

using namespace deltakv;
using namespace deltakv::deltasync;

namespace {

using Input = FuzzInput<4>;

struct Rec {
  uint32_t tensor;
  uint64_t local, canonical;
  std::vector<uint8_t> bytes;
  bool owner;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in{data, size};
  // Tensor 0: sharded-like (canonical offsets far from local ones); tensor 1: small,
  // full-verify. Exact-size allocations, so a read past a tensor's end is caught.
  const uint64_t local0 = 64 + in.Next(4000), local1 = 1 + in.Next(300);
  std::vector<uint8_t> w0(local0), w1(local1);
  for (size_t i = 0; i < w0.size(); ++i) w0[i] = static_cast<uint8_t>(i * 37 + 11);
  for (size_t i = 0; i < w1.size(); ++i) w1[i] = static_cast<uint8_t>(i * 101 + 3);
  const uint64_t canonical_base = 65521 * in.Next(4) + 65521 - in.Next(200);
  const std::vector<PlanTensor> table = {{0, 0, canonical_base + local0 + 100, 0, 0},
                                         {1, kPlanTensorFullVerify, local1 + 100, 0, 0}};
  std::vector<Rec> recs;
  while (!in.done() && recs.size() < 200) {
    Rec r;
    r.tensor = in.Next(5) == 0 ? 1 : 0;
    const uint64_t limit = r.tensor == 0 ? local0 : local1;
    const uint64_t len = 1 + (in.Next(4) == 0 ? in.Next(300) : in.Next(8));
    r.local = in.Next(limit + 4);  // now and then past the end
    r.canonical = (r.tensor == 0 ? canonical_base : 0) + in.Next(limit);
    r.owner = in.Next(4) != 0;
    for (uint64_t i = 0; i < len; ++i) r.bytes.push_back(static_cast<uint8_t>(in.Next(256)));
    if (r.canonical + len > table[r.tensor].canonical_length) continue;  // the reader refuses
    recs.push_back(std::move(r));
  }
  std::vector<uint64_t> words(1 << 14);  // 200 records of up to 300 bytes fit
  // Both plan versions (the input's length picks one, so a seed keeps its records).
  WritePlanWriter writer({reinterpret_cast<uint8_t*>(words.data()), words.size() * 8}, table,
                         size % 2 == 0 ? kPlanVersionCompact : kPlanVersion);
  for (const Rec& r : recs) {
    if (!writer.Add(r.tensor, r.local, r.canonical, r.bytes, r.owner).ok()) std::abort();
  }
  const uint64_t used = *writer.Finish();
  std::span<uint8_t> plan(reinterpret_cast<uint8_t*>(words.data()), used);
  // Nonzero padding after some records' bytes: staging must not count or write it.
  {
    auto reader = WritePlanReader::Open(plan);
    if (!reader.ok()) std::abort();
    uint64_t k = 0;
    (void)reader->ForEach([&](const PlanRecord&, std::span<uint8_t> b) {
      if (++k % 3 == 0 && b.size() % 8 != 0) {
        b.data()[b.size()] = 0xee;
      }
      return Status::Ok();
    });
  }

  // The reference, byte by byte.
  bool outside = false;
  std::vector<uint8_t> want_new;
  std::vector<AdlerDelta> want_delta(2), want_full(2);
  for (const Rec& r : recs) {
    const std::vector<uint8_t>& w = r.tensor == 0 ? w0 : w1;
    if (r.local > w.size() || r.bytes.size() > w.size() - r.local) {
      outside = true;
      break;
    }
    for (size_t i = 0; i < r.bytes.size(); ++i) {
      const uint8_t o = w[r.local + i], v = static_cast<uint8_t>(o ^ r.bytes[i]);
      want_new.push_back(v);
      if (r.owner) {
        want_delta[r.tensor].AddByte(r.canonical + i, o, v);
        if (r.tensor == 1) want_full[1].AddByte(r.canonical + i, 0, v);
      }
    }
  }

  const std::vector<shim::LocalTensor> locals = {{"a", w0.data(), w0.size()},
                                                 {"b", w1.data(), w1.size()}};
  const std::vector<uint8_t> w0_before = w0, w1_before = w1;
  // Opened with Open or OpenLazy (the engine's: the staging walk checks the records), as the
  // input's length picks.
  auto reader = (size / 2) % 2 ? WritePlanReader::OpenLazy(plan) : WritePlanReader::Open(plan);
  if (!reader.ok()) std::abort();
  std::vector<uint64_t> copy = words;  // staging turns the plan's XOR bytes into new bytes
  std::span<uint8_t> plan_copy(reinterpret_cast<uint8_t*>(copy.data()), used);
  std::vector<shim::StagedTensor> sums(2);
  static shim::ScatterBatch kept;  // the last input's batch, contents and all
  shim::TouchedRegions regions;
  regions[7] = {{1, 2}};  // another tensor's list: left alone
  auto batch = shim::StagePartToBatch(*reader, locals, nullptr, &sums, std::move(kept), &regions);
  if (w0 != w0_before || w1 != w1_before) std::abort();  // staging writes no weight byte
  // The packed path on the copy, in the last input's packed batch.
  auto reader_copy = WritePlanReader::OpenLazy(plan_copy);
  if (!reader_copy.ok()) std::abort();
  std::vector<shim::StagedTensor> packed_sums(2);
  static shim::PackedBatch packed_kept;
  shim::TouchedRegions packed_regions;
  packed_regions[7] = {{1, 2}};
  auto packed = shim::StagePartPacked(*reader_copy, locals, &packed_sums, std::move(packed_kept),
                                      &packed_regions);
  if (w0 != w0_before || w1 != w1_before) std::abort();
  if (packed.ok() != batch.ok()) std::abort();
  if (outside) {
    if (batch.ok() || batch.status().code() != StatusCode::kInvalidArgument) std::abort();
    if (packed.status().code() != StatusCode::kInvalidArgument) std::abort();
    for (const auto* all : {&sums, &packed_sums}) {
      for (const shim::StagedTensor& t : *all) {
        if (t.bytes_changed != 0 || t.delta.s1() != 0 || t.delta.s2() != 0) std::abort();
      }
    }
    return 0;
  }
  if (!batch.ok()) std::abort();
  if (batch->data != want_new || batch->ops.size() != recs.size()) std::abort();
  uint64_t at = 0;
  for (size_t i = 0; i < recs.size(); ++i) {
    const Rec& r = recs[i];
    const uint8_t* device = (r.tensor == 0 ? w0.data() : w1.data()) + r.local;
    if (batch->ops[i].device != device || batch->ops[i].bytes != r.bytes.size() ||
        batch->ops[i].host != batch->data.data() + at) {
      std::abort();
    }
    at += r.bytes.size();
  }
  for (int t = 0; t < 2; ++t) {
    if (sums[t].delta.s1() != want_delta[t].s1() || sums[t].delta.s2() != want_delta[t].s2() ||
        sums[t].full.s1() != want_full[t].s1() || sums[t].full.s2() != want_full[t].s2()) {
      std::abort();
    }
  }
  if (sums[0].bytes_changed + sums[1].bytes_changed != want_new.size()) std::abort();
  // Packed: one op per record (none is longer than an op holds), the bytes implicit.
  if (!packed.ok() || packed->data != want_new || packed->ranges != recs.size() ||
      packed->ops.size() != recs.size() ||
      packed->marks.size() != (recs.size() + shim::kPackedMarkEvery - 1) / shim::kPackedMarkEvery) {
    std::abort();
  }
  for (size_t i = 0; i < recs.size(); ++i) {
    const Rec& r = recs[i];
    const uint8_t* device = (r.tensor == 0 ? w0.data() : w1.data()) + r.local;
    if (shim::PackedDevice(packed->ops[i]) != device ||
        shim::PackedLength(packed->ops[i]) != r.bytes.size()) {
      std::abort();
    }
  }
  for (int t = 0; t < 2; ++t) {
    if (packed_sums[t].delta.s1() != sums[t].delta.s1() ||
        packed_sums[t].delta.s2() != sums[t].delta.s2() ||
        packed_sums[t].full.s1() != sums[t].full.s1() ||
        packed_sums[t].full.s2() != sums[t].full.s2() ||
        packed_sums[t].bytes_changed != sums[t].bytes_changed) {
      std::abort();
    }
  }
  if (packed_regions.size() != regions.size()) std::abort();
  for (const auto& [t, v] : regions) {
    const std::vector<deltakv_region>& p = packed_regions[t];
    if (p.size() != v.size()) std::abort();
    for (size_t i = 0; i < v.size(); ++i) {
      if (p[i].offset != v[i].offset || p[i].length != v[i].length) std::abort();
    }
  }
  packed_kept = std::move(*packed);
  // Regions: per rank tensor (plan tensor t is rank tensor t), a record that starts where the
  // list's last range ends extends it.
  std::map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>> want_regions;
  for (const Rec& r : recs) {
    auto& v = want_regions[r.tensor];
    if (!v.empty() && v.back().first + v.back().second == r.local) {
      v.back().second += r.bytes.size();
    } else {
      v.emplace_back(r.local, r.bytes.size());
    }
  }
  want_regions[7] = {{1, 2}};
  if (regions.size() != want_regions.size()) std::abort();
  for (const auto& [t, v] : want_regions) {
    const std::vector<deltakv_region>& got = regions[t];
    if (got.size() != v.size()) std::abort();
    for (size_t i = 0; i < v.size(); ++i) {
      if (got[i].offset != v[i].first || got[i].length != v[i].second) std::abort();
    }
  }
  kept = std::move(*batch);
  return 0;
}
