// KvLayout: where an engine keeps the bytes of one KV block, and how they map onto a pool slot.
//
// An engine's KV memory is a set of *pieces*. Piece p is an array of `num_blocks` equal-sized
// runs, run b at `base_p + b * stride_p` holding `bytes_p` bytes of engine block b. A pool slot
// holds one block as the concatenation of its runs in piece order:
//
//   slot = piece_0[b] || piece_1[b] || ... || piece_{P-1}[b]        (block_bytes = sum bytes_p)
//
// Storing a block GATHERS its runs into the slot; loading SCATTERS the slot back into the runs.
// The two engine layouts in use are both sets of pieces:
// - per-layer tensors (vLLM's default, SGLang's MHA pool): one [num_blocks, bytes_per_layer]
//   tensor per layer, or separate K and V tensors per layer; pieces in order layer 0 K,
//   layer 0 V, layer 1 K, ... (PerLayer);
// - cross-layer blocks (LMCache's and vLLM's "cross-layer" layout): one region per block
//   holding every layer; a single piece (CrossLayer).
// Other layouts (K and V interleaved in one tensor, [2, num_blocks, ...] tensors) are a
// choice of base and stride per piece (FromPieces).
//
// The slot format is therefore part of the key context (docs/KEYS.md §3 `kv_layout`): engines
// that share a pool must use layouts with the same piece sizes in the same order.
//
// Addresses are engine "device" addresses: host pointers for the cpu copy engine, device
// pointers for a CUDA engine. A KvLayout never dereferences them.
//
// Ownership: a KvLayout owns nothing; the engine keeps its KV memory alive while the layout is
// used. Thread-safety: an immutable value after construction; const methods run concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "kvtier/copy_engine.h"

namespace deltakv::kvtier {

// Caps that bound what a layout may describe (the pool caps a block at kMaxBlockBytes).
inline constexpr size_t kMaxLayoutPieces = 4096;

struct KvPiece {
  uint8_t* base = nullptr;  // run of block 0
  uint64_t stride = 0;      // distance between the runs of blocks b and b+1; 0 = `bytes`
  uint64_t bytes = 0;       // bytes of one block's run
};

// One layer's tensors for PerLayer: `v` null when K and V share one tensor (or MLA's single
// latent cache); `stride` 0 means dense rows ([num_blocks, bytes]).
struct LayerTensors {
  uint8_t* k = nullptr;
  uint8_t* v = nullptr;
  uint64_t stride = 0;
};

class KvLayout {
 public:
  KvLayout() = default;

  // The general form. InvalidArgument when there are no pieces or more than kMaxLayoutPieces,
  // num_blocks is 0, a piece has a null base or 0 bytes, a stride is smaller than its bytes
  // (runs of one piece would overlap), the extent of a piece overflows, or the block's total
  // bytes are 0 or overflow. Pieces are not checked against each other: REQUIRES no two runs of
  // any pieces overlap.
  static StatusOr<KvLayout> FromPieces(std::vector<KvPiece> pieces, uint64_t num_blocks);

  // Per-layer tensors: for each layer, K (and V if given) tensors of `bytes_per_tensor` bytes
  // per block. Same errors as FromPieces, and InvalidArgument for no layers.
  static StatusOr<KvLayout> PerLayer(std::span<const LayerTensors> layers, uint64_t num_blocks,
                                     uint64_t bytes_per_tensor);

  // Cross-layer blocks: block b is `block_bytes` contiguous bytes at base + b * block_stride
  // (block_stride 0 = block_bytes). Same errors as FromPieces.
  static StatusOr<KvLayout> CrossLayer(uint8_t* base, uint64_t num_blocks, uint64_t block_bytes,
                                       uint64_t block_stride = 0);

  // OK if a block of this layout fills a pool slot of `pool_block_bytes` exactly; otherwise
  // InvalidArgument naming both sizes.
  Status CheckBlockBytes(uint64_t pool_block_bytes) const;

  // Appends the regions that copy engine block `block` into the slot bytes at `slot` (store).
  // Adjacent regions that are contiguous on both sides are merged. InvalidArgument (nothing
  // appended) for block >= num_blocks().
  Status AppendGather(uint64_t block, uint8_t* slot, std::vector<CopyRegion>* out) const;
  // Appends the regions that copy the slot bytes at `slot` back into engine block `block`.
  Status AppendScatter(uint64_t block, const uint8_t* slot, std::vector<CopyRegion>* out) const;

  uint64_t block_bytes() const { return block_bytes_; }
  uint64_t num_blocks() const { return num_blocks_; }
  const std::vector<KvPiece>& pieces() const { return pieces_; }

 private:
  KvLayout(std::vector<KvPiece> pieces, uint64_t num_blocks, uint64_t block_bytes)
      : pieces_(std::move(pieces)), num_blocks_(num_blocks), block_bytes_(block_bytes) {}
  Status CheckBlock(uint64_t block) const;

  std::vector<KvPiece> pieces_;
  uint64_t num_blocks_ = 0;
  uint64_t block_bytes_ = 0;
};

}  // namespace deltakv::kvtier
