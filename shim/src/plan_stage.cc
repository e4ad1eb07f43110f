#include "shim/plan_stage.h"

#include <cstring>
#include <vector>

namespace deltakv::shim {

using deltasync::PlanRecord;
using deltasync::PlanTensor;

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

StatusOr<std::vector<StagedTensor>> StagePlan(const deltasync::WritePlanReader& plan,
                                              const std::vector<LocalTensor>& tensors,
                                              DeviceBackend& backend) {
  // One Gather for the whole part: a device backend moves every record's old bytes in a few
  // launches and copies instead of one round trip per record (a part holds up to millions).
  uint64_t total = 0;
  size_t records = 0;
  RETURN_IF_ERROR(plan.ForEach([&](const PlanRecord& rec, std::span<uint8_t>) -> Status {
    RETURN_IF_ERROR(CheckPlanRecord(rec, plan.tensors(), tensors));
    total += rec.length;
    ++records;
    return Status::Ok();
  }));
  std::vector<uint8_t> old(total);
  std::vector<CopyOp> ops;
  ops.reserve(records);
  uint64_t at = 0;
  RETURN_IF_ERROR(plan.ForEach([&](const PlanRecord& rec, std::span<uint8_t>) -> Status {
    const LocalTensor& lt = tensors[plan.tensors()[rec.tensor].rank_tensor];
    ops.push_back({static_cast<uint8_t*>(lt.device) + rec.local_offset, old.data() + at,
                   rec.length});
    at += rec.length;
    return Status::Ok();
  }));
  RETURN_IF_ERROR(backend.Gather(ops));

  std::vector<StagedTensor> staged(plan.tensors().size());
  std::vector<uint8_t> zeros;
  at = 0;
  RETURN_IF_ERROR(plan.ForEach([&](const PlanRecord& rec, std::span<uint8_t> bytes) -> Status {
    std::span<const uint8_t> before(old.data() + at, rec.length);
    at += rec.length;
    StagedTensor& st = staged[rec.tensor];
    if (rec.flags & deltasync::kPlanRecordOwner) st.delta.AddXorRun(rec.canonical_offset, before, bytes);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] ^= before[i];
    st.bytes_changed += rec.length;
    if ((rec.flags & deltasync::kPlanRecordOwner) &&
        (plan.tensors()[rec.tensor].flags & deltasync::kPlanTensorFullVerify)) {
      zeros.assign(rec.length, 0);
      st.full.AddXorRun(rec.canonical_offset, zeros, bytes);
    }
    return Status::Ok();
  }));
  return staged;
}

StatusOr<ScatterBatch> PackScatter(const deltasync::WritePlanReader& plan,
                                   const std::vector<LocalTensor>& tensors) {
  ScatterBatch batch;
  uint64_t total = 0;
  RETURN_IF_ERROR(plan.ForEach([&](const PlanRecord& rec, std::span<uint8_t>) -> Status {
    RETURN_IF_ERROR(CheckPlanRecord(rec, plan.tensors(), tensors));
    total += rec.length;
    return Status::Ok();
  }));
  batch.data.resize(total);
  batch.ops.reserve(plan.record_count());
  uint8_t* out = batch.data.data();
  RETURN_IF_ERROR(plan.ForEach([&](const PlanRecord& rec, std::span<uint8_t> bytes) -> Status {
    const LocalTensor& lt = tensors[plan.tensors()[rec.tensor].rank_tensor];
    std::memcpy(out, bytes.data(), bytes.size());
    batch.ops.push_back({static_cast<uint8_t*>(lt.device) + rec.local_offset, out, rec.length});
    out += bytes.size();
    return Status::Ok();
  }));
  return batch;
}

}  // namespace deltakv::shim
