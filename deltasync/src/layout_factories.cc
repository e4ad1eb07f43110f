// TensorLayout factories: each fills a LayoutSpec and hands it to Create().
#include <string>
#include <utility>

#include "deltasync/layout.h"

namespace deltakv::deltasync {

StatusOr<TensorLayout> TensorLayout::Replicated(std::vector<uint64_t> shape, DType dtype,
                                                uint32_t world) {
  return Create(LayoutSpec{
      .kind = LayoutKind::kReplicated, .dtype = dtype, .shape = std::move(shape), .tp = world});
}

StatusOr<TensorLayout> TensorLayout::Sharded(std::vector<uint64_t> shape, DType dtype, uint32_t dim,
                                             uint32_t tp) {
  return Create(LayoutSpec{.kind = LayoutKind::kSharded,
                           .dtype = dtype,
                           .shape = std::move(shape),
                           .tp = tp,
                           .dim = dim});
}

StatusOr<TensorLayout> TensorLayout::FusedPart(std::vector<FusedPartSpec> parts, uint32_t part,
                                               DType dtype, uint32_t tp) {
  return Create(LayoutSpec{.kind = LayoutKind::kFusedPart,
                           .dtype = dtype,
                           .tp = tp,
                           .parts = std::move(parts),
                           .part = part});
}

StatusOr<TensorLayout> TensorLayout::FusedCheckpoint(std::vector<FusedPartSpec> parts, DType dtype,
                                                     uint32_t tp) {
  return Create(LayoutSpec{
      .kind = LayoutKind::kFusedCheckpoint, .dtype = dtype, .tp = tp, .parts = std::move(parts)});
}

StatusOr<TensorLayout> TensorLayout::MoeExperts(std::vector<uint64_t> shape, DType dtype,
                                                uint32_t dim, uint32_t num_parts, uint32_t ep,
                                                uint32_t tp) {
  return Create(LayoutSpec{.kind = LayoutKind::kMoeExperts,
                           .dtype = dtype,
                           .shape = std::move(shape),
                           .tp = tp,
                           .ep = ep,
                           .dim = dim,
                           .num_parts = num_parts});
}

StatusOr<TensorLayout> TensorLayout::MoeExpertPart(std::vector<uint64_t> shape, DType dtype,
                                                   uint32_t dim, uint32_t part, uint32_t num_parts,
                                                   uint64_t experts, uint64_t expert, uint32_t ep,
                                                   uint32_t tp) {
  return Create(LayoutSpec{.kind = LayoutKind::kMoeExpertPart,
                           .dtype = dtype,
                           .shape = std::move(shape),
                           .tp = tp,
                           .ep = ep,
                           .dim = dim,
                           .part = part,
                           .num_parts = num_parts,
                           .experts = experts,
                           .expert = expert});
}

StatusOr<std::vector<FusedPartSpec>> QkvPartSpecs(uint64_t num_heads, uint64_t num_kv_heads,
                                                  uint64_t head_dim, std::vector<uint64_t> trailing,
                                                  uint32_t tp) {
  if (num_heads == 0 || num_kv_heads == 0 || head_dim == 0 || tp == 0) {
    return InvalidArgument("qkv: head counts, head_dim and tp must be >= 1");
  }
  if (num_heads % tp != 0) {
    return InvalidArgument("qkv: num_heads " + std::to_string(num_heads) +
                           " is not divisible by tp " + std::to_string(tp));
  }
  if (num_kv_heads % tp != 0 && tp % num_kv_heads != 0) {
    return InvalidArgument("qkv: num_kv_heads " + std::to_string(num_kv_heads) + " and tp " +
                           std::to_string(tp) + " do not divide one another");
  }
  uint64_t q_rows = 0, kv_rows = 0;
  if (__builtin_mul_overflow(num_heads, head_dim, &q_rows) ||
      __builtin_mul_overflow(num_kv_heads, head_dim, &kv_rows)) {
    return InvalidArgument("qkv: rows overflow");
  }
  const uint32_t kv_replicas =
      num_kv_heads < tp ? static_cast<uint32_t>(tp / num_kv_heads) : uint32_t{1};
  std::vector<FusedPartSpec> parts(3);
  for (size_t i = 0; i < parts.size(); ++i) {
    parts[i].shape.push_back(i == 0 ? q_rows : kv_rows);
    parts[i].shape.insert(parts[i].shape.end(), trailing.begin(), trailing.end());
    parts[i].replicas = i == 0 ? 1 : kv_replicas;
  }
  return parts;
}

}  // namespace deltakv::deltasync
