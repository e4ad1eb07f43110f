// Fuzzes the planner's pipelined decode (decode_threads >= 2: a fetch thread, walker threads, a
// bounded queue, the calling thread decoding untaken frames) against its single-thread decode.
// The input builds a delta in memory: one to three tensors of world-2 layouts (row shards or
// replicated; small ones planned in full), frames of sparse XOR bytes compressed by libzstd at
// levels 1-3, some of them corrupted (a flipped byte, garbage instead of a frame, a wrong
// xor_digest, a truncated object), and fetch windows, queue sizes and thread counts from the
// input. Both runs must agree: both fail, or both succeed with the same bytes in their pieces
// (in any order, runs split in any way).
// The pipelined run's output streams each rank's records into small plan parts, as the
// sidecar does, and lends the open part's writer to the planner (PlanOutput::LendWriter):
// its pieces are read back from the parts. A hang is caught by libFuzzer's -timeout.
#include <zstd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "deltasync/delta_manifest.h"
#include "deltasync/layout.h"
#include "deltasync/object_store.h"
#include "deltasync/sync_planner.h"
#include "deltasync/xor_digest.h"
#include "fuzz_input.h"
#include "plan_parts_output.h"

using namespace deltakv;
using namespace deltakv::deltasync;

namespace {

using Input = FuzzInput<2>;

// One object held in memory; reads past its end fail as a short store read does.
class MemoryStore final : public ObjectStore {
 public:
  MemoryStore(std::string name, std::string bytes)
      : name_(std::move(name)), bytes_(std::move(bytes)) {}
  StatusOr<uint64_t> Size(const std::string& name) override {
    if (name != name_) return NotFound(name);
    return bytes_.size();
  }
  StatusOr<std::string> ReadRange(const std::string& name, uint64_t offset,
                                  uint64_t length) override {
    if (name != name_) return NotFound(name);
    if (offset > bytes_.size() || length > bytes_.size() - offset) return DataLoss("short read");
    return bytes_.substr(offset, length);
  }
  StatusOr<std::string> ReadObject(const std::string& name, uint64_t) override {
    return ReadRange(name, 0, bytes_.size());
  }
  std::string Describe() const override { return "memory://"; }

 private:
  std::string name_, bytes_;
};

using Piece = std::tuple<uint32_t, uint32_t, uint64_t, uint64_t, bool, std::string>;

class PieceOutput final : public PlanOutput {
 public:
  Status Add(uint32_t rank, uint32_t tensor, uint64_t local, uint64_t canonical,
             std::span<const uint8_t> bytes, bool owner) override {
    pieces.emplace_back(rank, tensor, local, canonical, owner,
                        std::string(bytes.begin(), bytes.end()));
    return Status::Ok();
  }
  std::vector<Piece> pieces;
};

// Every byte of the pieces, as a piece of one byte: the same bytes however runs were split.
std::vector<Piece> Bytes(const std::vector<Piece>& pieces) {
  std::vector<Piece> bytes;
  for (const auto& [rank, tensor, local, canonical, owner, data] : pieces) {
    for (size_t i = 0; i < data.size(); ++i) {
      bytes.emplace_back(rank, tensor, local + i, canonical + i, owner, data.substr(i, 1));
    }
  }
  std::sort(bytes.begin(), bytes.end());
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in{data, size};
  const std::string object_name = "shard-00000.zst";
  DeltaManifest m;
  m.version = "v2";
  m.parent_version = "v1";
  RankTensorTables ranks(2);
  std::string object;
  const uint32_t tensors = 1 + static_cast<uint32_t>(in.Next(3));
  for (uint32_t t = 0; t < tensors; ++t) {
    const uint64_t rows = 8 * (1 + in.Next(48));  // 512 B .. 24 KiB; below 4 KiB planned in full
    const std::vector<uint64_t> shape = {rows, 64};
    auto layout = in.Next(2) == 0 ? TensorLayout::ShardDim0(shape, DType::kU8, 2)
                                  : TensorLayout::Replicated(shape, DType::kU8, 2);
    if (!layout.ok()) std::abort();
    DeltaTensor dt;
    dt.name = "t" + std::to_string(t);
    dt.length = rows * 64;
    const uint64_t frame_bytes = 256 * (1 + in.Next(16));
    for (uint64_t off = 0; off < dt.length; off += frame_bytes) {
      if (in.Next(4) == 0) continue;  // an unchanged stretch: no frame
      const uint64_t n = std::min(frame_bytes, dt.length - off);
      std::string x(n, '\0');
      for (uint64_t k = 0, count = in.Next(n / 4 + 1); k < count; ++k) {
        x[in.Next(n)] = static_cast<char>(1 + in.Next(255));
      }
      std::string compressed(ZSTD_compressBound(n), '\0');
      ZSTD_CCtx* cctx = ZSTD_createCCtx();
      ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 1 + static_cast<int>(in.Next(3)));
      ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
      const size_t c = ZSTD_compress2(cctx, compressed.data(), compressed.size(), x.data(), n);
      ZSTD_freeCCtx(cctx);
      if (ZSTD_isError(c)) std::abort();
      compressed.resize(c);
      DeltaFrame f;
      f.offset = off;
      f.length = n;
      f.object = object_name;
      f.xor_digest =
          ComputeXorDigest(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(x.data()), n));
      switch (in.Next(16)) {
        case 0:  // a flipped byte
          compressed[in.Next(compressed.size())] ^= static_cast<char>(1 + in.Next(255));
          break;
        case 1:  // not a frame at all
          compressed.assign(1 + in.Next(64), static_cast<char>(in.Next(256)));
          break;
        case 2:  // the manifest's digest is wrong
          f.xor_digest->lo ^= 1;
          break;
        case 3:  // no digest: the frame's XXH64 is checked instead
          f.xor_digest.reset();
          break;
        default:
          break;
      }
      f.object_offset = object.size();
      f.compressed_length = compressed.size();
      object += compressed;
      dt.frames.push_back(std::move(f));
    }
    if (dt.frames.empty()) continue;
    const auto index = static_cast<uint32_t>(m.tensors.size());  // plan tables follow the manifest
    for (uint32_t r = 0; r < 2; ++r) ranks[r].emplace(dt.name, RankTensorEntry{index, *layout});
    m.tensors.push_back(std::move(dt));
  }
  if (m.tensors.empty()) return 0;
  // Now and then the object is shorter than its frames say (a store that lost its tail).
  const uint64_t declared = object.size();
  if (in.Next(16) == 0) {
    object.resize(object.size() - std::min<uint64_t>(object.size(), 1 + in.Next(64)));
  }
  m.objects.push_back({object_name, declared, ""});
  PlannerOptions one;
  one.first_fetch_window_bytes = 1 + in.Next(4096);
  one.fetch_window_bytes = 1 + in.Next(16384);
  PlannerOptions many = one;
  many.decode_threads = 2 + static_cast<unsigned>(in.Next(3));
  many.queued_chunk_bytes = 1 + in.Next(1 << 15);
  many.first_fetch_window_bytes = 1 + in.Next(4096);
  many.fetch_window_bytes = 1 + in.Next(16384);
  many.prefetch = in.Next(4) != 0;

  // Parts with room for one record of 8 bytes up to several frames' runs.
  const uint64_t part_bytes =
      (WritePlanWriter::FixedBytes(m.tensors.size()) + 40 + in.Next(8192)) & ~uint64_t{7};

  MemoryStore store_one(object_name, object), store_many(object_name, object);
  PieceOutput out_one;
  PlanPartsOutput out_many(2, static_cast<uint32_t>(m.tensors.size()), part_bytes, /*lend=*/true);
  out_many.takes_records = in.Next(2) == 0;  // walkers route and record, or stream bytes
  auto r_one = BuildSyncPlans(m, store_one, ranks, out_one, one);
  auto r_many = BuildSyncPlans(m, store_many, ranks, out_many, many);
  if (r_one.ok() != r_many.ok()) std::abort();
  if (!r_one.ok()) return 0;
  if (!out_many.Finish().ok()) std::abort();
  if (Bytes(out_one.pieces) != Bytes(out_many.Pieces())) std::abort();
  if (r_one->nonzero_bytes != r_many->nonzero_bytes || r_one->frames != r_many->frames) {
    std::abort();
  }
  return 0;
}
