// The device backends this build has (MakeDeviceBackend picks by name).
#pragma once

#include <memory>

#include "base/status.h"
#include "shim/device_backend.h"

namespace deltakv::shim {

// The default prepared scatter (DeviceBackend::PrepareScatter): the packed batch, kept in host
// memory for Scatter.
class HostPreparedScatter final : public PreparedScatter {
 public:
  explicit HostPreparedScatter(ScatterBatch batch) : batch_(std::move(batch)) {}
  uint64_t ops() const override { return batch_.ops.size(); }
  uint64_t bytes() const override { return batch_.data.size(); }
  const ScatterBatch& batch() const { return batch_; }

 private:
  ScatterBatch batch_;
};

std::unique_ptr<DeviceBackend> MakeCpuBackend();
#ifdef DELTAKV_HAVE_CUDA
// FailedPrecondition when the CUDA runtime finds no usable device.
StatusOr<std::unique_ptr<DeviceBackend>> MakeCudaBackend();
#endif

}  // namespace deltakv::shim
