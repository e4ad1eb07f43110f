// Staging and committing a write plan on one engine rank.
//
// Stage: for every record, gather the old bytes at its local range from device memory, turn
// the record's XOR bytes into new bytes in place (new = old ^ xor), and add the record's
// contribution to its tensor's incremental Adler-32 partial sums over canonical positions
// (owner records only, so replicated bytes are counted once across ranks). No device byte
// changes. A plan that arrives in parts is staged part by part; the sums of the parts add up
// (StagedTensor::Merge). Commit: the packed new bytes (StagePartToBatch, or PackScatter after
// StagePlan) go through the device backend's PrepareScatter before the pause and CommitScatter
// in it.
//
// Thread-safety: one call at a time per plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "deltasync/adler32.h"
#include "deltasync/write_plan.h"
#include "shim/device_backend.h"

namespace deltakv::shim {

// A weight tensor as registered by the engine on this rank.
struct LocalTensor {
  std::string name;
  void* device = nullptr;
  uint64_t bytes = 0;  // rank-local size
};

struct StagedTensor {
  deltasync::AdlerDelta delta;  // incremental partial sums over owned canonical positions
  // For plan tensors flagged kPlanTensorFullVerify (small tensors, whose plan covers every
  // byte): the partial sums of the new bytes against all-zero bytes, so that
  // full.Apply(Adler32(n zero bytes), n) is the Adler-32 of the whole new tensor.
  deltasync::AdlerDelta full;
  uint64_t bytes_changed = 0;

  void Merge(const StagedTensor& other) {
    delta.Merge(other.delta);
    full.Merge(other.full);
    bytes_changed += other.bytes_changed;
  }
};

// OK if the record's plan tensor is one of `plan_tensors`, names a registered tensor and its
// local range lies inside it; InvalidArgument naming the tensor otherwise. (For backends that
// stage a part themselves.)
Status CheckPlanRecord(const deltasync::PlanRecord& rec,
                       std::span<const deltasync::PlanTensor> plan_tensors,
                       const std::vector<LocalTensor>& tensors);

// Where one plan tensor's records go on this rank, resolved once per part (PartTargets).
struct PartTarget {
  uint8_t* base = nullptr;  // the rank tensor's device address
  uint64_t bytes = 0;       // its local size
  bool valid = false;       // false: the plan names a tensor this rank did not register
  bool full_verify = false;  // the plan tensor is flagged kPlanTensorFullVerify
  // True if `rec`'s local range lies inside the tensor (CheckPlanRecord says why not).
  bool Holds(const deltasync::PlanRecord& rec) const {
    return valid && rec.local_offset <= bytes && rec.length <= bytes - rec.local_offset;
  }
};
// One PartTarget per plan tensor.
std::vector<PartTarget> PartTargets(std::span<const deltasync::PlanTensor> plan_tensors,
                                    const std::vector<LocalTensor>& tensors);

// Stages one plan part and packs its new bytes for the scatter: validates every record against
// the registered tensors, turns its XOR bytes into new bytes in place in the plan, adds each plan
// tensor's partial sums to (*sums)[t] and returns the batch (one CopyOp per record: device
// range <- its new bytes, packed in record order). The old bytes come from `gather`'s Gather, one
// call for the whole part, straight into the batch; with `gather` null they are read in place
// at the device addresses (host memory: the cpu backend), in the same walk that stages. `plan`
// may be opened with OpenLazy (that walk checks its records). No device byte changes. On error
// *sums is unchanged. REQUIRES: sums->size() ==
// plan.tensors().size(). InvalidArgument for a record outside its local tensor or a plan tensor
// index the rank did not register; Gather's errors. The batch is built in `recycled`'s buffers
// (an earlier part's, so their pages are reused), its contents dropped. With `regions`, the
// walk also appends every record to them (AppendTouchedRegions; on error some may be).
StatusOr<ScatterBatch> StagePartToBatch(const deltasync::WritePlanReader& plan,
                                        const std::vector<LocalTensor>& tensors,
                                        DeviceBackend* gather, std::vector<StagedTensor>* sums,
                                        ScatterBatch recycled = {},
                                        TouchedRegions* regions = nullptr);

// Appends each record of `plan` to (*regions)[its plan tensor's rank tensor]: extends the
// list's last range if the record starts where it ends, else adds its range. Errors: the
// plan's (a bad record), nothing checked against registered tensors.
Status AppendTouchedRegions(const deltasync::WritePlanReader& plan, TouchedRegions* regions);

// StagePartToBatch through `backend`'s Gather, keeping only the sums: returns one StagedTensor
// per plan tensor; the plan's bytes are the new bytes afterwards.
StatusOr<std::vector<StagedTensor>> StagePlan(const deltasync::WritePlanReader& plan,
                                              const std::vector<LocalTensor>& tensors,
                                              DeviceBackend& backend);

// Packs a staged plan's records into a batch (one CopyOp per record: device range <- its new
// bytes), validated against the registered tensors, so
// the plan buffer can be dropped and the pause itself is only the copy. REQUIRES: StagePlan
// succeeded on this plan.
StatusOr<ScatterBatch> PackScatter(const deltasync::WritePlanReader& plan,
                                   const std::vector<LocalTensor>& tensors);

}  // namespace deltakv::shim
