// Tensor element types as named by safetensors ("BF16", "F32", ...).
//
// Thread-safety: pure functions over immutable tables.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace deltakv::deltasync {

enum class DType : uint8_t {
  kBool,
  kU8,
  kI8,
  kF8E4M3,
  kF8E5M2,
  kF8E8M0,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kI64,
  kU64,
  kF64,
};

// "BF16" -> kBF16; nullopt for a name this build does not know.
std::optional<DType> ParseDType(std::string_view name);
// kBF16 -> "BF16"; "INVALID" for a value outside the enum.
std::string_view DTypeName(DType dtype);
// Bytes per element (1, 2, 4 or 8); 0 for a value outside the enum.
uint32_t DTypeSize(DType dtype);

}  // namespace deltakv::deltasync
