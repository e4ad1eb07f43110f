// Sealed volumes, stores: the directory store, store URLs, and a version's files as objects.
#include <gtest/gtest.h>

#include <thread>

#include "deltasync/volume_files.h"

#include "deltasync/volume.h"
#include "volume_test_util.h"

namespace deltakv::deltasync {
namespace {

using namespace volume_testing;

// ----- the directory store -----

TEST(DirVolumeStoreTest, PutGetListDeleteAndConditions) {
  TempDir tmp;
  auto store = MakeDirVolumeStore(tmp / "s").value();
  const std::string a = "a", b = "b";
  EXPECT_TRUE(store->Put("x/one", AsSpan(a)).ok());
  EXPECT_EQ(store->Get("x/one", 10).value(), "a");
  EXPECT_EQ(store->Get("x/one", 0).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(store->Get("x/none", 10).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->PutIfAbsent("x/one", AsSpan(b)).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->Get("x/one", 10).value(), "a");
  EXPECT_TRUE(store->PutIfAbsent("x/two", AsSpan(b)).ok());
  EXPECT_EQ(store->Size("x/two").value(), 1u);
  auto g1 = store->PutIfGeneration("x/v", AsSpan(a), "");
  ASSERT_TRUE(g1.ok()) << g1.status().ToString();
  EXPECT_EQ(store->PutIfGeneration("x/v", AsSpan(b), "").status().code(),
            StatusCode::kFailedPrecondition);
  auto g2 = store->PutIfGeneration("x/v", AsSpan(b), *g1);
  ASSERT_TRUE(g2.ok());
  EXPECT_NE(*g1, *g2);
  auto stale = store->PutIfGeneration("x/v", AsSpan(a), *g1);
  EXPECT_EQ(stale.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(stale.status().message().find("expected generation " + *g1), std::string::npos);
  EXPECT_EQ(store->GetVersioned("x/v", 10).value().data, "b");
  EXPECT_EQ(store->GetVersioned("x/v", 10).value().generation, *g2);
  EXPECT_EQ(store->List("x/").value(), (std::vector<std::string>{"x/one", "x/two", "x/v"}));
  EXPECT_EQ(store->List("x/t").value(), (std::vector<std::string>{"x/two"}));
  EXPECT_TRUE(store->List("nothing/").value().empty());
  EXPECT_TRUE(store->Delete("x/one").ok());
  EXPECT_TRUE(store->Delete("x/one").ok());
  EXPECT_FALSE(store->Exists("x/one").value());
  for (const std::string bad : {"", "/abs", "a//b", "a/", "../x", "a/.hidden", "."}) {
    EXPECT_EQ(store->Put(bad, AsSpan(a)).code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(DirVolumeStoreTest, AGenerationFromBeforeADeleteDoesNotMatchTheNewObject) {
  TempDir tmp;
  auto store = MakeDirVolumeStore(tmp / "s").value();
  const std::string a = "a", b = "b";
  const std::string old_generation = store->PutIfGeneration("t/v", AsSpan(a), "").value();
  ASSERT_TRUE(store->Delete("t/v").ok());
  EXPECT_EQ(store->GetVersioned("t/v", 10).status().code(), StatusCode::kNotFound);
  const std::string fresh = store->PutIfGeneration("t/v", AsSpan(a), "").value();
  EXPECT_NE(fresh, old_generation);
  EXPECT_EQ(store->PutIfGeneration("t/v", AsSpan(b), old_generation).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->GetVersioned("t/v", 10).value().data, "a");
}

TEST(DirVolumeStoreTest, TwoStoresInOneProcessWriteTheSameKeyConcurrently) {
  TempDir tmp;
  auto s1 = MakeDirVolumeStore(tmp / "s").value();
  auto s2 = MakeDirVolumeStore(tmp / "s").value();
  std::atomic<int> failures{0};
  auto writer = [&](VolumeStore* store, char c) {
    const std::string data(1000, c);
    for (int i = 0; i < 200; ++i) {
      if (!store->Put("k/x", AsSpan(data)).ok()) ++failures;
    }
  };
  std::thread t1(writer, s1.get(), 'p'), t2(writer, s2.get(), 'q');
  t1.join();
  t2.join();
  EXPECT_EQ(failures.load(), 0);
  const std::string last = s1->Get("k/x", 2000).value();
  EXPECT_TRUE(last == std::string(1000, 'p') || last == std::string(1000, 'q'));
  EXPECT_EQ(s1->List("k/").value(), std::vector<std::string>{"k/x"});
}


TEST(VolumeStoreUrl, DirUrlsAndPathsOpenOthersAreRefused) {
  TempDir tmp;
  auto a = OpenVolumeStore("dir://" + std::string(tmp / "a"));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)->Describe(), "dir://" + std::string(tmp / "a"));
  auto b = OpenVolumeStore(tmp / "b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->Describe(), "dir://" + std::string(tmp / "b"));
  EXPECT_EQ(OpenVolumeStore("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenVolumeStore("dir://relative").status().code(), StatusCode::kInvalidArgument);
  auto c = OpenVolumeStore("file://" + std::string(tmp / "a"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->Describe(), "dir://" + std::string(tmp / "a"));
  EXPECT_EQ(OpenVolumeStore("file://relative").status().code(), StatusCode::kInvalidArgument);
  auto gs = OpenVolumeStore("gs://bucket/x");
  EXPECT_EQ(gs.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(gs.status().message().find("unknown scheme 'gs'"), std::string::npos);
}


TEST(VolumeFilesStore, RangesAcrossChunksAndRefusals) {
  Fixture f;
  WriteModelDir(f.tmp / "src", 0);
  PushOptions small;
  small.piece_size = 16 << 10;  // the tensors span several pieces
  const PushResult r = f.Push(f.tmp / "src", "model", small);
  auto files = OpenVolumeFiles(MakeDirVolumeStore(f.tmp / "store").value(), r.ref);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  const std::string whole = ReadAll(f.tmp / "src/model.safetensors");
  EXPECT_EQ((*files)->Size("model.safetensors").value(), whole.size());
  for (uint64_t off : {uint64_t{0}, uint64_t{100}, uint64_t{16383}, uint64_t{40000}}) {
    for (uint64_t len : {uint64_t{0}, uint64_t{1}, uint64_t{20000}, uint64_t{70001}}) {
      if (off + len > whole.size()) continue;
      EXPECT_EQ((*files)->ReadRange("model.safetensors", off, len).value(),
                whole.substr(off, len)) << off << "+" << len;
    }
  }
  EXPECT_EQ((*files)->ReadObject("tokenizer/vocab.bin", 1 << 30).value(),
            ReadAll(f.tmp / "src/tokenizer/vocab.bin"));
  EXPECT_EQ((*files)->ReadObject("model.safetensors", 10).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ((*files)->ReadRange("model.safetensors", whole.size(), 1).status().code(),
            StatusCode::kDataLoss);
  EXPECT_EQ((*files)->Size("nope").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(OpenVolumeFiles(MakeDirVolumeStore(f.tmp / "store").value(),
                            Ref("team/model:missing")).status().code(),
            StatusCode::kNotFound);
}

}  // namespace
}  // namespace deltakv::deltasync
