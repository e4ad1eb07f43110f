// The conventions of the C ABI (include/deltakv/deltakv_base.h), shared by the engine half
// (c_api.cc) and the KV half (kv_c_api.cc): Status -> deltakv_status with the calling thread's
// message, no exception across the boundary, and versioned parameter structs.
#ifndef DELTAKV_SHIM_SRC_C_ABI_H_
#define DELTAKV_SHIM_SRC_C_ABI_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "base/status.h"
#include "deltakv/deltakv_base.h"

namespace deltakv::shim {

// Records `s` as the calling thread's last message ("fn: message", or "" when ok) and returns
// its code.
deltakv_status ReportStatus(const char* fn, const Status& s);

// The calling thread's last message.
const char* LastErrorCStr();

// Runs `body` (returning Status) and reports its outcome; no exception crosses the C ABI.
template <typename Body>
deltakv_status RunC(const char* fn, Body&& body) {
  try {
    return ReportStatus(fn, body());
  } catch (const std::bad_alloc&) {
    return ReportStatus(fn, ResourceExhausted("out of memory"));
  } catch (const std::exception& e) {
    return ReportStatus(fn, Internal(std::string("unexpected exception: ") + e.what()));
  } catch (...) {
    return ReportStatus(fn, Internal("unexpected exception"));
  }
}

// Reads a caller's versioned struct (deltakv_base.h): `*out` holds the library's defaults on
// entry; the first min(struct_size, sizeof(T)) bytes of `in` replace them. InvalidArgument when
// struct_size is below `first_version_size`, or when a larger struct has a nonzero byte past
// sizeof(T) (a field of a newer header this library would ignore). `what` names the struct in
// the message; `hint` says how to fill it.
template <typename T>
Status ReadVersionedStruct(const T* in, size_t first_version_size, const char* what,
                           const char* hint, T* out) {
  if (in == nullptr) return InvalidArgument(std::string(what) + " is NULL");
  const size_t size = in->struct_size;
  if (size < first_version_size) {
    return InvalidArgument(std::string(what) + "->struct_size is " + std::to_string(size) +
                           ", expected at least " + std::to_string(first_version_size) + " (" +
                           hint + ")");
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(in);
  for (size_t i = sizeof(T); i < size; ++i) {
    if (bytes[i] != 0) {
      return InvalidArgument(std::string(what) + "->struct_size is " + std::to_string(size) +
                             " and byte " + std::to_string(i) +
                             " is set: a field of a newer header than this library (" +
                             DELTAKV_VERSION_STRING + ") knows");
    }
  }
  std::memcpy(out, in, size < sizeof(T) ? size : sizeof(T));
  out->struct_size = static_cast<uint32_t>(sizeof(T));
  return Status::Ok();
}

}  // namespace deltakv::shim

#endif  // DELTAKV_SHIM_SRC_C_ABI_H_
