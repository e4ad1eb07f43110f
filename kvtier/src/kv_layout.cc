#include "kvtier/kv_layout.h"

#include <string>

namespace deltakv::kvtier {
namespace {

// Appends src -> dst, extending the last region when both sides continue it.
void AppendRegion(const uint8_t* src, uint8_t* dst, uint64_t bytes, std::vector<CopyRegion>* out) {
  if (!out->empty()) {
    CopyRegion& last = out->back();
    if (last.src + last.bytes == src && last.dst + last.bytes == dst) {
      last.bytes += bytes;
      return;
    }
  }
  out->push_back(CopyRegion{src, dst, bytes});
}

}  // namespace

StatusOr<KvLayout> KvLayout::FromPieces(std::vector<KvPiece> pieces, uint64_t num_blocks) {
  if (pieces.empty()) return InvalidArgument("kv layout: no pieces");
  if (pieces.size() > kMaxLayoutPieces) {
    return InvalidArgument("kv layout: " + std::to_string(pieces.size()) + " pieces, more than " +
                           std::to_string(kMaxLayoutPieces));
  }
  if (num_blocks == 0) return InvalidArgument("kv layout: num_blocks is 0");
  uint64_t block_bytes = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    KvPiece& p = pieces[i];
    const std::string where = "kv layout: piece " + std::to_string(i);
    if (p.base == nullptr) return InvalidArgument(where + ": null base");
    if (p.bytes == 0) return InvalidArgument(where + ": 0 bytes per block");
    if (p.stride == 0) p.stride = p.bytes;
    if (p.stride < p.bytes) {
      return InvalidArgument(where + ": stride " + std::to_string(p.stride) + " < " +
                             std::to_string(p.bytes) + " bytes per block (runs would overlap)");
    }
    // Extent (num_blocks - 1) * stride + bytes must fit the address space.
    const uint64_t last = num_blocks - 1;
    if (last != 0 && p.stride > (UINTPTR_MAX - p.bytes) / last) {
      return InvalidArgument(where + ": extent of " + std::to_string(num_blocks) +
                             " blocks overflows");
    }
    const uint64_t extent = last * p.stride + p.bytes;
    if (reinterpret_cast<uintptr_t>(p.base) > UINTPTR_MAX - extent) {
      return InvalidArgument(where + ": extent wraps the address space");
    }
    if (block_bytes + p.bytes < block_bytes) {
      return InvalidArgument("kv layout: block bytes overflow at piece " + std::to_string(i));
    }
    block_bytes += p.bytes;
  }
  return KvLayout(std::move(pieces), num_blocks, block_bytes);
}

StatusOr<KvLayout> KvLayout::PerLayer(std::span<const LayerTensors> layers, uint64_t num_blocks,
                                      uint64_t bytes_per_tensor) {
  if (layers.empty()) return InvalidArgument("kv layout: no layers");
  std::vector<KvPiece> pieces;
  pieces.reserve(layers.size() * 2);
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerTensors& t = layers[l];
    if (t.k == nullptr) {
      return InvalidArgument("kv layout: layer " + std::to_string(l) + ": null K tensor");
    }
    pieces.push_back(KvPiece{t.k, t.stride, bytes_per_tensor});
    if (t.v != nullptr) pieces.push_back(KvPiece{t.v, t.stride, bytes_per_tensor});
  }
  return FromPieces(std::move(pieces), num_blocks);
}

StatusOr<KvLayout> KvLayout::CrossLayer(uint8_t* base, uint64_t num_blocks, uint64_t block_bytes,
                                        uint64_t block_stride) {
  return FromPieces({KvPiece{base, block_stride, block_bytes}}, num_blocks);
}

Status KvLayout::CheckBlockBytes(uint64_t pool_block_bytes) const {
  if (block_bytes_ != pool_block_bytes) {
    return InvalidArgument("kv layout: a block is " + std::to_string(block_bytes_) +
                           " bytes in the engine layout but " + std::to_string(pool_block_bytes) +
                           " bytes in the pool (a pool for this layout: deltakv sidecar "
                           "--kv-block-bytes " +
                           std::to_string(block_bytes_) + ")");
  }
  return Status::Ok();
}

Status KvLayout::CheckBlock(uint64_t block) const {
  if (block >= num_blocks_) {
    return InvalidArgument("kv layout: engine block " + std::to_string(block) +
                           " out of range (layout has " + std::to_string(num_blocks_) + ")");
  }
  return Status::Ok();
}

Status KvLayout::AppendGather(uint64_t block, uint8_t* slot, std::vector<CopyRegion>* out) const {
  RETURN_IF_ERROR(CheckBlock(block));
  uint64_t offset = 0;
  for (const KvPiece& p : pieces_) {
    AppendRegion(p.base + block * p.stride, slot + offset, p.bytes, out);
    offset += p.bytes;
  }
  return Status::Ok();
}

Status KvLayout::AppendScatter(uint64_t block, const uint8_t* slot,
                               std::vector<CopyRegion>* out) const {
  RETURN_IF_ERROR(CheckBlock(block));
  uint64_t offset = 0;
  for (const KvPiece& p : pieces_) {
    // A scatter region writes engine memory from the slot; CopyRegion's dst is mutable.
    AppendRegion(slot + offset, p.base + block * p.stride, p.bytes, out);
    offset += p.bytes;
  }
  return Status::Ok();
}

}  // namespace deltakv::kvtier
