// KvLayout: gather and scatter agree with a plain per-byte reference for both engine layouts
// (with and without padding between runs), and bad layouts are refused.
#include "kvtier/kv_layout.h"

#include <gtest/gtest.h>

#include <random>

#include "tier_test_util.h"

namespace deltakv::kvtier {
namespace {

using testing::FakeEngineKv;
using testing::FakeLayoutKind;

void RunRegions(const std::vector<CopyRegion>& regions) {
  for (const CopyRegion& r : regions) std::memcpy(r.dst, r.src, r.bytes);
}

struct LayoutCase {
  FakeLayoutKind kind;
  uint64_t pad;
};

class KvLayoutTest : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(KvLayoutTest, GatherAndScatterMatchReference) {
  const LayoutCase c = GetParam();
  FakeEngineKv engine(c.kind, /*layers=*/5, /*blocks=*/7, /*tensor_bytes=*/24, c.pad);
  KvLayout layout = engine.Layout();
  ASSERT_EQ(layout.block_bytes(), engine.block_bytes());
  ASSERT_EQ(layout.num_blocks(), 7u);
  EXPECT_TRUE(layout.CheckBlockBytes(engine.block_bytes()).ok());
  const Status wrong = layout.CheckBlockBytes(engine.block_bytes() + 1);
  EXPECT_EQ(wrong.code(), StatusCode::kInvalidArgument);
  // The message names the pool this layout needs.
  EXPECT_NE(wrong.message().find("--kv-block-bytes " + std::to_string(engine.block_bytes())),
            std::string::npos)
      << wrong.message();

  std::mt19937_64 rng(static_cast<uint64_t>(c.kind) * 10 + c.pad);
  std::vector<std::vector<uint8_t>> images(engine.blocks());
  for (uint64_t b = 0; b < engine.blocks(); ++b) {
    images[b].resize(engine.block_bytes());
    for (uint8_t& x : images[b]) x = static_cast<uint8_t>(rng());
    engine.WriteBlock(b, images[b]);
  }
  // Gather every block into a slot and compare with the reference image.
  std::vector<uint8_t> slot(engine.block_bytes());
  for (uint64_t b = 0; b < engine.blocks(); ++b) {
    std::vector<CopyRegion> regions;
    ASSERT_TRUE(layout.AppendGather(b, slot.data(), &regions).ok());
    uint64_t total = 0;
    for (const CopyRegion& r : regions) total += r.bytes;
    EXPECT_EQ(total, engine.block_bytes());
    RunRegions(regions);
    EXPECT_EQ(slot, images[b]) << "block " << b;
  }
  // Scatter images in reverse order into a second memory; padding stays untouched.
  FakeEngineKv target(c.kind, 5, 7, 24, c.pad);
  KvLayout target_layout = target.Layout();
  for (uint64_t b = 0; b < target.blocks(); ++b) {
    std::vector<CopyRegion> regions;
    ASSERT_TRUE(
        target_layout.AppendScatter(b, images[target.blocks() - 1 - b].data(), &regions).ok());
    RunRegions(regions);
  }
  for (uint64_t b = 0; b < target.blocks(); ++b) {
    EXPECT_EQ(target.ReadBlock(b), images[target.blocks() - 1 - b]) << "block " << b;
  }
  EXPECT_TRUE(target.CanariesIntact());
}

INSTANTIATE_TEST_SUITE_P(Layouts, KvLayoutTest,
                         ::testing::Values(LayoutCase{FakeLayoutKind::kPerLayerKV, 0},
                                           LayoutCase{FakeLayoutKind::kPerLayerKV, 8},
                                           LayoutCase{FakeLayoutKind::kPerLayerFused, 0},
                                           LayoutCase{FakeLayoutKind::kPerLayerFused, 3},
                                           LayoutCase{FakeLayoutKind::kCrossLayer, 0},
                                           LayoutCase{FakeLayoutKind::kCrossLayer, 16}));

TEST(KvLayout, CrossLayerBlockIsOneRegionPerLayerTensorsAreMany) {
  FakeEngineKv cross(FakeLayoutKind::kCrossLayer, 4, 3, 16);
  std::vector<uint8_t> slot(cross.block_bytes());
  std::vector<CopyRegion> regions;
  ASSERT_TRUE(cross.Layout().AppendGather(1, slot.data(), &regions).ok());
  EXPECT_EQ(regions.size(), 1u);
  FakeEngineKv per_layer(FakeLayoutKind::kPerLayerKV, 4, 3, 16);
  regions.clear();
  ASSERT_TRUE(per_layer.Layout().AppendGather(1, slot.data(), &regions).ok());
  EXPECT_EQ(regions.size(), 8u);
}

TEST(KvLayout, ContiguousRunsMerge) {
  // One tensor [blocks, 2, 32] read as K and V pieces: a block's K and V runs are adjacent, so
  // its gather is a single region.
  std::vector<uint8_t> tensor(4 * 64);
  StatusOr<KvLayout> layout = KvLayout::FromPieces(
      {KvPiece{tensor.data(), 64, 32}, KvPiece{tensor.data() + 32, 64, 32}}, 4);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  std::vector<uint8_t> slot(64);
  std::vector<CopyRegion> regions;
  ASSERT_TRUE(layout->AppendGather(2, slot.data(), &regions).ok());
  ASSERT_EQ(regions.size(), 1u);
  EXPECT_EQ(regions[0].src, tensor.data() + 128);
  EXPECT_EQ(regions[0].bytes, 64u);
}

TEST(KvLayout, RefusesBadLayouts) {
  std::vector<uint8_t> buf(1024);
  auto code = [](const StatusOr<KvLayout>& l) { return l.status().code(); };
  const StatusCode bad = StatusCode::kInvalidArgument;
  EXPECT_EQ(code(KvLayout::FromPieces({}, 4)), bad);
  EXPECT_EQ(code(KvLayout::FromPieces({KvPiece{buf.data(), 0, 16}}, 0)), bad);
  EXPECT_EQ(code(KvLayout::FromPieces({KvPiece{nullptr, 0, 16}}, 4)), bad);
  EXPECT_EQ(code(KvLayout::FromPieces({KvPiece{buf.data(), 0, 0}}, 4)), bad);
  EXPECT_EQ(code(KvLayout::FromPieces({KvPiece{buf.data(), 8, 16}}, 4)), bad);  // stride < bytes
  EXPECT_EQ(code(KvLayout::FromPieces({KvPiece{buf.data(), UINT64_MAX / 2, 16}}, 4)), bad);
  EXPECT_EQ(code(KvLayout::PerLayer({}, 4, 16)), bad);
  LayerTensors no_k;
  EXPECT_EQ(code(KvLayout::PerLayer(std::span<const LayerTensors>(&no_k, 1), 4, 16)), bad);
  std::vector<KvPiece> too_many(kMaxLayoutPieces + 1, KvPiece{buf.data(), 0, 1});
  EXPECT_EQ(code(KvLayout::FromPieces(too_many, 1)), bad);

  StatusOr<KvLayout> ok = KvLayout::CrossLayer(buf.data(), 4, 256);
  ASSERT_TRUE(ok.ok());
  std::vector<CopyRegion> regions;
  std::vector<uint8_t> slot(256);
  EXPECT_EQ(ok->AppendGather(4, slot.data(), &regions).code(), bad);
  EXPECT_EQ(ok->AppendScatter(99, slot.data(), &regions).code(), bad);
  EXPECT_TRUE(regions.empty());
  EXPECT_EQ(KvLayout().CheckBlockBytes(256).code(), bad);
}

}  // namespace
}  // namespace deltakv::kvtier
