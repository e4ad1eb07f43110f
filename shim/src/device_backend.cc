#include <algorithm>
#include <string>
#include <vector>

#include "backends.h"
#include "shim/device_backend.h"
#include "shim/plan_stage.h"

namespace deltakv::shim {

StatusOr<std::unique_ptr<PreparedScatter>> DeviceBackend::PrepareScatter(ScatterBatch batch) {
  return std::unique_ptr<PreparedScatter>(new HostPreparedScatter(std::move(batch)));
}

Status DeviceBackend::CommitScatter(PreparedScatter& prepared) {
  auto* host = dynamic_cast<HostPreparedScatter*>(&prepared);
  if (host == nullptr) return Internal("scatter prepared by another backend");
  Status s = Scatter(host->batch().ops);
  if (!s.ok()) return Internal("scatter failed: " + s.message());
  return Status::Ok();
}

Status DeviceBackend::CommitScatters(std::span<const std::unique_ptr<PreparedScatter>> prepared) {
  for (const std::unique_ptr<PreparedScatter>& p : prepared) RETURN_IF_ERROR(CommitScatter(*p));
  return Status::Ok();
}

StatusOr<std::unique_ptr<PreparedScatter>> DeviceBackend::StagePart(
    const deltasync::WritePlanReader& plan, const std::vector<LocalTensor>& tensors,
    std::vector<StagedTensor>* sums) {
  ASSIGN_OR_RETURN(ScatterBatch batch, StagePartToBatch(plan, tensors, this, sums));
  return PrepareScatter(std::move(batch));
}

StatusOr<std::unique_ptr<PreparedScatter>> DeviceBackend::StagePartAndRegions(
    const deltasync::WritePlanReader& plan, const std::vector<LocalTensor>& tensors,
    std::vector<StagedTensor>* sums, TouchedRegions* regions) {
  ASSIGN_OR_RETURN(std::unique_ptr<PreparedScatter> prepared, StagePart(plan, tensors, sums));
  if (regions != nullptr) RETURN_IF_ERROR(AppendTouchedRegions(plan, regions));
  return prepared;
}

Status DeviceBackend::ChecksumRanges(std::span<const ChecksumRange> ranges,
                                     std::span<deltasync::AdlerDelta> out) {
  if (out.size() != ranges.size()) return InvalidArgument("one result per checksum range");
  constexpr uint64_t kBuffer = 4 << 20;
  std::vector<uint8_t> host;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const ChecksumRange& r = ranges[i];
    for (uint64_t done = 0; done < r.bytes;) {
      const uint64_t n = std::min(kBuffer, r.bytes - done);
      host.resize(n);
      CopyOp op{const_cast<uint8_t*>(static_cast<const uint8_t*>(r.device)) + done, host.data(), n};
      RETURN_IF_ERROR(Gather({&op, 1}));
      out[i].AddBytes(r.position + done, host);
      done += n;
    }
  }
  return Status::Ok();
}

Status DeviceBackend::ReserveStaging(uint64_t, const std::vector<LocalTensor>&) {
  return Status::Ok();
}

StatusOr<std::unique_ptr<DeviceBackend>> MakeDeviceBackend(std::string_view name) {
  if (name.empty() || name == "cpu") return MakeCpuBackend();
#ifdef DELTAKV_HAVE_CUDA
  if (name == "cuda") return MakeCudaBackend();
  constexpr const char* kHave = "cpu, cuda";
#else
  constexpr const char* kHave = "cpu";
#endif
  return InvalidArgument("device backend '" + std::string(name) +
                         "' is not available in this build (have: " + kHave + ")");
}

}  // namespace deltakv::shim
