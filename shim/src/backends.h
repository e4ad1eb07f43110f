// The device backends this build has (MakeDeviceBackend picks by name).
#pragma once

#include <memory>

#include "base/status.h"
#include "shim/device_backend.h"

namespace deltakv::shim {

std::unique_ptr<DeviceBackend> MakeCpuBackend();
#ifdef DELTAKV_HAVE_CUDA
// FailedPrecondition when the CUDA runtime finds no usable device.
StatusOr<std::unique_ptr<DeviceBackend>> MakeCudaBackend();
#endif

}  // namespace deltakv::shim
