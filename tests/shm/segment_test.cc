// Segment: create/open/unlink, header validation (magic, layout version, kind, size), names,
// publication, and sharing across processes.
#include "shm/segment.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <optional>
#include <thread>

#include "shm_test_util.h"

namespace deltakv::shm {
namespace {

using testing::ForkChild;
using testing::ScopedUnlink;
using testing::UniqueName;
using testing::WaitChild;

constexpr uint64_t kSize = 8192;

Segment CreatePublished(const std::string& name, SegmentKind kind = SegmentKind::kScratch) {
  StatusOr<Segment> s = Segment::Create(name, kSize, kind);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  s->Publish();
  return std::move(s).value();
}

TEST(SegmentTest, CreatePublishOpenSharesBytes) {
  const std::string name = UniqueName("seg");
  Segment owner = CreatePublished(name);
  EXPECT_EQ(owner.size(), kSize);
  EXPECT_EQ(owner.header()->layout_version, kLayoutVersion);
  EXPECT_EQ(owner.header()->kind, static_cast<uint32_t>(SegmentKind::kScratch));
  EXPECT_EQ(owner.header()->creator_pid, static_cast<uint32_t>(getpid()));
  std::memcpy(owner.data() + 100, "hello", 5);

  StatusOr<Segment> reader = Segment::Open(name, SegmentKind::kScratch);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ(reader->size(), kSize);
  EXPECT_EQ(std::memcmp(reader->data() + 100, "hello", 5), 0);
  EXPECT_EQ(reader->At(kSize - 4, 4), reader->data() + kSize - 4);
  EXPECT_EQ(reader->At(kSize - 4, 5), nullptr);
  EXPECT_EQ(reader->At(~uint64_t{0}, 2), nullptr);
}

TEST(SegmentTest, DestroyUnlinksOwnedName) {
  const std::string name = UniqueName("seg");
  { Segment owner = CreatePublished(name); }
  EXPECT_FALSE(Segment::Exists(name));
  EXPECT_EQ(Segment::Open(name, SegmentKind::kScratch).status().code(), StatusCode::kNotFound);
}

// A segment whose name another process removed and created again (a sidecar that replaced a
// stopped one, re-creating its plan arenas) leaves the new segment's name alone.
TEST(SegmentTest, DestroyLeavesANameThatNowNamesAnotherSegment) {
  const std::string name = UniqueName("seg");
  std::optional<Segment> old_owner(CreatePublished(name));
  old_owner->data()[200] = 1;
  CreateOptions replace;
  replace.if_exists = IfExists::kReplace;
  Segment successor = Segment::Create(name, kSize, SegmentKind::kScratch, replace).value();
  successor.Publish();
  successor.data()[200] = 2;
  old_owner.reset();
  ASSERT_TRUE(Segment::Exists(name));
  Segment seen = Segment::Open(name, SegmentKind::kScratch).value();
  EXPECT_EQ(seen.data()[200], 2);
  // Removed by hand meanwhile: destroying the owner is still fine, and so is a later one.
  ASSERT_TRUE(Segment::Unlink(name).ok());
  { Segment gone = std::move(successor); }
  EXPECT_FALSE(Segment::Exists(name));
}

// A process that keeps a segment mapped sees when its name goes away or names another segment.
TEST(SegmentTest, RetiredOnceTheNameIsRemovedOrReplaced) {
  const std::string name = UniqueName("seg");
  std::optional<Segment> owner(CreatePublished(name));
  Segment reader = Segment::Open(name, SegmentKind::kScratch).value();
  EXPECT_FALSE(reader.retired());
  EXPECT_FALSE(owner->retired());
  owner.reset();  // unlinks its name
  EXPECT_TRUE(reader.retired());

  owner.emplace(CreatePublished(name));
  Segment second_reader = Segment::Open(name, SegmentKind::kScratch).value();
  CreateOptions replace;
  replace.if_exists = IfExists::kReplace;
  Segment successor = Segment::Create(name, kSize, SegmentKind::kScratch, replace).value();
  successor.Publish();
  EXPECT_TRUE(second_reader.retired());
  EXPECT_TRUE(owner->retired());
  EXPECT_FALSE(successor.retired());
  owner.reset();  // the name is the successor's: left alone, and not retired
  EXPECT_FALSE(successor.retired());
  EXPECT_FALSE(Segment::Open(name, SegmentKind::kScratch).value().retired());

  Segment third_reader = Segment::Open(name, SegmentKind::kScratch).value();
  ASSERT_TRUE(Segment::Unlink(name).ok());
  EXPECT_TRUE(third_reader.retired());
  EXPECT_TRUE(successor.retired());
  successor.set_unlink_on_destroy(false);

  // Retire leaves alone what is not a published segment of this layout.
  Segment unpublished = Segment::Create(name, kSize, SegmentKind::kScratch).value();
  Segment::Retire(name);
  EXPECT_FALSE(unpublished.retired());
  Segment::Retire(UniqueName("missing"));  // no such name: nothing happens
}

TEST(SegmentTest, CreateFailsIfExistsUnlessReplacing) {
  const std::string name = UniqueName("seg");
  Segment first = CreatePublished(name);
  first.data()[200] = 7;
  StatusOr<Segment> again = Segment::Create(name, kSize, SegmentKind::kScratch);
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(again.status().message().find("already exists"), std::string::npos);
  EXPECT_TRUE(Segment::Exists(name));  // the failed create did not remove it

  CreateOptions replace;
  replace.if_exists = IfExists::kReplace;
  StatusOr<Segment> fresh = Segment::Create(name, kSize, SegmentKind::kScratch, replace);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_EQ(fresh->data()[200], 0);
  first.set_unlink_on_destroy(false);  // the name now belongs to `fresh`
}

TEST(SegmentTest, RejectsBadNamesAndSizes) {
  for (const char* bad : {"", "a/b", ".hidden", "sp ace", "x\n"}) {
    EXPECT_EQ(Segment::Create(bad, kSize, SegmentKind::kScratch).status().code(),
              StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_EQ(Segment::ValidateName(std::string(201, 'a')).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Segment::ValidateName(std::string(200, 'a')).ok());
  EXPECT_EQ(Segment::Create(UniqueName("seg"), 63, SegmentKind::kScratch).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(SegmentTest, OpenMissingIsNotFound) {
  EXPECT_EQ(Segment::Open(UniqueName("missing"), SegmentKind::kScratch).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(Segment::Unlink(UniqueName("missing")).code(), StatusCode::kNotFound);
}

TEST(SegmentTest, OpenRefusesAnotherLayoutVersion) {
  const std::string name = UniqueName("seg");
  Segment owner = CreatePublished(name);
  owner.header()->layout_version = kLayoutVersion + 1;
  Status s = Segment::Open(name, SegmentKind::kScratch).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("layout version " + std::to_string(kLayoutVersion + 1)),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("refusing to attach"), std::string::npos) << s.message();
}

TEST(SegmentTest, OpenRefusesWrongMagicKindSizeAndHeaderSize) {
  const std::string name = UniqueName("seg");
  Segment owner = CreatePublished(name);
  SegmentHeader* h = owner.header();

  h->magic.store(0x1122334455667788ull);
  Status s = Segment::Open(name, SegmentKind::kScratch).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("not a deltakv segment"), std::string::npos) << s.message();
  h->magic.store(kSegmentMagic);

  s = Segment::Open(name, SegmentKind::kControl).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("expected control"), std::string::npos) << s.message();

  h->size = kSize * 2;
  EXPECT_EQ(Segment::Open(name, SegmentKind::kScratch).status().code(), StatusCode::kDataLoss);
  h->size = kSize;

  h->header_size = 32;
  EXPECT_EQ(Segment::Open(name, SegmentKind::kScratch).status().code(), StatusCode::kDataLoss);
  h->header_size = sizeof(SegmentHeader);
  EXPECT_TRUE(Segment::Open(name, SegmentKind::kScratch).ok());
}

TEST(SegmentTest, OpenWaitsForPublishAndGivesUpOnNeverPublished) {
  const std::string name = UniqueName("seg");
  StatusOr<Segment> owner = Segment::Create(name, kSize, SegmentKind::kScratch);
  ASSERT_TRUE(owner.ok());
  OpenOptions quick;
  quick.init_timeout = std::chrono::milliseconds(20);
  Status s = Segment::Open(name, SegmentKind::kScratch, quick).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("never published"), std::string::npos) << s.message();

  std::thread publisher([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    owner->Publish();
  });
  OpenOptions patient;
  patient.init_timeout = std::chrono::seconds(60);
  EXPECT_TRUE(Segment::Open(name, SegmentKind::kScratch, patient).ok());
  publisher.join();
}

// An object that exists but was never sized (its creator died before ftruncate).
TEST(SegmentTest, OpenGivesUpOnAnObjectThatWasNeverSized) {
  const std::string name = UniqueName("seg");
  ScopedUnlink cleanup(name);
  int fd = shm_open(("/" + name).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  OpenOptions quick;
  quick.init_timeout = std::chrono::milliseconds(20);
  Status s = Segment::Open(name, SegmentKind::kScratch, quick).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("not initialized"), std::string::npos) << s.message();
}

TEST(SegmentTest, ListAndUnlinkByPrefix) {
  const std::string prefix = UniqueName("pfx");
  std::vector<Segment> owned;
  for (const char* suffix : {"-a", "-b", "-c"}) {
    owned.push_back(CreatePublished(prefix + suffix));
    owned.back().set_unlink_on_destroy(false);
  }
  Segment other = CreatePublished(UniqueName("other"));
  EXPECT_EQ(Segment::ListWithPrefix(prefix),
            (std::vector<std::string>{prefix + "-a", prefix + "-b", prefix + "-c"}));
  StatusOr<size_t> removed = Segment::UnlinkWithPrefix(prefix);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 3u);
  EXPECT_TRUE(Segment::ListWithPrefix(prefix).empty());
  EXPECT_TRUE(Segment::Exists(other.name()));
  EXPECT_EQ(Segment::UnlinkWithPrefix("").status().code(), StatusCode::kInvalidArgument);
}

TEST(SegmentTest, SharedAcrossProcesses) {
  const std::string name = UniqueName("seg");
  Segment owner = CreatePublished(name);
  owner.data()[64] = 41;
  pid_t child = ForkChild([&] {
    StatusOr<Segment> s = Segment::Open(name, SegmentKind::kScratch);
    if (!s.ok()) return 1;
    if (s->data()[64] != 41) return 2;
    s->data()[65] = 42;
    return 0;
  });
  ASSERT_EQ(WaitChild(child), 0);
  EXPECT_EQ(owner.data()[65], 42);
}

TEST(SegmentTest, MovedSegmentKeepsMapping) {
  const std::string name = UniqueName("seg");
  Segment a = CreatePublished(name);
  uint8_t* data = a.data();
  Segment b = std::move(a);
  EXPECT_FALSE(a.valid());  // NOLINT: testing the moved-from state
  EXPECT_EQ(b.data(), data);
  EXPECT_TRUE(Segment::Exists(name));
  b = Segment();
  EXPECT_FALSE(Segment::Exists(name));
}

}  // namespace
}  // namespace deltakv::shm
