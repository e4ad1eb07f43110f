// Chunking: safetensors files on tensor boundaries, everything else with a FastCDC-style gear
// hash and normalized chunking (VOLUME.md, "Chunking").
#include "volume/chunker.h"

#include <algorithm>

#include "deltasync/safetensors.h"
#include "deltasync/volume.h"

namespace deltakv::deltasync {
namespace {

// The gear table is splitmix64 run from this seed (the ASCII bytes "dkvgear1").
constexpr uint64_t kGearSeed = 0x646b766765617231ull;
// Normalized chunking: before the average size a cut needs the top 18 bits of the hash to be
// zero, from the average size on only the top 14 (the top bits depend on the last 64 bytes).
constexpr uint64_t kMaskSmall = ~uint64_t{0} << (64 - 18);
constexpr uint64_t kMaskLarge = ~uint64_t{0} << (64 - 14);

uint64_t SplitMix64(uint64_t& state) {
  state += 0x9e3779b97f4a7c15ull;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::array<uint64_t, 256> BuildGearTable() {
  std::array<uint64_t, 256> table{};
  uint64_t state = kGearSeed;
  for (uint64_t& entry : table) entry = SplitMix64(state);
  return table;
}

// Returns the length of the chunk that starts at data[0].
uint64_t NextCut(std::span<const uint8_t> data, const std::array<uint64_t, 256>& gear) {
  const uint64_t n = std::min<uint64_t>(data.size(), kCdcMaxChunk);
  if (n <= kCdcMinChunk) return n;
  const uint64_t normal = std::min(n, kCdcAvgChunk);
  uint64_t h = 0;
  uint64_t i = kCdcMinChunk;
  for (; i < normal; ++i) {
    h = (h << 1) + gear[data[i]];
    if ((h & kMaskSmall) == 0) return i + 1;
  }
  for (; i < n; ++i) {
    h = (h << 1) + gear[data[i]];
    if ((h & kMaskLarge) == 0) return i + 1;
  }
  return n;
}

void AddPieces(uint64_t offset, uint64_t size, uint64_t piece_size, std::vector<ChunkSpan>& out) {
  for (uint64_t done = 0; done < size; done += piece_size) {
    out.push_back({offset + done, std::min(piece_size, size - done)});
  }
}

}  // namespace

const std::array<uint64_t, 256>& CdcGearTable() {
  static const std::array<uint64_t, 256> table = BuildGearTable();
  return table;
}

uint64_t CdcCutLength(std::span<const uint8_t> data) { return NextCut(data, CdcGearTable()); }

std::vector<ChunkSpan> CdcChunks(std::span<const uint8_t> data) {
  const std::array<uint64_t, 256>& gear = CdcGearTable();
  std::vector<ChunkSpan> out;
  uint64_t offset = 0;
  while (offset < data.size()) {
    const uint64_t len = NextCut(data.subspan(offset), gear);
    out.push_back({offset, len});
    offset += len;
  }
  return out;
}

std::vector<ChunkSpan> SafetensorsChunks(const SafetensorsHeader& header, uint64_t piece_size) {
  std::vector<ChunkSpan> out;
  const uint64_t data_offset = header.data_offset();
  out.push_back({0, data_offset});
  for (const TensorInfo& t : header.tensors) {
    AddPieces(data_offset + t.begin, t.size(), piece_size, out);
  }
  return out;
}

std::vector<ChunkSpan> ChunkFile(std::span<const uint8_t> data, uint64_t piece_size) {
  auto header = ParseSafetensorsHeader(data, data.size());
  if (!header.ok()) return CdcChunks(data);
  return SafetensorsChunks(*header, piece_size);
}

}  // namespace deltakv::deltasync
