// The cpu device backend: "device" memory is host memory.
#include <cstring>

#include "shim/device_backend.h"

namespace deltakv::shim {
namespace {

class CpuBackend final : public DeviceBackend {
 public:
  std::string_view name() const override { return "cpu"; }
  Status Gather(std::span<const CopyOp> ops) override {
    for (const CopyOp& op : ops) std::memcpy(op.host, op.device, op.bytes);
    return Status::Ok();
  }
  Status Scatter(std::span<const CopyOp> ops) override {
    for (const CopyOp& op : ops) std::memcpy(op.device, op.host, op.bytes);
    return Status::Ok();
  }
};

}  // namespace

StatusOr<std::unique_ptr<DeviceBackend>> MakeDeviceBackend(std::string_view name) {
  if (name.empty() || name == "cpu") return std::unique_ptr<DeviceBackend>(new CpuBackend());
  return InvalidArgument("device backend '" + std::string(name) +
                         "' is not available in this build (have: cpu)");
}

}  // namespace deltakv::shim
