// Sealed volumes, parent-XOR chunks: deltas against the parent, chains, gc and copy of chains,
// local parents and corrupt deltas.
#include <gtest/gtest.h>

#include <cstring>

#include "deltasync/volume.h"
#include "volume_test_util.h"

namespace deltakv::deltasync {
namespace {

using namespace volume_testing;

// ----- parent-XOR chunks -----

// A checkpoint of two 1 MiB tensors; step k changes `per_step` scattered bytes of "w1" per
// step (so consecutive steps differ sparsely) and leaves "w0" as it was.
std::string SparseStep(int step, size_t per_step) {
  std::string w1 = SplitMixBytes(1 << 20, 21);
  for (int k = 1; k <= step; ++k) {
    const std::string positions = SplitMixBytes(per_step * 4, 1000 + k);
    for (size_t i = 0; i < per_step; ++i) {
      uint32_t p = 0;
      std::memcpy(&p, positions.data() + 4 * i, 4);
      w1[p % w1.size()] ^= static_cast<char>(1 + (i % 7));
    }
  }
  return w1;
}

void WriteStepDir(const std::string& dir, int step) {
  fs::create_directories(dir);
  const std::string w0 = SplitMixBytes(1 << 20, 20), w1 = SparseStep(step, 200);
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors",
                               {{"w0", DType::kU8, {w0.size()}, AsSpan(w0)},
                                {"w1", DType::kU8, {w1.size()}, AsSpan(w1)}},
                               {})
                  .ok());
  WriteAll(dir + "/config.json", "{\"step\":" + std::to_string(step) + "}");
}

TEST(VolumeXor, ChangedPiecesAreStoredAsDeltasAndPullExactly) {
  Fixture f;
  PushOptions small;
  small.piece_size = 256 << 10;
  WriteStepDir(f.tmp / "s0", 0);
  WriteStepDir(f.tmp / "s1", 1);
  const PushResult v0 = f.Push(f.tmp / "s0", "m", small);
  PushOptions with_parent = small;
  with_parent.parent = v0.ref.digest;
  const PushResult v1 = f.Push(f.tmp / "s1", "m", with_parent);
  // w1's four pieces all change (200 scattered bytes); config.json changes too but has no
  // parent chunk of the same size.
  EXPECT_EQ(v1.chunks_xor, 4u);
  EXPECT_GT(v1.bytes_xor, 0u);
  EXPECT_LT(v1.bytes_xor, 4u * 8000u) << "deltas of 50 changed bytes per piece";
  EXPECT_LT(v1.bytes_uploaded, v0.bytes_uploaded / 20);
  const VolumeManifest m = f.volumes->Show(v1.ref).value().manifest;
  EXPECT_EQ(m.parent, v0.ref.digest);
  size_t chained = 0;
  for (const VolumeFile& file : m.files) {
    for (const VolumeChunk& c : file.chunks) chained += c.xor_chain.empty() ? 0 : 1;
  }
  EXPECT_EQ(chained, 4u);
  ASSERT_TRUE(f.volumes->Pull(v1.ref, f.tmp / "out1").ok());
  EXPECT_EQ(Snapshot(f.tmp / "out1"), Snapshot(f.tmp / "s1"));
  // Without deltas the same content is stored whole and gets another digest.
  PushOptions whole = with_parent;
  whole.xor_with_parent = false;
  auto plain = f.volumes->Push(f.tmp / "s1", "team", "m", whole);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->chunks_xor, 0u);
  EXPECT_NE(plain->ref.digest, v1.ref.digest);
  EXPECT_GT(plain->bytes_uploaded, 4u * (200u << 10));
}

TEST(VolumeXor, ChainsGrowUpToTheLimitAndSurviveGcOfTheirParents) {
  Fixture f;
  PushOptions options;
  options.piece_size = 256 << 10;
  options.max_xor_chain = 2;
  std::vector<PushResult> v;
  for (int step = 0; step < 4; ++step) {
    WriteStepDir(f.tmp / ("s" + std::to_string(step)), step);
    if (step > 0) options.parent = v.back().ref.digest;
    v.push_back(f.Push(f.tmp / ("s" + std::to_string(step)), "m", options));
  }
  auto chain_length = [&](const PushResult& r) {
    size_t longest = 0;
    const VolumeManifest m = f.volumes->Show(r.ref).value().manifest;
    for (const VolumeFile& file : m.files) {
      for (const VolumeChunk& c : file.chunks) longest = std::max(longest, c.xor_chain.size());
    }
    return longest;
  };
  EXPECT_EQ(chain_length(v[1]), 1u);
  EXPECT_EQ(chain_length(v[2]), 2u);
  EXPECT_EQ(chain_length(v[3]), 0u) << "the limit stores the next step whole (a keyframe)";
  // Remove every version but the last chained one; after the window gc keeps what it needs.
  for (int i : {0, 1, 3}) ASSERT_TRUE(f.volumes->Remove(v[i].ref).ok());
  f.now += 8 * 24 * 3600;
  auto gc = f.volumes->Gc();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_GT(gc->chunks_deleted, 0u);
  ASSERT_TRUE(f.volumes->Pull(v[2].ref, f.tmp / "out2").ok());
  EXPECT_EQ(Snapshot(f.tmp / "out2"), Snapshot(f.tmp / "s2"));
  // A copy to another store carries the chain with it.
  auto other = MakeDirVolumeStore(f.tmp / "other").value();
  Volumes dest(*other);
  auto copied = dest.CopyFrom(*f.store, v[2].ref, "team", "m");
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_EQ(copied->ref.digest, v[2].ref.digest);
  ASSERT_TRUE(dest.Pull(v[2].ref, f.tmp / "out3").ok());
  EXPECT_EQ(Snapshot(f.tmp / "out3"), Snapshot(f.tmp / "s2"));
}

TEST(VolumeXor, ParentDirGivesTheSameVersionAndBadDeltasAreRefused) {
  Fixture f;
  PushOptions options;
  options.piece_size = 256 << 10;
  WriteStepDir(f.tmp / "s0", 0);
  WriteStepDir(f.tmp / "s1", 1);
  const PushResult v0 = f.Push(f.tmp / "s0", "m", options);
  options.parent = v0.ref.digest;
  PushOptions local = options;
  local.parent_dir = f.tmp / "s0";
  const PushResult a = f.Push(f.tmp / "s1", "m", local);
  // The same bytes from the store give the same deltas, so the same digest.
  const PushResult b = f.Push(f.tmp / "s1", "m", options);
  EXPECT_EQ(a.ref.digest, b.ref.digest);
  // A parent directory with wrong bytes is not trusted: its chunks do not verify.
  WriteStepDir(f.tmp / "wrong", 3);
  local.parent_dir = f.tmp / "wrong";
  EXPECT_EQ(f.Push(f.tmp / "s1", "m", local).ref.digest, a.ref.digest);
  // A parent that is not a live version of the volume is refused.
  PushOptions missing = options;
  missing.parent = std::string(64, 'e');
  EXPECT_EQ(f.volumes->Push(f.tmp / "s1", "team", "m", missing).status().code(),
            StatusCode::kNotFound);
  // A corrupt delta object is never served.
  const VolumeManifest m = f.volumes->Show(a.ref).value().manifest;
  const VolumeChunk* chained = nullptr;
  for (const VolumeFile& file : m.files) {
    for (const VolumeChunk& c : file.chunks) {
      if (!c.xor_chain.empty()) chained = &c;
    }
  }
  ASSERT_NE(chained, nullptr);
  const std::string hex = chained->xor_chain[0].delta;
  const std::string key = "xchunks/sha256/" + hex.substr(0, 2) + "/" + hex;
  std::string object = f.store->Get(key, 1 << 30).value();
  object.back() ^= 1;
  ASSERT_TRUE(f.store->Put(key, AsSpan(object)).ok());
  const auto bad = f.volumes->ReadChunk(*chained);
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss) << bad.status().ToString();
  EXPECT_NE(bad.status().message().find(key), std::string::npos);
  EXPECT_EQ(f.volumes->Pull(a.ref, f.tmp / "out").code(), StatusCode::kDataLoss);
  EXPECT_FALSE(fs::exists(f.tmp / "out"));
}

}  // namespace
}  // namespace deltakv::deltasync
