// TensorLayout: where the bytes of one canonical checkpoint tensor live in the rank-local
// tensors of a tensor-/expert-parallel inference engine.
//
// The canonical tensor is the tensor as stored in safetensors: row-major bytes, offsets
// 0..canonical_bytes(). Each engine rank holds a local tensor (also row-major bytes) laid out
// the way the engine's weight loader slices it (vLLM/SGLang conventions):
//
//   Replicated       every rank holds the whole tensor.
//   Sharded(dim)     split evenly along `dim` over tp ranks; rank r holds indices
//                    [r*n/tp, (r+1)*n/tp) of that dim (dim 0: ColumnParallel, vocab;
//                    dim 1: RowParallel). Dims after `dim` stay contiguous.
//   FusedPart        one part (q, k, v, gate, up) of an engine tensor fused along dim 0; each
//                    part is sharded separately and the local tensor is [part0_r|part1_r|...].
//                    A part with `replicas` > 1 (KV heads when num_kv_heads < tp) is split in
//                    tp/replicas shards and rank r holds shard r/replicas.
//   FusedCheckpoint  the same engine tensor, with the checkpoint already holding the fused
//                    [part0|part1|...] tensor.
//   MoeExperts       an [E, ...] expert tensor; expert parallel groups of tp ranks each hold
//                    E/ep consecutive experts; inside each expert, dim `dim` is split into
//                    `num_parts` equal parts (w13: gate|up), each sharded over the tp ranks of
//                    the group (w13 [E,2I,H] dim 1 -> [E/ep, 2I/tp, H]; w2 [E,H,I] dim 2 ->
//                    [E/ep, H, I/tp]).
//   MoeExpertPart    one expert's (and one part's) tensor stored on its own (experts.5.up_proj),
//                    mapped into the same local [E/ep, ...] engine tensor.
//
// Ranks are global: world() = ep * tp, rank = ep_rank * tp + tp_rank (SGLang's moe_ep/moe_tp
// split; with ep = 1 the rank is the tp rank). Every rank in a group has the same local
// layout. A canonical byte may be held by several ranks (replication); its owner is the
// lowest rank holding it (rank 0 for Replicated, the first replica of a KV shard), so
// per-rank partial sums over owner pieces count each canonical byte exactly once.
//
// Queries cost O(parts) per byte lookup and O(p log p) for p pieces produced, never
// O(tensor size).
//
// Serialization: ToJson() writes the spec; FromJson() re-validates it through Create().
//   {"kind":"replicated","dtype":"BF16","shape":[4096],"world":8}
//   {"kind":"sharded","dtype":"BF16","shape":[4096,11008],"dim":1,"tp":8}
//   {"kind":"fused_part","dtype":"BF16","tp":8,"part":1,
//    "parts":[{"shape":[4096,4096],"replicas":1},{"shape":[512,4096],"replicas":2},...]}
//   {"kind":"fused_checkpoint", same fields without "part"}
//   {"kind":"moe_experts","dtype":"BF16","shape":[64,2816,2048],"dim":1,"num_parts":2,
//    "ep":2,"tp":4}
//   {"kind":"moe_expert_part","dtype":"BF16","shape":[1408,2048],"dim":0,"num_parts":2,
//    "part":1,"experts":64,"expert":5,"ep":2,"tp":4}
// Unknown keys, missing keys and out-of-range numbers are rejected.
//
// Thread-safety: a TensorLayout is an immutable value; concurrent const calls are safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "base/status.h"
#include "deltasync/dtype.h"

namespace deltakv::deltasync {

// Caps on descriptor sizes, so that a hostile descriptor cannot demand large tables.
inline constexpr uint32_t kLayoutMaxWorld = 65536;
inline constexpr uint32_t kLayoutMaxParts = 16;
inline constexpr uint32_t kLayoutMaxDims = 8;

enum class LayoutKind : uint8_t {
  kReplicated,
  kSharded,
  kFusedPart,
  kFusedCheckpoint,
  kMoeExperts,
  kMoeExpertPart,
};

// "replicated", "sharded", "fused_part", "fused_checkpoint", "moe_experts", "moe_expert_part".
std::string_view LayoutKindName(LayoutKind kind);

// One part of a tensor fused along dim 0 (q, k, v or gate, up), as stored in the checkpoint.
struct FusedPartSpec {
  std::vector<uint64_t> shape;
  // Ranks holding each shard: 1 normally, tp / num_kv_heads for replicated KV heads.
  uint32_t replicas = 1;

  bool operator==(const FusedPartSpec&) const = default;
};

// The full description of a layout; which fields matter depends on `kind` (see the factories).
struct LayoutSpec {
  LayoutKind kind = LayoutKind::kReplicated;
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;       // the canonical tensor's shape
  uint32_t tp = 1;                   // ranks per group; kReplicated: the world size
  uint32_t ep = 1;                   // expert-parallel groups (MoE kinds; else 1)
  uint32_t dim = 0;                  // split dim of `shape` (kSharded, MoE kinds)
  std::vector<FusedPartSpec> parts;  // kFusedPart, kFusedCheckpoint
  uint32_t part = 0;                 // kFusedPart, kMoeExpertPart
  uint32_t num_parts = 1;            // MoE kinds
  uint64_t experts = 0;              // kMoeExpertPart: total experts
  uint64_t expert = 0;               // kMoeExpertPart: this tensor's expert

  bool operator==(const LayoutSpec&) const = default;
};

// One contiguous run of canonical bytes at one rank.
struct LayoutPiece {
  uint32_t rank = 0;
  uint64_t local_offset = 0;
  uint64_t canonical_offset = 0;
  uint64_t length = 0;
  bool owner = false;  // this rank counts these bytes in checksum partial sums

  bool operator==(const LayoutPiece&) const = default;
};

struct RankBytes {
  uint64_t touched = 0;  // bytes of the local tensor that come from this canonical tensor
  uint64_t total = 0;    // size of the whole local tensor (all fused parts, all local experts)

  bool operator==(const RankBytes&) const = default;
};

class TensorLayout {
 public:
  // Validates `spec` and builds the layout. InvalidArgument naming the field for: an unknown
  // kind or dtype, tp or ep of 0, ep * tp above kLayoutMaxWorld, more than kLayoutMaxDims
  // dims or kLayoutMaxParts parts, a split dim out of range, an extent not divisible by its
  // shard count, mismatched or empty fused parts, an index out of range, zero experts, a byte
  // size that overflows 64 bits, or a field that `kind` does not use left off its default.
  static StatusOr<TensorLayout> Create(LayoutSpec spec);

  // Every one of `world` ranks holds the whole tensor.
  static StatusOr<TensorLayout> Replicated(std::vector<uint64_t> shape, DType dtype,
                                           uint32_t world);
  // Split evenly along `dim` (shape[dim] % tp == 0).
  static StatusOr<TensorLayout> Sharded(std::vector<uint64_t> shape, DType dtype, uint32_t dim,
                                        uint32_t tp);
  static StatusOr<TensorLayout> ShardDim0(std::vector<uint64_t> shape, DType dtype, uint32_t tp) {
    return Sharded(std::move(shape), dtype, 0, tp);
  }
  static StatusOr<TensorLayout> ShardDim1(std::vector<uint64_t> shape, DType dtype, uint32_t tp) {
    return Sharded(std::move(shape), dtype, 1, tp);
  }
  // The checkpoint tensor is parts[part]; the engine tensor fuses all `parts` along dim 0.
  // All parts have the same dims after dim 0; each part's replicas divides tp and its
  // shard count tp / replicas divides its dim 0.
  static StatusOr<TensorLayout> FusedPart(std::vector<FusedPartSpec> parts, uint32_t part,
                                          DType dtype, uint32_t tp);
  // The checkpoint tensor is the concatenation of all `parts` along dim 0.
  static StatusOr<TensorLayout> FusedCheckpoint(std::vector<FusedPartSpec> parts, DType dtype,
                                                uint32_t tp);
  // shape = [E, ...]; E % ep == 0; 1 <= dim < shape.size(); shape[dim] splits into
  // `num_parts` parts, each divisible by tp.
  static StatusOr<TensorLayout> MoeExperts(std::vector<uint64_t> shape, DType dtype, uint32_t dim,
                                           uint32_t num_parts, uint32_t ep, uint32_t tp);
  // One expert's part stored alone: `shape` is that part's shape (no expert dim), split along
  // `dim`; the engine tensor is [experts/ep, ...] with `num_parts` such parts fused on `dim`.
  static StatusOr<TensorLayout> MoeExpertPart(std::vector<uint64_t> shape, DType dtype,
                                              uint32_t dim, uint32_t part, uint32_t num_parts,
                                              uint64_t experts, uint64_t expert, uint32_t ep,
                                              uint32_t tp);

  // Parses and validates a descriptor written by ToJson(). InvalidArgument for malformed JSON,
  // a missing, unknown or mistyped field, or any error Create() reports.
  static StatusOr<TensorLayout> FromJson(std::string_view text);
  std::string ToJson() const;

  const LayoutSpec& spec() const { return spec_; }
  uint32_t world() const { return ep_ * tp_; }
  uint64_t canonical_bytes() const { return canonical_bytes_; }

  // Bytes of `rank`'s local tensor this layout touches, and that tensor's size; {0, 0} for a
  // rank >= world().
  RankBytes LocalBytes(uint32_t rank) const;

  // Calls fn(const LayoutPiece&) for every maximal piece of canonical bytes
  // [canonical_offset, canonical_offset + length) at every rank holding them. A piece is
  // maximal: contiguous in canonical and local bytes with one owner flag, and not extendable
  // within the run. Pieces come in increasing (canonical_offset, rank) order; a replicated
  // run yields one piece per holding rank. Runs may start and end mid-element.
  // `fn` returns void or Status; a non-OK Status stops the walk and is returned.
  // Returns InvalidArgument (calling fn never) if the run exceeds canonical_bytes().
  // A run inside one segment (one shard row run) emits directly; a longer run buffers the
  // pieces that wait on an earlier-starting one.
  template <typename F>
  Status ForEachPiece(uint64_t canonical_offset, uint64_t length, F&& fn) const;

  // Remembers the segment (one shard row run, a whole replicated tensor, ...) that the last run
  // started in. A caller routing many nearby runs of one tensor keeps one cursor per layout:
  // a run inside the remembered segment is split with no lookup and no indirect call. Starts
  // empty; tied to the layout it was first used with.
  class Cursor;
  // ForEachPiece with the same pieces and errors, using and updating `cursor`.
  template <typename F>
  Status ForEachPiece(Cursor& cursor, uint64_t canonical_offset, uint64_t length, F&& fn) const;
  // The pieces ForEachPiece(cursor, ...) gives a non-empty run that lies inside the cursor's
  // remembered segment, without a call per piece: every piece has `*local_offset`, the run's
  // canonical offset and length, and ranks [*rank_lo, *rank_lo + *rank_count), *rank_lo the
  // owner. False (nothing set, the cursor unchanged) for any other run.
  bool PiecesInCursorSegment(const Cursor& cursor, uint64_t canonical_offset, uint64_t length,
                             uint64_t* local_offset, uint32_t* rank_lo,
                             uint32_t* rank_count) const;

  // The local offset of one canonical byte at `rank`; nullopt if the rank does not hold it
  // or an argument is out of range.
  std::optional<uint64_t> CanonicalToLocal(uint32_t rank, uint64_t canonical_offset) const;
  // The canonical byte stored at `local_offset` of `rank`'s local tensor; nullopt if that
  // byte belongs to another tensor (another fused part, another expert) or is out of range.
  std::optional<uint64_t> LocalToCanonical(uint32_t rank, uint64_t local_offset) const;

 private:
  // One part of the fused split dim, in local concatenation order.
  struct Part {
    uint64_t rows = 0;                  // extent of the part along the split dim
    uint32_t replicas = 1;              // tp ranks holding each shard
    uint32_t shards = 1;                // tp / replicas
    uint64_t shard_rows = 0;            // rows / shards
    uint64_t local_row_offset = 0;      // in the local concatenation
    uint64_t canonical_row_offset = 0;  // in the canonical row group (canonical parts only)
  };
  // A canonical run [begin, end) held by ranks [rank_lo, rank_lo + rank_count) at the same
  // local offsets, local_begin at `begin`; rank_lo is the owner.
  struct Segment {
    uint64_t begin = 0;
    uint64_t end = 0;
    uint64_t local_begin = 0;
    uint32_t rank_lo = 0;
    uint32_t rank_count = 0;
  };
  struct PieceSink {
    void* ctx;
    Status (*fn)(void* ctx, const LayoutPiece& piece);
  };
  // fn(piece) as a Status, for callbacks returning void or Status.
  template <typename Fn>
  static Status CallPiece(Fn& fn, const LayoutPiece& piece);

  TensorLayout() = default;
  // Builds the geometry from spec_; the kind-specific checks have already passed.
  Status BuildGeometry(uint64_t experts_per_group, uint64_t expert_begin,
                       uint64_t canonical_experts, uint64_t outer, uint64_t inner_bytes,
                       std::vector<Part> parts, uint32_t first_part, uint32_t part_count);
  // REQUIRES: canonical_offset < canonical_bytes_.
  Segment SegmentAt(uint64_t canonical_offset) const;
  Status ForEachPieceImpl(uint64_t canonical_offset, uint64_t length, PieceSink sink) const;

  LayoutSpec spec_;
  // The canonical tensor viewed as [canonical_experts_, outer_, canonical_rows_, inner_bytes_]
  // and each local tensor as [experts_per_group_, outer_, local_rows_, inner_bytes_].
  uint32_t ep_ = 1;
  uint32_t tp_ = 1;
  uint64_t experts_per_group_ = 1;
  uint64_t expert_begin_ = 0;  // global index of canonical expert 0
  uint64_t canonical_experts_ = 1;
  uint64_t outer_ = 1;
  uint64_t inner_bytes_ = 0;
  std::vector<Part> parts_;
  uint32_t first_part_ = 0;  // the canonical tensor holds parts [first_part_, +part_count_)
  uint32_t part_count_ = 1;
  uint64_t canonical_rows_ = 0;
  uint64_t local_rows_ = 0;
  uint64_t canonical_bytes_ = 0;
  uint64_t local_total_bytes_ = 0;
  // Every canonical part is held whole by all tp ranks of its group and the canonical parts
  // fill the local rows: the bytes of one expert group are one contiguous run everywhere.
  bool uniform_ = false;

 public:
  class Cursor {
   public:
    Cursor() = default;

   private:
    friend class TensorLayout;
    Segment segment_;  // empty (begin == end) until the first lookup
  };
};

// Fused part specs for QKVParallelLinear: q [num_heads*head_dim, trailing...], k and v
// [num_kv_heads*head_dim, trailing...], KV replicas max(1, tp / num_kv_heads).
// InvalidArgument when num_heads % tp != 0, or neither num_kv_heads % tp nor
// tp % num_kv_heads is 0, or a count is 0.
StatusOr<std::vector<FusedPartSpec>> QkvPartSpecs(uint64_t num_heads, uint64_t num_kv_heads,
                                                  uint64_t head_dim, std::vector<uint64_t> trailing,
                                                  uint32_t tp);

template <typename Fn>
Status TensorLayout::CallPiece(Fn& fn, const LayoutPiece& piece) {
  using Result = std::invoke_result_t<Fn&, const LayoutPiece&>;
  static_assert(std::is_void_v<Result> || std::is_same_v<Result, Status>,
                "ForEachPiece callback must return void or Status");
  if constexpr (std::is_void_v<Result>) {
    fn(piece);
    return Status::Ok();
  } else {
    return fn(piece);
  }
}

template <typename F>
Status TensorLayout::ForEachPiece(uint64_t canonical_offset, uint64_t length, F&& fn) const {
  using Fn = std::remove_reference_t<F>;
  PieceSink sink{const_cast<void*>(static_cast<const void*>(std::addressof(fn))),
                 [](void* ctx, const LayoutPiece& piece) -> Status {
                   return CallPiece(*static_cast<Fn*>(ctx), piece);
                 }};
  return ForEachPieceImpl(canonical_offset, length, sink);
}

template <typename F>
Status TensorLayout::ForEachPiece(Cursor& cursor, uint64_t canonical_offset, uint64_t length,
                                  F&& fn) const {
  // Empty and out-of-range runs take the general path (its result, its errors); so does a run
  // that crosses segments, after the cursor remembers the segment it starts in.
  if (length == 0) return ForEachPiece(canonical_offset, length, fn);
  const Segment& s = cursor.segment_;
  if (canonical_offset < s.begin || canonical_offset >= s.end ||
      length > s.end - canonical_offset) {
    if (canonical_offset >= canonical_bytes_) return ForEachPiece(canonical_offset, length, fn);
    cursor.segment_ = SegmentAt(canonical_offset);
    if (length > s.end - canonical_offset) return ForEachPiece(canonical_offset, length, fn);
  }
  // Inside one segment: one piece per holding rank, as ForEachPieceImpl emits them.
  const uint64_t local = s.local_begin + (canonical_offset - s.begin);
  for (uint32_t i = 0; i < s.rank_count; ++i) {
    Status st = CallPiece(fn, LayoutPiece{.rank = s.rank_lo + i,
                                          .local_offset = local,
                                          .canonical_offset = canonical_offset,
                                          .length = length,
                                          .owner = i == 0});
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

inline bool TensorLayout::PiecesInCursorSegment(const Cursor& cursor, uint64_t canonical_offset,
                                                uint64_t length, uint64_t* local_offset,
                                                uint32_t* rank_lo, uint32_t* rank_count) const {
  const Segment& s = cursor.segment_;
  if (length == 0 || canonical_offset < s.begin || canonical_offset >= s.end ||
      length > s.end - canonical_offset) {
    return false;
  }
  *local_offset = s.local_begin + (canonical_offset - s.begin);
  *rank_lo = s.rank_lo;
  *rank_count = s.rank_count;
  return true;
}

}  // namespace deltakv::deltasync
