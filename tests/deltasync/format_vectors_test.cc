// The test vectors of deltasync/FORMAT.md: a committed parent, child and delta (regenerate with
// tests/deltasync/data/vectors/make_vectors.py). Checksums below were computed with zlib.
#include <gtest/gtest.h>

#include <string>

#include "base/file_util.h"
#include "deltasync/adler32.h"
#include "deltasync/applier.h"
#include "deltasync/delta_manifest.h"
#include "test_util.h"

namespace deltakv::deltasync {
namespace {

const std::string kVectors = std::string(DELTAKV_TEST_DATA_DIR) + "/vectors";

uint32_t AdlerOf(std::string_view s) {
  return Adler32(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
}

TEST(FormatVectors, Adler32) {
  EXPECT_EQ(FormatChecksum(AdlerOf("")), "00000001");
  EXPECT_EQ(FormatChecksum(AdlerOf("Wikipedia")), "11e60398");
  std::string twelve;
  for (int i = 0; i < 12; ++i) twelve.push_back(static_cast<char>(i));
  EXPECT_EQ(FormatChecksum(AdlerOf(twelve)), "012a0043");
}

TEST(FormatVectors, DeltaManifestFields) {
  auto text = ReadFileToString(kVectors + "/delta/manifest.json");
  ASSERT_TRUE(text.ok());
  auto m = ParseDeltaManifest(*text);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->parent_version, "v1");
  EXPECT_EQ(m->version, "v2");
  ASSERT_EQ(m->tensors.size(), 2u);
  EXPECT_EQ(m->tensors[0].name, "layer.w");
  EXPECT_EQ(m->tensors[0].length, 128u);
  EXPECT_EQ(FormatChecksum(m->tensors[0].parent_adler32), "2a722e66");
  EXPECT_EQ(FormatChecksum(m->tensors[0].adler32), "64602ee4");
  EXPECT_EQ(m->tensors[1].name, "codes");
  EXPECT_EQ(FormatChecksum(m->tensors[1].parent_adler32), "02b80079");
  EXPECT_EQ(FormatChecksum(m->tensors[1].adler32), "02a9006a");
  // xor_digest of each frame (FORMAT.md 2.5; computed with an independent Python big-integer
  // implementation): X of layer.w has 01 80 at bytes 10-11 and 03 at byte 100; X of codes
  // has 0f at byte 15.
  ASSERT_TRUE(m->tensors[0].frames[0].xor_digest.has_value());
  EXPECT_EQ(FormatXorDigest(*m->tensors[0].frames[0].xor_digest),
            "00000002054595f64009646bdcc10000");
  ASSERT_TRUE(m->tensors[1].frames[0].xor_digest.has_value());
  EXPECT_EQ(FormatXorDigest(*m->tensors[1].frames[0].xor_digest),
            "087f98b0dc07236f4f00000000000000");
  ASSERT_EQ(m->checkpoint_tensors.size(), 4u);
  EXPECT_EQ(m->checkpoint_tensors[3].name, "empty");
  EXPECT_EQ(m->checkpoint_tensors[3].begin, m->checkpoint_tensors[3].end);
}

TEST(FormatVectors, ApplyRebuildsTheChild) {
  testing::TempDir tmp;
  ApplyOptions ao{kVectors + "/parent", kVectors + "/delta", tmp / "out"};
  auto r = ApplyDelta(ao);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(testing::ReadAll(tmp / "out/model.safetensors"),
            testing::ReadAll(kVectors + "/child/model.safetensors"));
}

}  // namespace
}  // namespace deltakv::deltasync
