#include "kvtier/pool_layout.h"

#include <algorithm>
#include <string>

namespace deltakv::kvtier {
namespace {

constexpr uint64_t RoundUp(uint64_t value, uint64_t align) {
  return (value + align - 1) / align * align;
}

uint64_t NextPowerOfTwo(uint64_t value) {
  uint64_t p = 1;
  while (p < value) p <<= 1;
  return p;
}

}  // namespace

std::string_view SlotStateName(SlotState state) {
  switch (state) {
    case SlotState::kFree:
      return "FREE";
    case SlotState::kWriting:
      return "WRITING";
    case SlotState::kReady:
      return "READY";
    case SlotState::kEvicting:
      return "EVICTING";
    case SlotState::kFreeing:
      return "FREEING";
  }
  return "INVALID";
}

uint64_t SlotStride(uint64_t block_bytes) {
  return block_bytes < 4096 ? RoundUp(block_bytes, 64) : RoundUp(block_bytes, 4096);
}

StatusOr<PoolGeometry> ComputeGeometry(uint64_t block_bytes, uint64_t slot_count,
                                       uint64_t chunk_bytes, uint64_t event_capacity) {
  if (block_bytes == 0 || block_bytes > kMaxBlockBytes) {
    return InvalidArgument("kv pool: block_bytes " + std::to_string(block_bytes) +
                           " must be in [1, " + std::to_string(kMaxBlockBytes) + "]");
  }
  if (slot_count == 0 || slot_count > kMaxSlots) {
    return InvalidArgument("kv pool: capacity " + std::to_string(slot_count) +
                           " slots must be in [1, " + std::to_string(kMaxSlots) + "]");
  }
  if (event_capacity > kMaxEventCapacity || (event_capacity & (event_capacity - 1)) != 0) {
    return InvalidArgument("kv pool: event capacity " + std::to_string(event_capacity) +
                           " must be 0 or a power of two up to " +
                           std::to_string(kMaxEventCapacity));
  }
  PoolGeometry g;
  g.block_bytes = block_bytes;
  g.slot_stride = SlotStride(block_bytes);
  g.slot_count = slot_count;
  g.chunk_slots = std::max<uint64_t>(1, std::min(slot_count, chunk_bytes / g.slot_stride));
  g.bucket_count = NextPowerOfTwo((slot_count + 3) / 4);
  g.event_capacity = static_cast<uint32_t>(event_capacity);
  g.counters_offset = kPoolHeaderOffset + sizeof(PoolHeader);
  g.events_offset = g.counters_offset + sizeof(PoolCounterShard) * kCounterShards;
  g.slots_offset =
      RoundUp(g.events_offset + sizeof(PoolEventEntry) * event_capacity, kRegionAlignment);
  g.buckets_offset = RoundUp(g.slots_offset + sizeof(SlotMeta) * slot_count, kRegionAlignment);
  const uint64_t buckets_end =
      g.buckets_offset + sizeof(IndexBucket) * (g.bucket_count + kProbeBuckets);
  g.data_offset = RoundUp(buckets_end, kDataAlignment);
  const uint64_t kLimit = 1ull << 52;  // 4 PiB: far beyond any host, keeps the math exact
  if (g.slot_stride > kLimit / slot_count || g.data_offset + g.slot_stride * slot_count > kLimit) {
    return InvalidArgument("kv pool: " + std::to_string(slot_count) + " slots of " +
                           std::to_string(block_bytes) + " bytes is too large");
  }
  g.total_size = g.data_offset + g.slot_stride * slot_count;
  return g;
}

Status ValidatePoolHeader(const PoolHeader& h, uint64_t segment_size) {
  auto bad = [](const std::string& what) { return DataLoss("kv pool header: " + what); };
  if (segment_size < kPoolHeaderOffset + sizeof(PoolHeader)) {
    return bad("segment of " + std::to_string(segment_size) + " bytes is too small for it");
  }
  if (h.magic != kPoolMagic) return bad("wrong magic, not a kv pool");
  if (h.layout_version != kPoolLayoutVersion) {
    return FailedPrecondition("kv pool has layout version " + std::to_string(h.layout_version) +
                              " but this build speaks " + std::to_string(kPoolLayoutVersion) +
                              "; refusing to attach");
  }
  if (h.header_size != sizeof(PoolHeader)) {
    return bad("header_size " + std::to_string(h.header_size) + ", expected 384");
  }
  if (h.max_pin_holders != kMaxPinHolders || h.slot_meta_size != sizeof(SlotMeta) ||
      h.bucket_size != sizeof(IndexBucket) || h.entries_per_bucket != kEntriesPerBucket ||
      h.probe_buckets != kProbeBuckets || h.counter_shards != kCounterShards ||
      h.counter_shard_size != sizeof(PoolCounterShard) ||
      h.event_entry_size != sizeof(PoolEventEntry)) {
    return bad("structure sizes disagree with this build");
  }
  if ((h.flags & ~kPoolKnownFlags) != 0) return bad("unknown flag bits " + std::to_string(h.flags));
  StatusOr<PoolGeometry> g = ComputeGeometry(h.block_bytes, h.slot_count, 0, h.event_capacity);
  if (!g.ok()) return bad(g.status().message());
  if (h.slot_stride != g->slot_stride) return bad("slot_stride " + std::to_string(h.slot_stride));
  if (h.chunk_slots == 0 || h.chunk_slots > h.slot_count) {
    return bad("chunk_slots " + std::to_string(h.chunk_slots));
  }
  if (h.bucket_count != g->bucket_count)
    return bad("bucket_count " + std::to_string(h.bucket_count));
  if (h.counters_offset != g->counters_offset || h.events_offset != g->events_offset ||
      h.slots_offset != g->slots_offset || h.buckets_offset != g->buckets_offset ||
      h.data_offset != g->data_offset) {
    return bad("region offsets disagree with the geometry");
  }
  if (g->total_size != segment_size) {
    return bad("geometry needs " + std::to_string(g->total_size) + " bytes but the segment has " +
               std::to_string(segment_size));
  }
  return Status::Ok();
}

}  // namespace deltakv::kvtier
