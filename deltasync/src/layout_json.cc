// TensorLayout JSON encoding (see layout.h): the spec, re-validated by Create() on decode.
#include <algorithm>
#include <exception>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>

#include "deltasync/layout.h"
#include "json_fields.h"

namespace deltakv::deltasync {
namespace {

using json_fields::Json;
constexpr std::string_view kWhere = "layout";

StatusOr<uint32_t> Uint32(const Json& obj, const char* key, std::string_view where) {
  ASSIGN_OR_RETURN(uint64_t v, json_fields::Uint(obj, key, where));
  if (v > std::numeric_limits<uint32_t>::max()) {
    return InvalidArgument(std::string(where) + ": field '" + key + "' is too large");
  }
  return static_cast<uint32_t>(v);
}

StatusOr<std::vector<uint64_t>> Shape(const Json& obj, std::string_view where) {
  ASSIGN_OR_RETURN(const Json* arr, json_fields::Array(obj, "shape", where));
  if (arr->size() > kLayoutMaxDims) {
    return InvalidArgument(std::string(where) + ": shape has more than " +
                           std::to_string(kLayoutMaxDims) + " dims");
  }
  std::vector<uint64_t> shape;
  for (const Json& d : *arr) {
    if (!d.is_number_unsigned()) {
      return InvalidArgument(std::string(where) + ": shape must hold non-negative integers");
    }
    shape.push_back(d.get<uint64_t>());
  }
  return shape;
}

// InvalidArgument naming the first key of `obj` not in `allowed`.
Status OnlyKeys(const Json& obj, std::initializer_list<std::string_view> allowed,
                std::string_view where) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (std::find(allowed.begin(), allowed.end(), it.key()) == allowed.end()) {
      return InvalidArgument(std::string(where) + ": unknown field '" + it.key() + "'");
    }
  }
  return Status::Ok();
}

StatusOr<std::vector<FusedPartSpec>> Parts(const Json& obj) {
  ASSIGN_OR_RETURN(const Json* arr, json_fields::Array(obj, "parts", kWhere));
  if (arr->size() > kLayoutMaxParts) {
    return InvalidArgument("layout: more than " + std::to_string(kLayoutMaxParts) + " parts");
  }
  std::vector<FusedPartSpec> parts;
  for (size_t i = 0; i < arr->size(); ++i) {
    const std::string where = "layout part " + std::to_string(i);
    const Json& p = (*arr)[i];
    if (!p.is_object()) return InvalidArgument(where + ": must be an object");
    RETURN_IF_ERROR(OnlyKeys(p, {"shape", "replicas"}, where));
    FusedPartSpec part;
    ASSIGN_OR_RETURN(part.shape, Shape(p, where));
    ASSIGN_OR_RETURN(part.replicas, Uint32(p, "replicas", where));
    parts.push_back(std::move(part));
  }
  return parts;
}

StatusOr<LayoutSpec> ParseSpec(const Json& j) {
  LayoutSpec spec;
  ASSIGN_OR_RETURN(std::string kind, json_fields::String(j, "kind", kWhere));
  ASSIGN_OR_RETURN(std::string dtype, json_fields::String(j, "dtype", kWhere));
  std::optional<DType> parsed = ParseDType(dtype);
  if (!parsed) return InvalidArgument("layout: unknown dtype '" + dtype + "'");
  spec.dtype = *parsed;
  if (kind == "replicated") {
    spec.kind = LayoutKind::kReplicated;
    RETURN_IF_ERROR(OnlyKeys(j, {"kind", "dtype", "shape", "world"}, kWhere));
    ASSIGN_OR_RETURN(spec.shape, Shape(j, kWhere));
    ASSIGN_OR_RETURN(spec.tp, Uint32(j, "world", kWhere));
  } else if (kind == "sharded") {
    spec.kind = LayoutKind::kSharded;
    RETURN_IF_ERROR(OnlyKeys(j, {"kind", "dtype", "shape", "dim", "tp"}, kWhere));
    ASSIGN_OR_RETURN(spec.shape, Shape(j, kWhere));
    ASSIGN_OR_RETURN(spec.dim, Uint32(j, "dim", kWhere));
    ASSIGN_OR_RETURN(spec.tp, Uint32(j, "tp", kWhere));
  } else if (kind == "fused_part" || kind == "fused_checkpoint") {
    const bool one_part = kind == "fused_part";
    spec.kind = one_part ? LayoutKind::kFusedPart : LayoutKind::kFusedCheckpoint;
    RETURN_IF_ERROR(one_part ? OnlyKeys(j, {"kind", "dtype", "parts", "part", "tp"}, kWhere)
                             : OnlyKeys(j, {"kind", "dtype", "parts", "tp"}, kWhere));
    ASSIGN_OR_RETURN(spec.parts, Parts(j));
    if (one_part) {
      ASSIGN_OR_RETURN(spec.part, Uint32(j, "part", kWhere));
    }
    ASSIGN_OR_RETURN(spec.tp, Uint32(j, "tp", kWhere));
  } else if (kind == "moe_experts") {
    spec.kind = LayoutKind::kMoeExperts;
    RETURN_IF_ERROR(
        OnlyKeys(j, {"kind", "dtype", "shape", "dim", "num_parts", "ep", "tp"}, kWhere));
    ASSIGN_OR_RETURN(spec.shape, Shape(j, kWhere));
    ASSIGN_OR_RETURN(spec.dim, Uint32(j, "dim", kWhere));
    ASSIGN_OR_RETURN(spec.num_parts, Uint32(j, "num_parts", kWhere));
    ASSIGN_OR_RETURN(spec.ep, Uint32(j, "ep", kWhere));
    ASSIGN_OR_RETURN(spec.tp, Uint32(j, "tp", kWhere));
  } else if (kind == "moe_expert_part") {
    spec.kind = LayoutKind::kMoeExpertPart;
    RETURN_IF_ERROR(OnlyKeys(
        j, {"kind", "dtype", "shape", "dim", "num_parts", "part", "experts", "expert", "ep", "tp"},
        kWhere));
    ASSIGN_OR_RETURN(spec.shape, Shape(j, kWhere));
    ASSIGN_OR_RETURN(spec.dim, Uint32(j, "dim", kWhere));
    ASSIGN_OR_RETURN(spec.num_parts, Uint32(j, "num_parts", kWhere));
    ASSIGN_OR_RETURN(spec.part, Uint32(j, "part", kWhere));
    ASSIGN_OR_RETURN(spec.experts, json_fields::Uint(j, "experts", kWhere));
    ASSIGN_OR_RETURN(spec.expert, json_fields::Uint(j, "expert", kWhere));
    ASSIGN_OR_RETURN(spec.ep, Uint32(j, "ep", kWhere));
    ASSIGN_OR_RETURN(spec.tp, Uint32(j, "tp", kWhere));
  } else {
    return InvalidArgument("layout: unknown kind '" + kind + "'");
  }
  return spec;
}

}  // namespace

std::string TensorLayout::ToJson() const {
  const LayoutSpec& s = spec_;
  Json j = Json::object();
  j["kind"] = LayoutKindName(s.kind);
  j["dtype"] = DTypeName(s.dtype);
  switch (s.kind) {
    case LayoutKind::kReplicated:
      j["shape"] = s.shape;
      j["world"] = s.tp;
      break;
    case LayoutKind::kSharded:
      j["shape"] = s.shape;
      j["dim"] = s.dim;
      j["tp"] = s.tp;
      break;
    case LayoutKind::kFusedPart:
    case LayoutKind::kFusedCheckpoint: {
      Json parts = Json::array();
      for (const FusedPartSpec& p : s.parts) {
        parts.push_back(Json{{"shape", p.shape}, {"replicas", p.replicas}});
      }
      j["parts"] = std::move(parts);
      if (s.kind == LayoutKind::kFusedPart) j["part"] = s.part;
      j["tp"] = s.tp;
      break;
    }
    case LayoutKind::kMoeExperts:
    case LayoutKind::kMoeExpertPart:
      j["shape"] = s.shape;
      j["dim"] = s.dim;
      j["num_parts"] = s.num_parts;
      if (s.kind == LayoutKind::kMoeExpertPart) {
        j["part"] = s.part;
        j["experts"] = s.experts;
        j["expert"] = s.expert;
      }
      j["ep"] = s.ep;
      j["tp"] = s.tp;
      break;
  }
  return j.dump();
}

StatusOr<TensorLayout> TensorLayout::FromJson(std::string_view text) {
  try {
    ASSIGN_OR_RETURN(Json j, json_fields::Parse(text, kWhere));
    ASSIGN_OR_RETURN(LayoutSpec spec, ParseSpec(j));
    return Create(std::move(spec));
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("layout: ") + e.what());
  }
}

}  // namespace deltakv::deltasync
