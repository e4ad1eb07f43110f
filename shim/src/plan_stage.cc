#include "shim/plan_stage.h"

#include <cstring>
#include <vector>

namespace deltakv::shim {

using deltasync::AdlerDelta;
using deltasync::kAdlerModulus;
using deltasync::PlanRecord;
using deltasync::PlanTensor;

namespace {

// Records shorter than this (almost all of a sparse delta's: a few bytes each) have their sums
// added inline; longer ones go through AdlerDelta::AddXorRun's vectorized kernels.
constexpr uint32_t kInlineSumBytes = 64;
// Inline terms |(i mod M) * d| are below 2^24; reducing after 2^32 of them keeps the sums
// far from overflow.
constexpr uint64_t kReduceAfterTerms = uint64_t{1} << 32;

int64_t ReduceMod(int64_t v) {
  const int64_t r = v % static_cast<int64_t>(kAdlerModulus);
  return r < 0 ? r + kAdlerModulus : r;
}

// One plan tensor's sums over a part, merged into the caller's StagedTensor once the whole part
// has staged (a failed part leaves the caller's sums as they were).
struct PartSums {
  int64_t s1 = 0;  // inline terms of the change new - old over owned positions
  int64_t s2 = 0;
  uint64_t terms = 0;
  StagedTensor staged;  // long records' sums, full-verify sums, bytes changed

  void MergeInto(StagedTensor& out) {
    staged.delta.Merge(AdlerDelta::FromSums(static_cast<uint32_t>(ReduceMod(s1)),
                                            static_cast<uint32_t>(ReduceMod(s2))));
    out.Merge(staged);
  }
};

// Turns one record's XOR bytes `x` into new bytes, written back to `x` and to `packed`, from its
// `old` bytes (`old` may alias `packed`: each byte is read before it is written), and adds the
// record's sums.
inline void StageRecord(const PlanRecord& rec, bool owner, bool full_verify, const uint8_t* old,
                        uint8_t* x, uint8_t* packed, PartSums& sums) {
  const uint32_t n = rec.length;
  sums.staged.bytes_changed += n;
  const uint64_t position = rec.canonical_offset % kAdlerModulus;
  if (!owner) {
    for (uint32_t i = 0; i < n; ++i) packed[i] = x[i] = static_cast<uint8_t>(old[i] ^ x[i]);
  } else if (n < kInlineSumBytes && position + n <= kAdlerModulus) {
    int64_t s1 = 0, s2 = 0;
    for (uint32_t i = 0; i < n; ++i) {
      const uint8_t o = old[i];
      const uint8_t v = static_cast<uint8_t>(o ^ x[i]);
      packed[i] = x[i] = v;
      const int64_t d = int64_t{v} - int64_t{o};
      s1 += d;
      s2 += static_cast<int64_t>(position + i) * d;
    }
    sums.s1 += s1;
    sums.s2 += s2;
    sums.terms += n;
    if (sums.terms >= kReduceAfterTerms) {
      sums.s1 = ReduceMod(sums.s1);
      sums.s2 = ReduceMod(sums.s2);
      sums.terms = 0;
    }
  } else {
    sums.staged.delta.AddXorRun(rec.canonical_offset, {old, n}, {x, n});
    for (uint32_t i = 0; i < n; ++i) packed[i] = x[i] = static_cast<uint8_t>(old[i] ^ x[i]);
  }
  if (owner && full_verify) sums.staged.full.AddBytes(rec.canonical_offset, {x, n});
}

}  // namespace

Status CheckPlanRecord(const PlanRecord& rec, std::span<const PlanTensor> plan_tensors,
                       const std::vector<LocalTensor>& tensors) {
  uint32_t t = plan_tensors[rec.tensor].rank_tensor;
  if (t >= tensors.size()) {
    return InvalidArgument("plan names tensor #" + std::to_string(t) + ", this rank registered " +
                           std::to_string(tensors.size()));
  }
  const LocalTensor& lt = tensors[t];
  if (rec.local_offset > lt.bytes || rec.length > lt.bytes - rec.local_offset) {
    return InvalidArgument("plan writes [" + std::to_string(rec.local_offset) + ", +" +
                           std::to_string(rec.length) + ") outside tensor '" + lt.name + "' of " +
                           std::to_string(lt.bytes) + " local bytes");
  }
  return Status::Ok();
}

StatusOr<ScatterBatch> StagePartToBatch(const deltasync::WritePlanReader& plan,
                                        const std::vector<LocalTensor>& tensors,
                                        DeviceBackend* gather, std::vector<StagedTensor>* sums) {
  if (sums->size() != plan.tensors().size()) return Internal("one sum per plan tensor");
  const std::span<const PlanTensor> plan_tensors = plan.tensors();
  // CheckPlanRecord without building its message: false for a record outside its tensor, else
  // the device address of the record's first byte in *device.
  auto locate = [&](const PlanRecord& rec, uint8_t** device) {
    const uint32_t t = plan_tensors[rec.tensor].rank_tensor;
    if (t >= tensors.size()) return false;
    const LocalTensor& lt = tensors[t];
    if (rec.local_offset > lt.bytes || rec.length > lt.bytes - rec.local_offset) return false;
    *device = static_cast<uint8_t*>(lt.device) + rec.local_offset;
    return true;
  };
  // The packed bytes of record k start at the sum of the lengths before it; the walks below
  // stop at data_bytes() should the plan not be the one Open counted.
  const uint64_t data_bytes = plan.data_bytes();
  auto fits = [&](uint64_t at, const PlanRecord& rec) { return rec.length <= data_bytes - at; };
  ScatterBatch batch;
  batch.data.resize(data_bytes);
  batch.ops.reserve(plan.record_count());
  std::vector<PartSums> part(plan_tensors.size());
  uint8_t* const data = batch.data.data();
  uint64_t at = 0;
  if (gather == nullptr) {
    // Host-addressable weights: one walk checks, reads the old bytes in place and stages. The
    // weight lines a sparse part reads are scattered over the tensors and almost never cached,
    // so each record's line is prefetched kAhead records before it is staged.
    struct Staging {
      PlanRecord rec;
      uint8_t* x;
      uint8_t* device;
      uint8_t* packed;
    };
    constexpr size_t kAhead = 16;
    Staging ring[kAhead];
    size_t queued = 0;
    auto stage = [&](const Staging& e) {
      const PlanTensor& pt = plan_tensors[e.rec.tensor];
      StageRecord(e.rec, e.rec.flags & deltasync::kPlanRecordOwner,
                  pt.flags & deltasync::kPlanTensorFullVerify, e.device, e.x, e.packed,
                  part[e.rec.tensor]);
    };
    RETURN_IF_ERROR(plan.ForEach([&](const PlanRecord& rec, std::span<uint8_t> x) -> Status {
      uint8_t* device = nullptr;
      if (!locate(rec, &device)) return CheckPlanRecord(rec, plan_tensors, tensors);
      if (!fits(at, rec)) return Internal("plan changed after it was opened");
      __builtin_prefetch(device);
      Staging& slot = ring[queued % kAhead];
      if (queued >= kAhead) stage(slot);
      slot = {rec, x.data(), device, data + at};
      ++queued;
      batch.ops.push_back({device, data + at, rec.length});
      at += rec.length;
      return Status::Ok();
    }));
    for (size_t i = queued > kAhead ? queued - kAhead : 0; i < queued; ++i) stage(ring[i % kAhead]);
  } else {
    // One walk checks and lays out the batch, one Gather brings every old byte into it (a
    // device backend moves them in a few launches), one walk stages in place.
    RETURN_IF_ERROR(plan.ForEach([&](const PlanRecord& rec, std::span<uint8_t>) -> Status {
      uint8_t* device = nullptr;
      if (!locate(rec, &device)) return CheckPlanRecord(rec, plan_tensors, tensors);
      if (!fits(at, rec)) return Internal("plan changed after it was opened");
      batch.ops.push_back({device, data + at, rec.length});
      at += rec.length;
      return Status::Ok();
    }));
    RETURN_IF_ERROR(gather->Gather(batch.ops));
    at = 0;
    RETURN_IF_ERROR(plan.ForEach([&](const PlanRecord& rec, std::span<uint8_t> x) -> Status {
      if (!fits(at, rec)) return Internal("plan changed after it was opened");
      const PlanTensor& pt = plan_tensors[rec.tensor];
      StageRecord(rec, rec.flags & deltasync::kPlanRecordOwner,
                  pt.flags & deltasync::kPlanTensorFullVerify, data + at, x.data(), data + at,
                  part[rec.tensor]);
      at += rec.length;
      return Status::Ok();
    }));
  }
  for (size_t t = 0; t < part.size(); ++t) part[t].MergeInto((*sums)[t]);
  return batch;
}

StatusOr<std::vector<StagedTensor>> StagePlan(const deltasync::WritePlanReader& plan,
                                              const std::vector<LocalTensor>& tensors,
                                              DeviceBackend& backend) {
  std::vector<StagedTensor> staged(plan.tensors().size());
  RETURN_IF_ERROR(StagePartToBatch(plan, tensors, &backend, &staged).status());
  return staged;
}

StatusOr<ScatterBatch> PackScatter(const deltasync::WritePlanReader& plan,
                                   const std::vector<LocalTensor>& tensors) {
  ScatterBatch batch;
  RETURN_IF_ERROR(plan.ForEach([&](const PlanRecord& rec, std::span<uint8_t>) -> Status {
    return CheckPlanRecord(rec, plan.tensors(), tensors);
  }));
  batch.data.resize(plan.data_bytes());
  batch.ops.reserve(plan.record_count());
  uint8_t* out = batch.data.data();
  RETURN_IF_ERROR(plan.ForEach([&](const PlanRecord& rec, std::span<uint8_t> bytes) -> Status {
    if (bytes.size() > batch.data.size() - static_cast<size_t>(out - batch.data.data())) {
      return Internal("plan changed after it was opened");
    }
    const LocalTensor& lt = tensors[plan.tensors()[rec.tensor].rank_tensor];
    std::memcpy(out, bytes.data(), bytes.size());
    batch.ops.push_back({static_cast<uint8_t*>(lt.device) + rec.local_offset, out, rec.length});
    out += bytes.size();
    return Status::Ok();
  }));
  return batch;
}

}  // namespace deltakv::shim
