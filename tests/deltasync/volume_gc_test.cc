// Sealed volumes, garbage collection: what gc keeps and deletes, and its sweep marker.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <set>

#include "deltasync/volume.h"
#include "volume_test_util.h"

namespace deltakv::deltasync {
namespace {

using namespace volume_testing;

// ----- gc -----

// The chunk keys of one version.
std::set<std::string> ChunkKeys(const VolumeManifest& m) {
  std::set<std::string> out;
  for (const VolumeFile& file : m.files) {
    for (const VolumeChunk& c : file.chunks) {
      out.insert("chunks/sha256/" + c.digest.substr(0, 2) + "/" + c.digest);
    }
  }
  return out;
}

TEST(VolumeGc, KeepsLiveRestorableAndLeasedChunksOnly) {
  Fixture f;
  fs::create_directories(f.tmp / "live");
  fs::create_directories(f.tmp / "restorable");
  fs::create_directories(f.tmp / "expired");
  WriteAll(f.tmp / "live/a", SplitMixBytes(300000, 11));
  WriteAll(f.tmp / "restorable/b", SplitMixBytes(300000, 12));
  WriteAll(f.tmp / "expired/c", SplitMixBytes(300000, 13));
  WriteAll(f.tmp / "expired/shared", SplitMixBytes(100000, 11));  // = the start of live/a
  const PushResult live = f.Push(f.tmp / "live", "v");
  const PushResult restorable = f.Push(f.tmp / "restorable", "v");
  const PushResult expired = f.Push(f.tmp / "expired", "v");
  const std::set<std::string> live_keys = ChunkKeys(f.volumes->Show(live.ref)->manifest);
  const std::set<std::string> restorable_keys =
      ChunkKeys(f.volumes->Show(restorable.ref)->manifest);
  const std::set<std::string> expired_keys = ChunkKeys(f.volumes->Show(expired.ref)->manifest);
  ASSERT_TRUE(f.volumes->Remove(expired.ref).ok());
  f.now += 5 * 24 * 3600;
  ASSERT_TRUE(f.volumes->Remove(restorable.ref).ok());
  f.now += 3 * 24 * 3600;  // expired: 8 days ago; restorable: 3 days ago
  // A push in flight: a chunk it uploaded and its lease; and an orphan from a failed push.
  const std::string leased_hex(64, 'c'), orphan_hex(64, 'd');
  const std::string leased_key = "chunks/sha256/cc/" + leased_hex;
  const std::string orphan_key = "chunks/sha256/dd/" + orphan_hex;
  ASSERT_TRUE(f.store->Put(leased_key, AsSpan(std::string("x"))).ok());
  ASSERT_TRUE(f.store->Put(orphan_key, AsSpan(std::string("y"))).ok());
  const std::string lease = "{\"chunks\":[\"sha256:" + leased_hex +
                            "\"],\"expires\":" + std::to_string(f.now.load() + 60) + "}";
  ASSERT_TRUE(f.store->Put("volumes/team/v/pushes/inflight.json", AsSpan(lease)).ok());
  const std::string old_lease = "{\"chunks\":[],\"expires\":" + std::to_string(f.now - 1) + "}";
  ASSERT_TRUE(f.store->Put("volumes/team/v/pushes/dead.json", AsSpan(old_lease)).ok());

  const size_t before = f.CountChunks();
  auto dry = f.volumes->Gc({.dry_run = true});
  ASSERT_TRUE(dry.ok()) << dry.status().ToString();
  EXPECT_EQ(f.CountChunks(), before);
  auto gc = f.volumes->Gc();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->chunks_deleted, dry->chunks_deleted);
  EXPECT_EQ(gc->bytes_freed, dry->bytes_freed);
  EXPECT_EQ(gc->versions_purged, 1u);
  EXPECT_EQ(gc->leases_expired, 1u);

  const std::vector<std::string> listed = f.store->List("chunks/").value();
  const std::set<std::string> kept(listed.begin(), listed.end());
  for (const std::string& k : live_keys) EXPECT_TRUE(kept.count(k)) << k;
  for (const std::string& k : restorable_keys) EXPECT_TRUE(kept.count(k)) << k;
  EXPECT_TRUE(kept.count(leased_key));
  EXPECT_FALSE(kept.count(orphan_key));
  size_t expired_only = 0;
  for (const std::string& k : expired_keys) {
    const bool shared = live_keys.count(k) > 0;
    EXPECT_EQ(kept.count(k) > 0, shared) << k;
    expired_only += shared ? 0 : 1;
  }
  EXPECT_GE(expired_only, 1u);
  EXPECT_EQ(gc->chunks_deleted, expired_only + 1);
  EXPECT_EQ(gc->chunks_kept, kept.size());
  EXPECT_FALSE(f.store->Exists("volumes/team/v/pushes/dead.json").value());
  EXPECT_TRUE(f.store->Exists("volumes/team/v/pushes/inflight.json").value());
  EXPECT_EQ(f.store->GetVersioned("gc/sweep.json", 100).value().data, "{\"expires\":0}");
  EXPECT_EQ(f.volumes->Restore(expired.ref).code(), StatusCode::kNotFound);
  ASSERT_TRUE(f.volumes->Restore(restorable.ref).ok());
  ASSERT_TRUE(f.volumes->Pull(restorable.ref, f.tmp / "out-r").ok());
  ASSERT_TRUE(f.volumes->Pull(live.ref, f.tmp / "out-l").ok());
  EXPECT_EQ(Snapshot(f.tmp / "out-l"), Snapshot(f.tmp / "live"));
}

TEST(VolumeGc, ReportsProgressEndingWithItsResult) {
  Fixture f;
  fs::create_directories(f.tmp / "a");
  WriteAll(f.tmp / "a/x", SplitMixBytes(300000, 21));
  const PushResult a = f.Push(f.tmp / "a", "v");
  const std::string orphan = "orphan", other = "x";
  ASSERT_TRUE(f.store->Put("chunks/sha256/dd/" + std::string(64, 'd'), AsSpan(orphan)).ok());
  ASSERT_TRUE(f.store->Put("chunks/sha256/ee/" + std::string(64, 'e'), AsSpan(other)).ok());
  const uint64_t listed = f.CountChunks();
  for (bool dry_run : {true, false}) {
    SCOPED_TRACE(dry_run ? "dry run" : "gc");
    std::vector<GcProgress> seen;
    GcOptions options;
    options.dry_run = dry_run;
    options.progress = [&seen](const GcProgress& p) { seen.push_back(p); };
    auto gc = f.volumes->Gc(options);
    ASSERT_TRUE(gc.ok()) << gc.status().ToString();
    ASSERT_GE(seen.size(), listed + 2);  // the listing, each chunk, the end
    EXPECT_EQ(seen.front().chunks_total, listed);
    EXPECT_EQ(seen.front().chunks_checked, 0u);
    for (size_t i = 1; i < seen.size(); ++i) {
      EXPECT_GE(seen[i].objects_scanned, seen[i - 1].objects_scanned);
      EXPECT_GE(seen[i].chunks_checked, seen[i - 1].chunks_checked);
      EXPECT_GE(seen[i].chunks_deleted, seen[i - 1].chunks_deleted);
      EXPECT_GE(seen[i].bytes_freed, seen[i - 1].bytes_freed);
      EXPECT_FALSE(seen[i - 1].done);
    }
    const GcProgress& last = seen.back();
    EXPECT_TRUE(last.done);
    EXPECT_EQ(last.objects_scanned, listed + 1);  // the chunk objects and the one manifest
    EXPECT_EQ(last.chunks_checked, listed);
    EXPECT_EQ(last.chunks_deleted, gc->chunks_deleted);
    EXPECT_EQ(last.chunks_deleted, 2u);
    EXPECT_EQ(last.bytes_freed, gc->bytes_freed);
  }
  EXPECT_EQ(f.CountChunks(), listed - 2);
  ASSERT_TRUE(f.volumes->Pull(a.ref, f.tmp / "out").ok());
}

TEST(VolumeGc, HeldSweepMarkerBlocksPushesAndOtherGcsUntilItExpires) {
  Fixture f;
  WriteTinyDir(f.tmp / "src");
  const std::string marker = "{\"expires\":" + std::to_string(f.now + 100) + "}";
  ASSERT_TRUE(f.store->PutIfGeneration("gc/sweep.json", AsSpan(marker), "").ok());
  auto push = f.volumes->Push(f.tmp / "src", "team", "tiny");
  EXPECT_EQ(push.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(push.status().message().find("gc sweep holds 'gc/sweep.json'"), std::string::npos);
  EXPECT_TRUE(f.store->List("volumes/team/tiny/pushes/").value().empty());
  EXPECT_EQ(f.volumes->Gc().status().code(), StatusCode::kFailedPrecondition);
  f.now += 101;  // the holder died; its marker has expired
  ASSERT_TRUE(f.volumes->Push(f.tmp / "src", "team", "tiny").ok());
  auto gc = f.volumes->Gc();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->chunks_deleted, 0u);
  EXPECT_EQ(f.store->GetVersioned("gc/sweep.json", 100).value().data, "{\"expires\":0}");
  // A released marker holds nothing: pushes and the next gc go ahead.
  ASSERT_TRUE(f.volumes->Push(f.tmp / "src", "team", "tiny").ok());
  ASSERT_TRUE(f.volumes->Gc().ok());
}

// A store that runs a hook before chosen calls: lets a test act in the middle of a gc.
class HookedStore : public VolumeStore {
 public:
  explicit HookedStore(VolumeStore& inner) : inner_(inner) {}
  std::function<void(const std::string&key)> before_list, before_delete, before_write;
  // Writes whose key contains this fail with IoError (a full store), nothing written.
  std::string fail_writes_to;
  // The next conditional write whose key contains this takes effect but reports
  // FailedPrecondition, as an S3 write does whose answer was lost and whose retry found the
  // object it had written itself (VOLUME.md, section 2.1).
  std::string lose_answer_to;

  Status Put(const std::string& k, std::span<const uint8_t> d) override {
    if (Fails(k)) return IoError("write '" + k + "': No space left on device");
    return inner_.Put(k, d);
  }
  Status PutIfAbsent(const std::string& k, std::span<const uint8_t> d) override {
    if (before_write) before_write(k);
    if (Fails(k)) return IoError("write '" + k + "': No space left on device");
    Status s = inner_.PutIfAbsent(k, d);
    if (s.ok() && LosesAnswer(k)) return FailedPrecondition("'" + k + "' already exists");
    return s;
  }
  StatusOr<std::string> Get(const std::string& k, uint64_t m) override { return inner_.Get(k, m); }
  StatusOr<bool> Exists(const std::string& k) override { return inner_.Exists(k); }
  StatusOr<uint64_t> Size(const std::string& k) override { return inner_.Size(k); }
  StatusOr<std::vector<std::string>> List(const std::string& prefix) override {
    if (before_list) before_list(prefix);
    return inner_.List(prefix);
  }
  Status Delete(const std::string& k) override {
    if (before_delete) before_delete(k);
    return inner_.Delete(k);
  }
  StatusOr<VersionedObject> GetVersioned(const std::string& k, uint64_t m) override {
    return inner_.GetVersioned(k, m);
  }
  StatusOr<std::string> PutIfGeneration(const std::string& k, std::span<const uint8_t> d,
                                        const std::string& e) override {
    if (before_write) before_write(k);
    if (Fails(k)) return IoError("write '" + k + "': No space left on device");
    auto s = inner_.PutIfGeneration(k, d, e);
    if (s.ok() && LosesAnswer(k)) return FailedPrecondition("'" + k + "': generation changed");
    return s;
  }
  std::string Describe() const override { return inner_.Describe(); }

 private:
  bool Fails(const std::string& k) const {
    return !fail_writes_to.empty() && k.find(fail_writes_to) != std::string::npos;
  }
  bool LosesAnswer(const std::string& k) {
    if (lose_answer_to.empty() || k.find(lose_answer_to) == std::string::npos) return false;
    lose_answer_to.clear();
    return true;
  }
  VolumeStore& inner_;
};

// The temporary files of writes killed more than a lease's lifetime ago are removed by gc; a
// younger one (a write that may still be running) and everything else are left alone.
TEST(VolumeGc, RemovesTemporariesOfWritesAbandonedLongAgo) {
  Fixture f;
  WriteTinyDir(f.tmp / "src");
  f.Push(f.tmp / "src", "v");
  const fs::path dir = fs::path(f.tmp / "store") / "chunks" / "sha256" / "ab";
  fs::create_directories(dir);
  auto touch = [](const fs::path& p, int64_t mtime) {
    std::ofstream(p) << "partial";
    const timespec times[2] = {{mtime, 0}, {mtime, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, p.c_str(), times, 0), 0);
  };
  const int64_t now = f.now.load();
  touch(dir / ".abcd.tmp.123.1", now - 25 * 3600);  // abandoned a day ago
  touch(dir / ".abcd.tmp.123.2", now - 3600);       // may still be written
  touch(dir / ".hidden", now - 25 * 3600);          // not a temporary
  const size_t chunks = f.CountChunks();
  GcOptions dry;
  dry.dry_run = true;
  auto counted = f.volumes->Gc(dry);
  ASSERT_TRUE(counted.ok()) << counted.status().ToString();
  EXPECT_EQ(counted->temporaries_removed, 0u);  // a dry run deletes nothing
  EXPECT_TRUE(fs::exists(dir / ".abcd.tmp.123.1"));
  auto gc = f.volumes->Gc();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->temporaries_removed, 1u);
  EXPECT_FALSE(fs::exists(dir / ".abcd.tmp.123.1"));
  EXPECT_TRUE(fs::exists(dir / ".abcd.tmp.123.2"));
  EXPECT_TRUE(fs::exists(dir / ".hidden"));
  EXPECT_EQ(f.CountChunks(), chunks);  // the live version's chunks stay
}

// A push that fails has sealed nothing, whichever record write fails; one whose tag fails after
// the version is sealed says that the version is sealed.
TEST(VolumePush, AFailedPushSealsNothingAndATagFailureSaysTheVersionIsSealed) {
  Fixture f;
  WriteTinyDir(f.tmp / "src");
  HookedStore hooked(*f.store);
  VolumesOptions options;
  options.clock = [&f] { return f.now.load(); };
  Volumes volumes(hooked, options);
  PushOptions with_tag;
  with_tag.tag = "t";
  for (const char* record : {"/info/", "/versions/"}) {
    hooked.fail_writes_to = record;
    auto r = volumes.Push(f.tmp / "src", "team", "v", with_tag);
    ASSERT_EQ(r.status().code(), StatusCode::kIoError) << record;
    auto listed = volumes.List();
    ASSERT_TRUE(listed.ok());
    for (const VolumeListing& l : *listed) {
      EXPECT_TRUE(l.versions.empty()) << record;
      EXPECT_TRUE(l.tags.empty()) << record;
    }
  }
  hooked.fail_writes_to = "/tags/";
  auto r = volumes.Push(f.tmp / "src", "team", "v", with_tag);
  ASSERT_EQ(r.status().code(), StatusCode::kIoError);
  EXPECT_NE(r.status().message().find("push: sealed team/v@sha256:"), std::string::npos)
      << r.status().ToString();
  EXPECT_NE(r.status().message().find("but tag 't' was not moved"), std::string::npos);
  hooked.fail_writes_to.clear();
  auto listed = volumes.List();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].versions.size(), 1u);  // sealed, with its creation record
  auto shown = volumes.Show(Ref("team/v@sha256:" + (*listed)[0].versions[0]));
  ASSERT_TRUE(shown.ok()) << shown.status().ToString();
  EXPECT_TRUE(shown->created.has_value());
}

// Three orphan chunks (from failed pushes), for a gc to delete.
void PutOrphans(VolumeStore& store) {
  for (char c : {'a', 'b', 'e'}) {
    const std::string hex(64, c);
    ASSERT_TRUE(store.Put("chunks/sha256/" + hex.substr(0, 2) + "/" + hex, AsSpan(hex)).ok());
  }
}

TEST(VolumeGc, StopsDeletingOnceItsMarkerExpires) {
  Fixture f;
  PutOrphans(*f.store);
  HookedStore hooked(*f.store);
  VolumesOptions options;
  options.clock = [&f] { return f.now.load(); };
  Volumes volumes(hooked, options);
  int chunk_deletes = 0;
  hooked.before_delete = [&](const std::string& key) {
    if (key.starts_with("chunks/") && ++chunk_deletes == 1) f.now += 3601;  // a stall
  };
  auto gc = volumes.Gc();
  EXPECT_EQ(gc.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(gc.status().message().find("expired after 1 chunk(s) were deleted"), std::string::npos)
      << gc.status().ToString();
  EXPECT_EQ(f.CountChunks(), 2u);
}

TEST(VolumeGc, AGcThatOutlivedItsMarkerLeavesTheNewHoldersMarker) {
  Fixture f;
  PutOrphans(*f.store);
  HookedStore hooked(*f.store);
  VolumesOptions options;
  options.clock = [&f] { return f.now.load(); };
  Volumes slow(hooked, options);
  StatusOr<GcResult> second = InvalidArgument("not run");
  std::string second_marker;
  hooked.before_list = [&](const std::string& prefix) {
    if (prefix != "volumes/" || second_marker.size()) return;
    // The slow gc stalls while marking; its marker expires and a second gc takes over and is
    // still sweeping (its marker is held) when the slow one resumes.
    f.now += 3601;
    HookedStore inner_view(*f.store);
    Volumes fast(inner_view, options);
    inner_view.before_delete = [&](const std::string& key) {
      if (key.starts_with("chunks/") && second_marker.empty()) {
        second_marker = f.store->GetVersioned("gc/sweep.json", 100).value().data;
      }
    };
    second = fast.Gc();
  };
  auto gc = slow.Gc();
  EXPECT_EQ(gc.status().code(), StatusCode::kFailedPrecondition) << gc.status().ToString();
  EXPECT_NE(gc.status().message().find("marking outlasted the sweep marker"), std::string::npos);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->chunks_deleted, 3u);
  const std::string held = "{\"expires\":" + std::to_string(f.now.load() + 3600) + ",\"holder\":\"";
  EXPECT_EQ(second_marker.substr(0, held.size()), held) << second_marker;
}

TEST(VolumeGc, ReleaseNeedsTheGenerationItWrote) {
  // The marker a gc took is replaced by another gc's (after it expired): the first gc's
  // release must fail and leave the other's marker in place.
  Fixture f;
  HookedStore hooked(*f.store);
  VolumesOptions options;
  options.clock = [&f] { return f.now.load(); };
  Volumes slow(hooked, options);
  std::string taken_over;
  hooked.before_list = [&](const std::string& prefix) {
    if (prefix != "chunks/sha256/" || !taken_over.empty()) return;
    f.now += 3601;
    const auto current = f.store->GetVersioned("gc/sweep.json", 100).value();
    const std::string other = "{\"expires\":" + std::to_string(f.now.load() + 3600) + "}";
    taken_over = f.store->PutIfGeneration("gc/sweep.json", AsSpan(other), current.generation).value();
  };
  EXPECT_EQ(slow.Gc().status().code(), StatusCode::kFailedPrecondition);
  const auto after = f.store->GetVersioned("gc/sweep.json", 100).value();
  EXPECT_EQ(after.generation, taken_over);
  EXPECT_EQ(after.data, "{\"expires\":" + std::to_string(f.now.load() + 3600) + "}");
  EXPECT_EQ(f.volumes->Gc().status().code(), StatusCode::kFailedPrecondition);
}

// A gc whose marker write took effect but whose answer was lost recognises the marker as its
// own (it names this run as holder), sweeps, and releases it: pushes go ahead afterwards.
TEST(VolumeGc, TakesTheMarkerItWroteWhenTheAnswerWasLost) {
  Fixture f;
  PutOrphans(*f.store);
  WriteTinyDir(f.tmp / "src");
  HookedStore hooked(*f.store);
  VolumesOptions options;
  options.clock = [&f] { return f.now.load(); };
  Volumes volumes(hooked, options);
  hooked.lose_answer_to = "gc/sweep.json";
  auto gc = volumes.Gc();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_TRUE(hooked.lose_answer_to.empty());  // the marker write did lose its answer
  EXPECT_EQ(gc->chunks_deleted, 3u);
  EXPECT_EQ(f.store->GetVersioned("gc/sweep.json", 100).value().data, "{\"expires\":0}");
  ASSERT_TRUE(volumes.Push(f.tmp / "src", "team", "tiny").ok());
  // The same for a marker left behind by a gc that died: replaced, then released.
  const std::string stale = "{\"expires\":" + std::to_string(f.now - 1) + "}";
  const auto current = f.store->GetVersioned("gc/sweep.json", 100).value();
  ASSERT_TRUE(f.store->PutIfGeneration("gc/sweep.json", AsSpan(stale), current.generation).ok());
  hooked.lose_answer_to = "gc/sweep.json";
  ASSERT_TRUE(volumes.Gc().ok());
  EXPECT_EQ(f.store->GetVersioned("gc/sweep.json", 100).value().data, "{\"expires\":0}");
}

// A marker another gc wrote first is not taken for this gc's own, even with the same expiry.
TEST(VolumeGc, AMarkerWrittenFirstByAnotherGcIsNotItsOwn) {
  Fixture f;
  PutOrphans(*f.store);
  HookedStore hooked(*f.store);
  VolumesOptions options;
  options.clock = [&f] { return f.now.load(); };
  Volumes volumes(hooked, options);
  const std::string other = "{\"expires\":" + std::to_string(f.now + 3600) +
                            ",\"holder\":\"0123456789abcdef0123456789abcdef\"}";
  hooked.before_write = [&](const std::string& key) {
    if (key != "gc/sweep.json" || f.store->Exists(key).value()) return;
    ASSERT_TRUE(f.store->PutIfGeneration(key, AsSpan(other), "").ok());
  };
  auto gc = volumes.Gc();
  EXPECT_EQ(gc.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(gc.status().message().find("(it took it first)"), std::string::npos)
      << gc.status().ToString();
  EXPECT_EQ(f.store->GetVersioned("gc/sweep.json", 100).value().data, other);
  EXPECT_EQ(f.CountChunks(), 3u);
}

TEST(VolumeGc, MarkerHoldersAreRandomIds) {
  for (const std::string holder : {"\"abc\"", "1", "\"0123456789ABCDEF0123456789ABCDEF\""}) {
    Fixture f;
    const std::string marker = "{\"expires\":1,\"holder\":" + holder + "}";
    ASSERT_TRUE(f.store->PutIfGeneration("gc/sweep.json", AsSpan(marker), "").ok());
    auto gc = f.volumes->Gc();
    EXPECT_EQ(gc.status().code(), StatusCode::kInvalidArgument) << holder;
    EXPECT_NE(gc.status().message().find("gc/sweep.json"), std::string::npos);
  }
}

// A push or restore whose lease write took effect but whose answer was lost goes on with that
// lease (its id is random, so it can only be its own) and deletes it when done.
TEST(VolumePush, ALeaseWhoseAnswerWasLostIsThePushsOwn) {
  Fixture f;
  WriteTinyDir(f.tmp / "src");
  HookedStore hooked(*f.store);
  VolumesOptions options;
  options.clock = [&f] { return f.now.load(); };
  Volumes volumes(hooked, options);
  hooked.lose_answer_to = "/pushes/";
  auto pushed = volumes.Push(f.tmp / "src", "team", "tiny");
  ASSERT_TRUE(pushed.ok()) << pushed.status().ToString();
  EXPECT_TRUE(hooked.lose_answer_to.empty());
  EXPECT_TRUE(f.store->List("volumes/team/tiny/pushes/").value().empty());
  ASSERT_TRUE(volumes.Remove(pushed->ref).ok());
  hooked.lose_answer_to = "/pushes/";
  const Status restored = volumes.Restore(pushed->ref);
  ASSERT_TRUE(restored.ok()) << restored.ToString();
  EXPECT_TRUE(hooked.lose_answer_to.empty());
  EXPECT_TRUE(f.store->List("volumes/team/tiny/pushes/").value().empty());
  EXPECT_TRUE(volumes.Show(pushed->ref).ok());
}

TEST(VolumeGc, RecordTimesOutOfRangeAreMalformed) {
  for (const std::string t : {"-1", "253402300800", "18446744073709551615", "1.5", "\"1\""}) {
    Fixture f;
    const std::string lease = "{\"chunks\":[],\"expires\":" + t + "}";
    ASSERT_TRUE(f.store->Put("volumes/team/v/pushes/x.json", AsSpan(lease)).ok());
    auto gc = f.volumes->Gc();
    EXPECT_EQ(gc.status().code(), StatusCode::kInvalidArgument) << t;
    EXPECT_NE(gc.status().message().find("volumes/team/v/pushes/x.json"), std::string::npos);
  }
  Fixture f;
  const std::string lease = "{\"chunks\":[],\"expires\":253402300799}";
  ASSERT_TRUE(f.store->Put("volumes/team/v/pushes/x.json", AsSpan(lease)).ok());
  EXPECT_TRUE(f.volumes->Gc().ok());
}

}  // namespace
}  // namespace deltakv::deltasync
