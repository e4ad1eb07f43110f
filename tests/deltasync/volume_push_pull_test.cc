// Sealed volumes, operations: push, pull, copy, chunk reads, tags, list, remove and restore.
#include <gtest/gtest.h>

#include <thread>
#include <unistd.h>

#include "deltasync/volume.h"
#include "volume_test_util.h"

namespace deltakv::deltasync {
namespace {

using namespace volume_testing;

// ----- push and pull -----

TEST(VolumePushPull, RoundTripWithSafetensorsAndOtherFiles) {
  Fixture f;
  WriteModelDir(f.tmp / "src", 0);
  PushOptions options;
  options.tag = "latest";
  options.piece_size = 65536;
  uint64_t progress_calls = 0;
  options.progress = [&progress_calls](const PushProgress& p) {
    ++progress_calls;
    EXPECT_LE(p.chunks_done, p.chunks_total);
  };
  const PushResult r = f.Push(f.tmp / "src", "model", options);
  EXPECT_EQ(r.files, 6u);
  EXPECT_EQ(r.chunks_uploaded, r.chunks_total);
  EXPECT_EQ(progress_calls, r.chunks_total);
  EXPECT_GT(r.bytes_uploaded, 0u);
  ASSERT_TRUE(f.volumes->Pull(Ref("team/model:latest"), f.tmp / "out").ok());
  EXPECT_EQ(Snapshot(f.tmp / "out"), Snapshot(f.tmp / "src"));
  EXPECT_EQ(Snapshot(f.tmp / "out").at("bin/run.sh").second, 0755u);
  auto shown = f.volumes->Show(r.ref);
  ASSERT_TRUE(shown.ok());
  EXPECT_EQ(shown->created, f.now.load());
  EXPECT_EQ(shown->manifest.files.size(), 6u);
  EXPECT_EQ(f.volumes->Resolve(Ref("team/model:latest")).value(), r.ref.digest);
}

TEST(VolumePushPull, ChangedTensorUploadsOnlyItsChunk) {
  Fixture f;
  WriteModelDir(f.tmp / "v0", 0);
  WriteModelDir(f.tmp / "v1", 1);
  const PushResult first = f.Push(f.tmp / "v0", "model");
  PushOptions options;
  options.parent = first.ref.digest;
  const PushResult second = f.Push(f.tmp / "v1", "model", options);
  EXPECT_NE(first.ref.digest, second.ref.digest);
  EXPECT_EQ(second.chunks_uploaded, 1u);
  EXPECT_EQ(f.volumes->Show(second.ref).value().manifest.parent, first.ref.digest);
  ASSERT_TRUE(f.volumes->Pull(second.ref, f.tmp / "out").ok());
  EXPECT_EQ(Snapshot(f.tmp / "out"), Snapshot(f.tmp / "v1"));
}

TEST(VolumePushPull, PullReportsProgressUpToTheVersionSize) {
  Fixture f;
  WriteModelDir(f.tmp / "src", 0);
  const PushResult r = f.Push(f.tmp / "src", "model");
  PullProgress last;
  uint64_t calls = 0;
  PullOptions options;
  options.progress = [&](const PullProgress& p) {
    EXPECT_GE(p.bytes_done, last.bytes_done);
    EXPECT_LE(p.bytes_done, p.bytes_total);
    last = p;
    ++calls;
  };
  ASSERT_TRUE(f.volumes->Pull(r.ref, f.tmp / "out", options).ok());
  EXPECT_EQ(last.files_done, r.files);
  EXPECT_EQ(last.files_total, r.files);
  EXPECT_EQ(last.bytes_done, r.bytes);
  EXPECT_EQ(last.bytes_total, r.bytes);
  EXPECT_GE(calls, r.files);
}

// A second store for copies, with the fixture's clock.
struct TwoStores : Fixture {
  std::unique_ptr<VolumeStore> other = MakeDirVolumeStore(tmp / "other").value();
  std::unique_ptr<Volumes> other_volumes = [this] {
    VolumesOptions options;
    options.clock = [this] { return now.load(); };
    return std::make_unique<Volumes>(*other, options);
  }();
};

TEST(VolumeCopy, SameNameKeepsTheDigestAndCopiesOnlyMissingChunks) {
  TwoStores f;
  WriteModelDir(f.tmp / "v0", 0);
  WriteModelDir(f.tmp / "v1", 1);
  const PushResult v0 = f.Push(f.tmp / "v0", "model");
  PushOptions with_parent;
  with_parent.parent = v0.ref.digest;
  const PushResult v1 = f.Push(f.tmp / "v1", "model", with_parent);
  CopyOptions options;
  options.tag = "prod";
  uint64_t calls = 0;
  options.progress = [&calls](const PushProgress&) { ++calls; };
  auto c0 = f.other_volumes->CopyFrom(*f.store, v0.ref, "team", "model", options);
  ASSERT_TRUE(c0.ok()) << c0.status().ToString();
  EXPECT_EQ(c0->ref.ToString(), v0.ref.ToString());
  EXPECT_EQ(c0->chunks_uploaded, c0->chunks_total);
  EXPECT_EQ(calls, c0->chunks_total);
  auto c1 = f.other_volumes->CopyFrom(*f.store, Ref("team/model@sha256:" + v1.ref.digest),
                                      "team", "model");
  ASSERT_TRUE(c1.ok()) << c1.status().ToString();
  EXPECT_EQ(c1->ref.digest, v1.ref.digest);
  EXPECT_EQ(c1->chunks_uploaded, 1u);
  EXPECT_EQ(f.other_volumes->Show(c1->ref).value().manifest.parent, v0.ref.digest);
  EXPECT_EQ(f.other_volumes->Resolve(Ref("team/model:prod")).value(), v0.ref.digest);
  ASSERT_TRUE(f.other_volumes->Pull(c1->ref, f.tmp / "out").ok());
  EXPECT_EQ(Snapshot(f.tmp / "out"), Snapshot(f.tmp / "v1"));
  // No lease is left behind in the destination.
  EXPECT_TRUE(f.other->List("volumes/team/model/pushes/").value().empty());
}

TEST(VolumeCopy, AnotherNameGetsItsOwnDigestAndNoParent) {
  TwoStores f;
  WriteModelDir(f.tmp / "base", 1);
  WriteModelDir(f.tmp / "v0", 0);
  PushOptions with_parent;
  with_parent.parent = f.Push(f.tmp / "base", "model").ref.digest;
  const PushResult v0 = f.Push(f.tmp / "v0", "model", with_parent);
  auto c = f.other_volumes->CopyFrom(*f.store, v0.ref, "mirror", "model-copy");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_NE(c->ref.digest, v0.ref.digest);
  const VolumeVersion shown = f.other_volumes->Show(c->ref).value();
  EXPECT_EQ(shown.manifest.ns, "mirror");
  EXPECT_EQ(shown.manifest.name, "model-copy");
  EXPECT_TRUE(shown.manifest.parent.empty());
  ASSERT_TRUE(f.other_volumes->Pull(c->ref, f.tmp / "out").ok());
  EXPECT_EQ(Snapshot(f.tmp / "out"), Snapshot(f.tmp / "v0"));
}

TEST(VolumeCopy, CorruptOrMissingSourceChunkSealsNothing) {
  for (bool corrupt : {true, false}) {
    TwoStores f;
    WriteModelDir(f.tmp / "v0", 0);
    const PushResult v0 = f.Push(f.tmp / "v0", "model");
    const VolumeManifest m = f.volumes->Show(v0.ref).value().manifest;
    const std::string& hex = m.files.back().chunks.front().digest;
    const std::string key = "chunks/sha256/" + hex.substr(0, 2) + "/" + hex;
    if (corrupt) {
      std::string object = f.store->Get(key, 1 << 30).value();
      object.back() ^= 1;
      ASSERT_TRUE(f.store->Put(key, AsSpan(object)).ok());
    } else {
      ASSERT_TRUE(f.store->Delete(key).ok());
    }
    auto c = f.other_volumes->CopyFrom(*f.store, v0.ref, "team", "model");
    EXPECT_EQ(c.status().code(), corrupt ? StatusCode::kDataLoss : StatusCode::kNotFound);
    EXPECT_NE(c.status().message().find(key), std::string::npos) << c.status().ToString();
    EXPECT_EQ(f.other_volumes->Show(v0.ref).status().code(), StatusCode::kNotFound);
    EXPECT_FALSE(f.other->Exists(key).value());
    EXPECT_TRUE(f.other->List("volumes/team/model/pushes/").value().empty());
  }
}


TEST(VolumePushPull, IdenticalContentGivesIdenticalDigest) {
  Fixture f;
  WriteModelDir(f.tmp / "a", 0);
  WriteModelDir(f.tmp / "b", 0);
  const PushResult a = f.Push(f.tmp / "a", "model");
  f.now += 1000;
  const PushResult b = f.Push(f.tmp / "b", "model");
  EXPECT_EQ(a.ref.digest, b.ref.digest);
  EXPECT_EQ(b.chunks_uploaded, 0u);
  EXPECT_EQ(f.volumes->Show(b.ref).value().created, f.now.load() - 1000);
  EXPECT_NE(f.Push(f.tmp / "a", "other").ref.digest, a.ref.digest);
}

TEST(VolumePushPull, CorruptChunkFailsPullAndLeavesDirUntouched) {
  Fixture f;
  WriteModelDir(f.tmp / "src", 0);
  const PushResult r = f.Push(f.tmp / "src", "model");
  const VolumeManifest m = f.volumes->Show(r.ref).value().manifest;
  const std::string key = "chunks/sha256/" + m.files[0].chunks[0].digest.substr(0, 2) + "/" +
                          m.files[0].chunks[0].digest;
  std::string object = f.store->Get(key, 1 << 30).value();
  object[object.size() / 2] ^= 0x5a;
  ASSERT_TRUE(f.store->Put(key, AsSpan(object)).ok());
  const Status st = f.volumes->Pull(r.ref, f.tmp / "out");
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
  EXPECT_NE(st.message().find("file '" + m.files[0].path + "' chunk 0"), std::string::npos)
      << st.message();
  EXPECT_FALSE(fs::exists(f.tmp / "out"));
  for (const auto& e : fs::directory_iterator(f.tmp.path())) {
    EXPECT_EQ(e.path().filename().string().find("partial"), std::string::npos);
  }
  // A missing chunk is NotFound; an existing empty target stays as it was.
  ASSERT_TRUE(f.store->Delete(key).ok());
  fs::create_directory(f.tmp / "empty-out");
  EXPECT_EQ(f.volumes->Pull(r.ref, f.tmp / "empty-out").code(), StatusCode::kNotFound);
  EXPECT_TRUE(fs::is_empty(f.tmp / "empty-out"));
}

TEST(VolumeReadChunk, ReturnsVerifiedBytesOrRefuses) {
  Fixture f;
  WriteModelDir(f.tmp / "src", 0);
  const PushResult r = f.Push(f.tmp / "src", "model");
  const VolumeManifest m = f.volumes->Show(r.ref).value().manifest;
  const VolumeFile& file = m.files.back();
  const VolumeChunk& c = file.chunks.back();
  const std::string original = ReadAll(f.tmp / ("src/" + file.path));
  EXPECT_EQ(f.volumes->ReadChunk(c).value(), original.substr(c.offset, c.size));
  // A manifest entry whose size or digest does not match the stored chunk is refused.
  VolumeChunk wrong_size = c;
  ++wrong_size.size;
  EXPECT_EQ(f.volumes->ReadChunk(wrong_size).status().code(), StatusCode::kDataLoss);
  VolumeChunk other = c;
  other.digest = std::string(64, 'a');
  EXPECT_EQ(f.volumes->ReadChunk(other).status().code(), StatusCode::kNotFound);
  const std::string key = "chunks/sha256/" + c.digest.substr(0, 2) + "/" + c.digest;
  std::string object = f.store->Get(key, 1 << 30).value();
  object.back() ^= 1;
  ASSERT_TRUE(f.store->Put(key, AsSpan(object)).ok());
  const auto bad = f.volumes->ReadChunk(c);
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find(c.digest), std::string::npos) << bad.status().ToString();
}

TEST(VolumePushPull, PullRefusesNonEmptyDirAndCorruptManifest) {
  Fixture f;
  WriteTinyDir(f.tmp / "src");
  const PushResult r = f.Push(f.tmp / "src", "tiny");
  fs::create_directory(f.tmp / "full");
  WriteAll(f.tmp / "full/keep", "x");
  EXPECT_EQ(f.volumes->Pull(r.ref, f.tmp / "full").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadAll(f.tmp / "full/keep"), "x");
  ASSERT_TRUE(f.volumes->Pull(r.ref, f.tmp / "empty-ok").ok());
  const std::string key = "volumes/team/tiny/versions/" + r.ref.digest + ".json";
  const std::string garbled = Replace(f.store->Get(key, 1 << 20).value(), "hello", "jello");
  ASSERT_TRUE(f.store->Put(key, AsSpan(garbled)).ok());
  auto shown = f.volumes->Show(r.ref);
  EXPECT_EQ(shown.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(shown.status().message().find(key), std::string::npos);
  EXPECT_EQ(f.volumes->Pull(r.ref, f.tmp / "out").code(), StatusCode::kDataLoss);
}

TEST(VolumePushPull, RefusesSymlinksAndSpecialFiles) {
  Fixture f;
  WriteTinyDir(f.tmp / "src");
  fs::create_symlink("/etc/passwd", f.tmp / "src/link");
  auto r = f.volumes->Push(f.tmp / "src", "team", "x");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("link' is a symbolic link"), std::string::npos)
      << r.status().message();
  fs::remove(f.tmp / "src/link");
  ASSERT_EQ(mkfifo((f.tmp / "src/fifo").c_str(), 0644), 0);
  r = f.volumes->Push(f.tmp / "src", "team", "x");
  EXPECT_NE(r.status().message().find("fifo' is a FIFO"), std::string::npos);
  fs::remove(f.tmp / "src/fifo");
  WriteAll(f.tmp / "src/bad\nname", "x");
  r = f.volumes->Push(f.tmp / "src", "team", "x");
  EXPECT_NE(r.status().message().find("control character"), std::string::npos);
  fs::remove(f.tmp / "src/bad\nname");
  EXPECT_EQ(f.volumes->Push(f.tmp / "src", "Team", "x").status().code(),
            StatusCode::kInvalidArgument);
  PushOptions bad_tag;
  bad_tag.tag = "-x";
  EXPECT_EQ(f.volumes->Push(f.tmp / "src", "team", "x", bad_tag).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(f.volumes->Push(f.tmp / "nope", "team", "x").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(f.CountChunks(), 0u);
}

TEST(VolumePushPull, ChunkObjectsAreCompressedOnlyWhenSmaller) {
  Fixture f;
  fs::create_directories(f.tmp / "zeros");
  fs::create_directories(f.tmp / "noise");
  WriteAll(f.tmp / "zeros/z", std::string(10000, '\0'));
  WriteAll(f.tmp / "noise/n", SplitMixBytes(10000, 5));
  EXPECT_LT(f.Push(f.tmp / "zeros", "z").bytes_uploaded, 100u);
  EXPECT_EQ(f.Push(f.tmp / "noise", "n").bytes_uploaded, 10000u + 16u);
  ASSERT_TRUE(f.volumes
                  ->Pull(Ref(std::string("team/z@sha256:") +
                             f.volumes->List("team").value()[1].versions[0]),
                         f.tmp / "out")
                  .ok());
  EXPECT_EQ(ReadAll(f.tmp / "out/z"), std::string(10000, '\0'));
}

TEST(VolumePushPull, PushOutlastingItsLeaseSealsNothing) {
  Fixture f;
  WriteModelDir(f.tmp / "src", 0);
  PushOptions slow;
  slow.progress = [&f](const PushProgress&) { f.now += 24 * 3600; };
  auto r = f.volumes->Push(f.tmp / "src", "team", "model", slow);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("outlasted its lease"), std::string::npos);
  EXPECT_TRUE(f.volumes->List("team").value().empty());
  EXPECT_GT(f.CountChunks(), 0u);
  EXPECT_EQ(f.volumes->Gc().value().chunks_kept, 0u);
  EXPECT_EQ(f.CountChunks(), 0u);
}

TEST(VolumePushPull, ConcurrentPushesSharingChunksBothSucceed) {
  Fixture f;
  WriteModelDir(f.tmp / "v0", 0);
  WriteModelDir(f.tmp / "v1", 1);
  StatusOr<PushResult> r0 = Internal("not run"), r1 = Internal("not run");
  std::thread t0([&] { r0 = f.volumes->Push(f.tmp / "v0", "team", "model"); });
  std::thread t1([&] { r1 = f.volumes->Push(f.tmp / "v1", "team", "model"); });
  t0.join();
  t1.join();
  ASSERT_TRUE(r0.ok()) << r0.status().ToString();
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  ASSERT_TRUE(f.volumes->Pull(r0->ref, f.tmp / "out0").ok());
  ASSERT_TRUE(f.volumes->Pull(r1->ref, f.tmp / "out1").ok());
  EXPECT_EQ(Snapshot(f.tmp / "out0"), Snapshot(f.tmp / "v0"));
  EXPECT_EQ(Snapshot(f.tmp / "out1"), Snapshot(f.tmp / "v1"));
  EXPECT_TRUE(f.store->List("volumes/team/model/pushes/").value().empty());
}

// ----- tags, list, remove, restore -----

TEST(VolumeTags, CasRaceHasExactlyOneWinner) {
  Fixture f;
  WriteTinyDir(f.tmp / "a");
  WriteModelDir(f.tmp / "b", 0);
  const PushResult a = f.Push(f.tmp / "a", "model");
  const PushResult b = f.Push(f.tmp / "b", "model");
  const TagInfo start = f.volumes->Tag(a.ref, "prod").value();
  for (int round = 0; round < 20; ++round) {
    const std::string generation = f.volumes->GetTag("team", "model", "prod").value().generation;
    StatusOr<TagInfo> x = Internal("not run"), y = Internal("not run");
    std::thread tx([&] { x = f.volumes->Tag(a.ref, "prod", generation); });
    std::thread ty([&] { y = f.volumes->Tag(b.ref, "prod", generation); });
    tx.join();
    ty.join();
    ASSERT_NE(x.ok(), y.ok()) << round;
    const StatusOr<TagInfo>& loser = x.ok() ? y : x;
    EXPECT_EQ(loser.status().code(), StatusCode::kFailedPrecondition);
    const TagInfo now = f.volumes->GetTag("team", "model", "prod").value();
    EXPECT_EQ(now.digest, x.ok() ? a.ref.digest : b.ref.digest);
  }
  EXPECT_NE(start.generation, f.volumes->GetTag("team", "model", "prod").value().generation);
  EXPECT_EQ(f.volumes->Tag(a.ref, "fresh", std::string("7")).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(f.volumes->Tag(a.ref, "fresh", std::string()).ok());
  EXPECT_EQ(f.volumes->Tag(Ref(std::string("team/model@sha256:") + std::string(64, '0')), "t")
                .status()
                .code(),
            StatusCode::kNotFound);
  EXPECT_EQ(f.volumes->Resolve(Ref("team/model:missing")).status().code(), StatusCode::kNotFound);
}

TEST(VolumeTags, ListShowsVersionsTagsAndRemoved) {
  Fixture f;
  WriteTinyDir(f.tmp / "a");
  WriteModelDir(f.tmp / "b", 0);
  PushOptions tagged;
  tagged.tag = "v1";
  const PushResult a = f.Push(f.tmp / "a", "model", tagged);
  const PushResult b = f.Push(f.tmp / "b", "model");
  ASSERT_TRUE(f.volumes->Push(f.tmp / "a", "other", "x").ok());
  ASSERT_TRUE(f.volumes->Remove(b.ref).ok());
  auto all = f.volumes->List();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].ns, "other");
  const VolumeListing& l = (*all)[1];
  EXPECT_EQ(l.name, "model");
  EXPECT_EQ(l.versions, std::vector<std::string>{a.ref.digest});
  ASSERT_EQ(l.tags.size(), 1u);
  EXPECT_EQ(l.tags[0].tag, "v1");
  EXPECT_EQ(l.tags[0].digest, a.ref.digest);
  ASSERT_EQ(l.removed.size(), 1u);
  EXPECT_EQ(l.removed[0].digest, b.ref.digest);
  EXPECT_EQ(f.volumes->List("team").value().size(), 1u);
  EXPECT_EQ(f.volumes->List("Bad").status().code(), StatusCode::kInvalidArgument);
}

TEST(VolumeRetention, RemoveThenRestoreWithinWindowOnly) {
  Fixture f;
  WriteModelDir(f.tmp / "src", 0);
  PushOptions tagged;
  tagged.tag = "prod";
  const PushResult r = f.Push(f.tmp / "src", "model", tagged);
  auto removed = f.volumes->Remove(Ref("team/model:prod"));
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(removed->tags, std::vector<std::string>{"prod"});
  EXPECT_EQ(removed->removed.restorable_until, f.now.load() + 7 * 24 * 3600);
  auto shown = f.volumes->Show(r.ref);
  EXPECT_EQ(shown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(shown.status().message().find("was removed at"), std::string::npos);
  EXPECT_EQ(f.volumes->Remove(r.ref).status().code(), StatusCode::kNotFound);
  f.now += 6 * 24 * 3600;
  ASSERT_TRUE(f.volumes->Restore(r.ref).ok());
  ASSERT_TRUE(f.volumes->Pull(Ref("team/model:prod"), f.tmp / "out").ok());
  EXPECT_EQ(Snapshot(f.tmp / "out"), Snapshot(f.tmp / "src"));
  EXPECT_EQ(f.volumes->Restore(r.ref).code(), StatusCode::kNotFound);
  ASSERT_TRUE(f.volumes->Remove(r.ref).ok());
  f.now += 7 * 24 * 3600;
  const Status late = f.volumes->Restore(r.ref);
  EXPECT_EQ(late.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(late.message().find("retention window ended"), std::string::npos) << late.message();
}

}  // namespace
}  // namespace deltakv::deltasync
