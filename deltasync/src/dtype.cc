#include "deltasync/dtype.h"

#include <array>

namespace deltakv::deltasync {
namespace {

struct DTypeEntry {
  DType dtype;
  std::string_view name;
  uint32_t size;
};

// Indexed by the enum value; names as written by the safetensors reference implementation.
constexpr std::array<DTypeEntry, 16> kDTypes = {{
    {DType::kBool, "BOOL", 1},
    {DType::kU8, "U8", 1},
    {DType::kI8, "I8", 1},
    {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kF8E5M2, "F8_E5M2", 1},
    {DType::kF8E8M0, "F8_E8M0", 1},
    {DType::kI16, "I16", 2},
    {DType::kU16, "U16", 2},
    {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},
    {DType::kI32, "I32", 4},
    {DType::kU32, "U32", 4},
    {DType::kF32, "F32", 4},
    {DType::kI64, "I64", 8},
    {DType::kU64, "U64", 8},
    {DType::kF64, "F64", 8},
}};

constexpr bool TableMatchesEnum() {
  for (size_t i = 0; i < kDTypes.size(); ++i) {
    if (static_cast<size_t>(kDTypes[i].dtype) != i) return false;
  }
  return true;
}
static_assert(TableMatchesEnum(), "kDTypes must be indexed by DType");
static_assert(static_cast<size_t>(DType::kF64) + 1 == kDTypes.size(), "a DType has no entry");

}  // namespace

std::optional<DType> ParseDType(std::string_view name) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.name == name) return e.dtype;
  }
  return std::nullopt;
}

std::string_view DTypeName(DType dtype) {
  const size_t i = static_cast<size_t>(dtype);
  return i < kDTypes.size() ? kDTypes[i].name : std::string_view("INVALID");
}

uint32_t DTypeSize(DType dtype) {
  const size_t i = static_cast<size_t>(dtype);
  return i < kDTypes.size() ? kDTypes[i].size : 0;
}

}  // namespace deltakv::deltasync
