// TensorLayout::Create: spec validation and the geometry every query runs on.
#include "deltasync/layout.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

namespace deltakv::deltasync {
namespace {

std::string Where(const LayoutSpec& spec) {
  return "layout '" + std::string(LayoutKindName(spec.kind)) + "'";
}

// a * b, or nullopt on 64-bit overflow.
std::optional<uint64_t> Mul(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Product of shape[begin, end) times `scale`, or nullopt on overflow.
std::optional<uint64_t> Product(const std::vector<uint64_t>& shape, size_t begin, size_t end,
                                uint64_t scale) {
  std::optional<uint64_t> r = scale;
  for (size_t i = begin; i < end && r; ++i) r = Mul(*r, shape[i]);
  return r;
}

std::string ShapeString(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// Fields a kind may set; all others must keep their LayoutSpec defaults.
constexpr uint32_t kUsesEp = 1;
constexpr uint32_t kUsesDim = 2;
constexpr uint32_t kUsesParts = 4;
constexpr uint32_t kUsesPart = 8;
constexpr uint32_t kUsesNumParts = 16;
constexpr uint32_t kUsesExperts = 32;

Status CheckUnused(const LayoutSpec& spec, uint32_t uses) {
  const LayoutSpec d;
  const char* field = nullptr;
  if (!(uses & kUsesEp) && spec.ep != d.ep) field = "ep";
  if (!(uses & kUsesDim) && spec.dim != d.dim) field = "dim";
  if (!(uses & kUsesParts) && !spec.parts.empty()) field = "parts";
  if (!(uses & kUsesPart) && spec.part != d.part) field = "part";
  if (!(uses & kUsesNumParts) && spec.num_parts != d.num_parts) field = "num_parts";
  if (!(uses & kUsesExperts) && (spec.experts != d.experts || spec.expert != d.expert)) {
    field = "experts";
  }
  if (field) return InvalidArgument(Where(spec) + ": field '" + field + "' does not apply");
  return Status::Ok();
}

Status CheckShape(const LayoutSpec& spec, const std::vector<uint64_t>& shape, size_t min_dims) {
  if (shape.size() < min_dims || shape.size() > kLayoutMaxDims) {
    return InvalidArgument(Where(spec) + ": shape " + ShapeString(shape) + " must have " +
                           std::to_string(min_dims) + ".." + std::to_string(kLayoutMaxDims) +
                           " dims");
  }
  return Status::Ok();
}

Status CheckDivisible(const LayoutSpec& spec, const char* what, uint64_t extent, uint64_t by,
                      const char* by_what) {
  if (extent % by != 0) {
    return InvalidArgument(Where(spec) + ": " + what + " " + std::to_string(extent) +
                           " is not divisible by " + by_what + " " + std::to_string(by));
  }
  return Status::Ok();
}

}  // namespace

std::string_view LayoutKindName(LayoutKind kind) {
  switch (kind) {
    case LayoutKind::kReplicated:
      return "replicated";
    case LayoutKind::kSharded:
      return "sharded";
    case LayoutKind::kFusedPart:
      return "fused_part";
    case LayoutKind::kFusedCheckpoint:
      return "fused_checkpoint";
    case LayoutKind::kMoeExperts:
      return "moe_experts";
    case LayoutKind::kMoeExpertPart:
      return "moe_expert_part";
  }
  return "INVALID";
}

StatusOr<TensorLayout> TensorLayout::Create(LayoutSpec spec) {
  if (LayoutKindName(spec.kind) == "INVALID") return InvalidArgument("layout: unknown kind");
  const uint64_t esize = DTypeSize(spec.dtype);
  if (esize == 0) return InvalidArgument(Where(spec) + ": unknown dtype");
  if (spec.tp == 0 || spec.ep == 0)
    return InvalidArgument(Where(spec) + ": tp and ep must be >= 1");
  if (uint64_t{spec.ep} * spec.tp > kLayoutMaxWorld) {
    return InvalidArgument(Where(spec) +
                           ": ep * tp = " + std::to_string(uint64_t{spec.ep} * spec.tp) +
                           " exceeds " + std::to_string(kLayoutMaxWorld) + " ranks");
  }
  if (spec.num_parts == 0 || spec.num_parts > kLayoutMaxParts) {
    return InvalidArgument(Where(spec) + ": num_parts must be 1.." +
                           std::to_string(kLayoutMaxParts));
  }
  const bool fused =
      spec.kind == LayoutKind::kFusedPart || spec.kind == LayoutKind::kFusedCheckpoint;
  if (!fused) RETURN_IF_ERROR(CheckShape(spec, spec.shape, 0));

  const std::vector<uint64_t>& shape = spec.shape;
  std::vector<Part> parts;
  uint64_t experts = 1, experts_per_group = 1, expert_begin = 0, canonical_experts = 1;
  uint32_t first_part = 0, part_count = 1;
  std::optional<uint64_t> outer = 1, inner;
  switch (spec.kind) {
    case LayoutKind::kReplicated: {
      RETURN_IF_ERROR(CheckUnused(spec, 0));
      inner = Product(shape, 0, shape.size(), esize);
      parts.push_back(Part{.rows = 1, .replicas = spec.tp});
      break;
    }
    case LayoutKind::kSharded: {
      RETURN_IF_ERROR(CheckUnused(spec, kUsesDim));
      RETURN_IF_ERROR(CheckShape(spec, shape, 1));
      if (spec.dim >= shape.size()) {
        return InvalidArgument(Where(spec) + ": dim " + std::to_string(spec.dim) +
                               " out of range for shape " + ShapeString(shape));
      }
      RETURN_IF_ERROR(CheckDivisible(spec, "split dim extent", shape[spec.dim], spec.tp, "tp"));
      outer = Product(shape, 0, spec.dim, 1);
      inner = Product(shape, spec.dim + 1, shape.size(), esize);
      parts.push_back(Part{.rows = shape[spec.dim]});
      break;
    }
    case LayoutKind::kFusedPart:
    case LayoutKind::kFusedCheckpoint: {
      const bool one_part = spec.kind == LayoutKind::kFusedPart;
      RETURN_IF_ERROR(CheckUnused(spec, kUsesParts | (one_part ? kUsesPart : 0)));
      if (spec.parts.empty() || spec.parts.size() > kLayoutMaxParts) {
        return InvalidArgument(Where(spec) + ": needs 1.." + std::to_string(kLayoutMaxParts) +
                               " parts");
      }
      if (one_part && spec.part >= spec.parts.size()) {
        return InvalidArgument(Where(spec) + ": part " + std::to_string(spec.part) +
                               " out of range for " + std::to_string(spec.parts.size()) + " parts");
      }
      const std::vector<uint64_t>& first = spec.parts[0].shape;
      uint64_t total_rows = 0;
      for (size_t i = 0; i < spec.parts.size(); ++i) {
        const FusedPartSpec& p = spec.parts[i];
        const std::string name = "part " + std::to_string(i);
        RETURN_IF_ERROR(CheckShape(spec, p.shape, 1));
        if (p.shape.size() != first.size() ||
            !std::equal(p.shape.begin() + 1, p.shape.end(), first.begin() + 1)) {
          return InvalidArgument(Where(spec) + ": " + name + " shape " + ShapeString(p.shape) +
                                 " does not match part 0 shape " + ShapeString(first) +
                                 " after dim 0");
        }
        if (p.shape[0] == 0) return InvalidArgument(Where(spec) + ": " + name + " is empty");
        if (p.replicas == 0 || spec.tp % p.replicas != 0) {
          return InvalidArgument(Where(spec) + ": " + name + " replicas " +
                                 std::to_string(p.replicas) + " does not divide tp " +
                                 std::to_string(spec.tp));
        }
        RETURN_IF_ERROR(CheckDivisible(spec, (name + " dim 0").c_str(), p.shape[0],
                                       spec.tp / p.replicas, "shard count"));
        if (__builtin_add_overflow(total_rows, p.shape[0], &total_rows)) {
          return InvalidArgument(Where(spec) + ": fused dim 0 overflows");
        }
        parts.push_back(Part{.rows = p.shape[0], .replicas = p.replicas});
      }
      std::vector<uint64_t> derived = first;
      if (one_part) {
        derived = spec.parts[spec.part].shape;
        first_part = spec.part;
      } else {
        derived[0] = total_rows;
        part_count = static_cast<uint32_t>(parts.size());
      }
      if (!spec.shape.empty() && spec.shape != derived) {
        return InvalidArgument(Where(spec) + ": shape " + ShapeString(spec.shape) +
                               " does not match the parts' " + ShapeString(derived));
      }
      spec.shape = std::move(derived);
      inner = Product(first, 1, first.size(), esize);
      break;
    }
    case LayoutKind::kMoeExperts:
    case LayoutKind::kMoeExpertPart: {
      const bool whole = spec.kind == LayoutKind::kMoeExperts;
      RETURN_IF_ERROR(CheckUnused(
          spec, kUsesEp | kUsesDim | kUsesNumParts | (whole ? 0 : kUsesPart | kUsesExperts)));
      RETURN_IF_ERROR(CheckShape(spec, shape, whole ? 2 : 1));
      if ((whole && spec.dim == 0) || spec.dim >= shape.size()) {
        return InvalidArgument(Where(spec) + ": dim " + std::to_string(spec.dim) +
                               " out of range for shape " + ShapeString(shape));
      }
      experts = whole ? shape[0] : spec.experts;
      if (experts == 0) return InvalidArgument(Where(spec) + ": no experts");
      RETURN_IF_ERROR(CheckDivisible(spec, "expert count", experts, spec.ep, "ep"));
      experts_per_group = experts / spec.ep;
      uint64_t rows = shape[spec.dim];
      if (whole) {
        canonical_experts = experts;
        part_count = spec.num_parts;
        RETURN_IF_ERROR(
            CheckDivisible(spec, "split dim extent", rows, spec.num_parts, "num_parts"));
        rows /= spec.num_parts;
      } else {
        if (spec.expert >= experts) {
          return InvalidArgument(Where(spec) + ": expert " + std::to_string(spec.expert) +
                                 " out of range for " + std::to_string(experts) + " experts");
        }
        if (spec.part >= spec.num_parts) {
          return InvalidArgument(Where(spec) + ": part " + std::to_string(spec.part) +
                                 " out of range for " + std::to_string(spec.num_parts) + " parts");
        }
        expert_begin = spec.expert;
        first_part = spec.part;
      }
      RETURN_IF_ERROR(CheckDivisible(spec, "part extent", rows, spec.tp, "tp"));
      outer = Product(shape, whole ? 1 : 0, spec.dim, 1);
      inner = Product(shape, spec.dim + 1, shape.size(), esize);
      parts.assign(spec.num_parts, Part{.rows = rows});
      break;
    }
  }
  if (!outer || !inner) return InvalidArgument(Where(spec) + ": byte size overflows");

  TensorLayout layout;
  layout.spec_ = std::move(spec);
  RETURN_IF_ERROR(layout.BuildGeometry(experts_per_group, expert_begin, canonical_experts, *outer,
                                       *inner, std::move(parts), first_part, part_count));
  return layout;
}

Status TensorLayout::BuildGeometry(uint64_t experts_per_group, uint64_t expert_begin,
                                   uint64_t canonical_experts, uint64_t outer, uint64_t inner_bytes,
                                   std::vector<Part> parts, uint32_t first_part,
                                   uint32_t part_count) {
  ep_ = spec_.ep;  // 1 for all but the MoE kinds
  tp_ = spec_.tp;
  experts_per_group_ = experts_per_group;
  expert_begin_ = expert_begin;
  canonical_experts_ = canonical_experts;
  outer_ = outer;
  inner_bytes_ = inner_bytes;
  first_part_ = first_part;
  part_count_ = part_count;
  uniform_ = first_part == 0 && part_count == parts.size();
  uint64_t canonical_rows = 0, local_rows = 0;
  for (uint32_t i = 0; i < parts.size(); ++i) {
    Part& p = parts[i];
    p.shards = tp_ / p.replicas;
    p.shard_rows = p.rows / p.shards;
    p.local_row_offset = local_rows;
    // A tensor of several parts (moe_expert_part: num_parts x shape[dim] rows) may not fit.
    if (p.shard_rows > UINT64_MAX - local_rows) {
      return InvalidArgument(Where(spec_) + ": byte size overflows");
    }
    local_rows += p.shard_rows;
    if (i >= first_part && i < first_part + part_count) {
      p.canonical_row_offset = canonical_rows;
      if (p.rows > UINT64_MAX - canonical_rows) {
        return InvalidArgument(Where(spec_) + ": byte size overflows");
      }
      canonical_rows += p.rows;
      if (p.shards != 1) uniform_ = false;
    }
  }
  parts_ = std::move(parts);
  canonical_rows_ = canonical_rows;
  local_rows_ = local_rows;
  std::optional<uint64_t> canonical = Mul(canonical_experts, outer);
  if (canonical) canonical = Mul(*canonical, canonical_rows);
  if (canonical) canonical = Mul(*canonical, inner_bytes);
  std::optional<uint64_t> local = Mul(experts_per_group, outer);
  if (local) local = Mul(*local, local_rows);
  if (local) local = Mul(*local, inner_bytes);
  if (!canonical || !local) return InvalidArgument(Where(spec_) + ": byte size overflows");
  canonical_bytes_ = *canonical;
  local_total_bytes_ = *local;
  return Status::Ok();
}

}  // namespace deltakv::deltasync
