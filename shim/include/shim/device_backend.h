// DeviceBackend: how the shim reads and writes engine weight memory. The `cpu` backend treats
// "device" pointers as host memory (what tests and the reference engine use); a `cuda`
// backend performs the same batched copies with kernels and streams.
//
// Gather and Scatter take batches so a backend can coalesce them into a few launches. Both
// are synchronous: when they return OK every byte has moved. On error the destination bytes
// of that call are unspecified (Scatter errors are reported as Internal: the caller cannot
// roll a partial scatter back, which is why scatter happens only after verification).
//
// Thread-safety: one backend object per engine handle, used by one thread at a time.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

#include "base/status.h"

namespace deltakv::shim {

struct CopyOp {
  void* device = nullptr;  // device address (host address for the cpu backend)
  void* host = nullptr;
  size_t bytes = 0;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual std::string_view name() const = 0;
  // device -> host for every op.
  virtual Status Gather(std::span<const CopyOp> ops) = 0;
  // host -> device for every op.
  virtual Status Scatter(std::span<const CopyOp> ops) = 0;
};

// "cpu" (and "" for the default); InvalidArgument for names this build does not have.
StatusOr<std::unique_ptr<DeviceBackend>> MakeDeviceBackend(std::string_view name);

}  // namespace deltakv::shim
