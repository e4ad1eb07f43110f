// Sealed volumes, push from a plain source: Volumes::PushFrom against Volumes::Push of the same
// files (digests, chunks, XOR chains), read sizes down to a few KiB, files that change while they
// are read, interrupted pushes and their re-runs, bad listings and bounded reads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>

#include "deltasync/volume.h"
#include "deltasync/volume_source.h"
#include "volume_test_util.h"

namespace deltakv::deltasync {
namespace {

using namespace volume_testing;

// A FileSource over files held in memory (a directory read in, or entries given one by one),
// with faults to inject: a hook before every read, a count of reads after which reads fail.
class MemorySource : public FileSource {
 public:
  struct Entry {
    std::string bytes;
    uint32_t mode = 0644;
    int version = 1;
  };

  MemorySource() = default;
  explicit MemorySource(const std::string& dir) {
    for (const auto& [path, file] : Snapshot(dir)) files_[path] = {file.first, file.second, 1};
  }

  void Set(const std::string& path, std::string bytes, uint32_t mode = 0644) {
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = files_[path];
    e.bytes = std::move(bytes);
    e.mode = mode;
    ++e.version;
  }

  StatusOr<std::vector<ListedFile>> List() override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<ListedFile> out;
    for (const auto& [path, e] : files_) {
      out.push_back({path, e.bytes.size(), e.mode, std::to_string(e.version)});
    }
    std::reverse(out.begin(), out.end());  // PushFrom must not rely on the order
    return out;
  }

  StatusOr<std::string> ReadRange(const ListedFile& file, uint64_t offset,
                                  uint64_t length) override {
    if (before_read) before_read(file, offset);
    std::unique_lock<std::mutex> lock(mu_);
    EXPECT_GT(length, 0u);
    EXPECT_LE(offset + length, file.size);
    max_read = std::max(max_read, length);
    if (fail_after >= 0 && reads >= fail_after) return IoError("mem: injected read failure");
    ++reads;
    const auto it = files_.find(file.path);
    if (it == files_.end() || std::to_string(it->second.version) != file.version) {
      return FailedPrecondition("mem: '" + file.path + "' changed since it was listed");
    }
    ++in_flight;
    max_in_flight = std::max(max_in_flight, in_flight);
    std::string bytes = it->second.bytes.substr(offset, length);
    lock.unlock();
    std::this_thread::yield();  // let other reads overlap this one
    lock.lock();
    --in_flight;
    return bytes;
  }

  std::string Describe() const override { return "mem://test"; }

  std::function<void(const ListedFile&, uint64_t)> before_read;
  int fail_after = -1;  // reads that succeed before every read fails; -1 = none fail
  int reads = 0;
  int in_flight = 0;
  int max_in_flight = 0;
  uint64_t max_read = 0;

 private:
  std::mutex mu_;
  std::map<std::string, Entry> files_;
};

PushFromOptions ReadOptions(uint64_t read_bytes, unsigned reads_ahead, uint64_t batch_bytes,
                            unsigned files_at_once) {
  PushFromOptions o;
  o.read_bytes = read_bytes;
  o.reads_ahead = reads_ahead;
  o.batch_bytes = batch_bytes;
  o.files_at_once = files_at_once;
  return o;
}

// A model directory plus files that exercise the chunker's choice: a safetensors header longer
// than a small read, a file whose first 8 bytes look like a header length but whose header is
// not valid, and files shorter than 8 bytes.
void WriteSourceDir(const std::string& dir) {
  WriteModelDir(dir, 0);
  std::vector<std::string> data;
  std::vector<std::string> names;
  for (int i = 0; i < 150; ++i) {
    data.push_back(SplitMixBytes(1000 + 37 * i, 500 + i));
    names.push_back("layers." + std::to_string(i) + ".mlp.down_proj.weight");
  }
  std::vector<TensorToWrite> tensors;
  for (size_t i = 0; i < data.size(); ++i) {
    tensors.push_back({names[i], DType::kU8, {data[i].size()}, AsSpan(data[i])});
  }
  ASSERT_TRUE(WriteSafetensors(dir + "/many.safetensors", tensors, {}).ok());
  std::string fake(8, '\0');
  fake[0] = 100;  // a header length of 100 bytes, then bytes that are not JSON
  WriteAll(dir + "/fake.safetensors", fake + SplitMixBytes(300000, 77));
  WriteAll(dir + "/short", "1234567");
}

TEST(VolumePushFrom, SealsTheSameVersionAsPushForAnyReadSize) {
  Fixture pushed;
  WriteSourceDir(pushed.tmp / "src");
  PushOptions push;
  push.piece_size = 65536;
  push.tag = "v1";
  const PushResult want = pushed.Push(pushed.tmp / "src", "model", push);
  const VolumeManifest want_manifest = pushed.volumes->Show(want.ref).value().manifest;
  const PushFromOptions configs[] = {
      ReadOptions(4096, 1, 1, 1),            // one chunk per batch, one small read at a time
      ReadOptions(4097, 3, 100000, 2),       // reads that end anywhere in a chunk
      ReadOptions(70000, 2, 1 << 20, 4),     // reads larger than a piece
      ReadOptions(8 << 20, 4, 32 << 20, 4),  // the defaults
  };
  for (const PushFromOptions& config : configs) {
    SCOPED_TRACE("read_bytes " + std::to_string(config.read_bytes));
    Fixture f;
    MemorySource source(pushed.tmp / "src");
    PushFromOptions options = config;
    options.push = push;
    SourceProgress last;
    options.progress = [&last](const SourceProgress& p) {
      EXPECT_GE(p.bytes_read, last.bytes_read);
      EXPECT_LE(p.bytes_read, p.bytes_total);
      last = p;
    };
    auto r = f.volumes->PushFrom(source, "team", "model", options);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->ref.digest, want.ref.digest);
    EXPECT_EQ(f.volumes->Show(r->ref).value().manifest.files.size(), want_manifest.files.size());
    EXPECT_EQ(r->files, want.files);
    EXPECT_EQ(r->bytes, want.bytes);
    EXPECT_EQ(r->chunks_total, want.chunks_total);
    EXPECT_EQ(r->chunks_uploaded, want.chunks_total);
    EXPECT_EQ(r->bytes_uploaded, want.bytes_uploaded);
    EXPECT_EQ(f.volumes->Resolve(Ref("team/model:v1")).value(), want.ref.digest);
    EXPECT_EQ(last.files_done, want.files);
    EXPECT_EQ(last.bytes_read, want.bytes);
    EXPECT_EQ(last.chunks_done, want.chunks_total);
    EXPECT_LE(source.max_read, config.read_bytes);
    EXPECT_LE(source.max_in_flight, static_cast<int>(config.reads_ahead * config.files_at_once));
    ASSERT_TRUE(f.volumes->Pull(r->ref, f.tmp / "out").ok());
    EXPECT_EQ(Snapshot(f.tmp / "out"), Snapshot(pushed.tmp / "src"));
    // Pushing the directory into this store now finds every chunk there.
    const PushResult again = f.Push(pushed.tmp / "src", "model", push);
    EXPECT_EQ(again.ref.digest, want.ref.digest);
    EXPECT_EQ(again.chunks_uploaded, 0u);
  }
}

// A checkpoint whose tensor w1 changes `per_step` scattered bytes per step.
std::string SparseTensor(int step) {
  std::string w = SplitMixBytes(1 << 20, 21);
  for (int k = 1; k <= step; ++k) {
    const std::string positions = SplitMixBytes(200 * 4, 1000 + k);
    for (size_t i = 0; i < 200; ++i) {
      uint32_t p = 0;
      std::memcpy(&p, positions.data() + 4 * i, 4);
      w[p % w.size()] ^= static_cast<char>(1 + (i % 7));
    }
  }
  return w;
}

void WriteSparseStep(const std::string& path, const std::string& w1, uint64_t w0_size) {
  const std::string w0 = SplitMixBytes(w0_size, 30);
  ASSERT_TRUE(WriteSafetensors(path,
                               {{"w0", DType::kU8, {w0.size()}, AsSpan(w0)},
                                {"w1", DType::kU8, {w1.size()}, AsSpan(w1)}},
                               {})
                  .ok());
}

// In step 1 two files share every w1 piece; in step 0 only a/'s w1 is close to it. A chunk is
// paired with the parent where it first occurs in path order (a/, where the delta pays), by
// Push and PushFrom alike, although b/ is larger.
void WriteSparseDir(const std::string& dir, int step) {
  fs::create_directories(dir + "/a");
  fs::create_directories(dir + "/b");
  WriteSparseStep(dir + "/a/model.safetensors", SparseTensor(step), 1 << 18);
  WriteSparseStep(dir + "/b/model.safetensors",
                  step == 0 ? SplitMixBytes(1 << 20, 99) : SparseTensor(step), 1 << 19);
}

TEST(VolumePushFrom, ParentXorChunksMatchPush) {
  PushOptions push;
  push.piece_size = 256 << 10;
  Fixture pushed, streamed;
  WriteSparseDir(pushed.tmp / "s0", 0);
  WriteSparseDir(pushed.tmp / "s1", 1);
  const PushResult p0 = pushed.Push(pushed.tmp / "s0", "m", push);
  const PushResult s0 = streamed.Push(pushed.tmp / "s0", "m", push);
  ASSERT_EQ(p0.ref.digest, s0.ref.digest);
  PushOptions with_parent = push;
  with_parent.parent = p0.ref.digest;
  const PushResult want = pushed.Push(pushed.tmp / "s1", "m", with_parent);
  EXPECT_EQ(want.chunks_xor, 4u);
  MemorySource source(pushed.tmp / "s1");
  PushFromOptions options = ReadOptions(100000, 2, 300000, 4);
  options.push = with_parent;
  auto r = streamed.volumes->PushFrom(source, "team", "m", options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->ref.digest, want.ref.digest);
  EXPECT_EQ(r->chunks_xor, want.chunks_xor);
  EXPECT_EQ(r->bytes_xor, want.bytes_xor);
  EXPECT_EQ(r->bytes_uploaded, want.bytes_uploaded);
  ASSERT_TRUE(streamed.volumes->Pull(r->ref, streamed.tmp / "out").ok());
  EXPECT_EQ(Snapshot(streamed.tmp / "out"), Snapshot(pushed.tmp / "s1"));
}

TEST(VolumePushFrom, FileChangedWhileReadFailsAndSealsNothing) {
  Fixture f;
  WriteSourceDir(f.tmp / "src");
  MemorySource source(f.tmp / "src");
  source.before_read = [&source](const ListedFile& file, uint64_t offset) {
    if (file.path == "tokenizer/vocab.bin" && offset >= 65536) {
      source.Set("tokenizer/vocab.bin", SplitMixBytes(700001, 9));
    }
  };
  PushFromOptions options = ReadOptions(65536, 1, 65536, 2);
  options.push.tag = "latest";
  auto r = f.volumes->PushFrom(source, "team", "model", options);
  ASSERT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_NE(r.status().message().find("tokenizer/vocab.bin"), std::string::npos);
  EXPECT_TRUE(f.volumes->List("team").value().empty());
  EXPECT_TRUE(f.store->List("volumes/team/model/pushes/").value().empty()) << "leases left";
}

TEST(VolumePushFrom, InterruptedPushSealsNothingAndARerunUploadsOnlyWhatIsMissing) {
  Fixture f;
  WriteSourceDir(f.tmp / "src");
  MemorySource source(f.tmp / "src");
  source.fail_after = 40;
  PushFromOptions options = ReadOptions(16384, 2, 50000, 2);
  options.push.piece_size = 65536;
  auto failed = f.volumes->PushFrom(source, "team", "model", options);
  ASSERT_EQ(failed.status().code(), StatusCode::kIoError) << failed.status().ToString();
  EXPECT_TRUE(f.volumes->List("team").value().empty());
  const size_t stored = f.CountChunks();
  EXPECT_GT(stored, 0u);
  source.fail_after = -1;
  auto r = f.volumes->PushFrom(source, "team", "model", options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_LT(stored, r->chunks_total);
  EXPECT_EQ(r->chunks_uploaded, r->chunks_total - stored);
  PushOptions push;
  push.piece_size = 65536;
  const PushResult pushed = f.Push(f.tmp / "src", "model", push);
  EXPECT_EQ(pushed.ref.digest, r->ref.digest);
  EXPECT_EQ(pushed.chunks_uploaded, 0u);
}

TEST(VolumePushFrom, RefusesListingsThatCannotBeAVolume) {
  struct Case {
    std::vector<std::string> paths;
    StatusCode code;
    std::string message;
  };
  const Case cases[] = {
      {{}, StatusCode::kNotFound, "holds no files"},
      {{"a", "a/b"}, StatusCode::kInvalidArgument, "'a' is a file and also the directory"},
      {{"a-b", "a/c", "a"}, StatusCode::kInvalidArgument, "'a' is a file and also the directory"},
      {{"x//y"}, StatusCode::kInvalidArgument, "x//y"},
      {{"../up"}, StatusCode::kInvalidArgument, "../up"},
      {{"dir/"}, StatusCode::kInvalidArgument, "dir/"},
  };
  for (const Case& c : cases) {
    Fixture f;
    MemorySource source;
    for (const std::string& p : c.paths) source.Set(p, "bytes of " + p);
    auto r = f.volumes->PushFrom(source, "team", "bad", PushFromOptions{});
    EXPECT_EQ(r.status().code(), c.code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status().ToString();
    EXPECT_EQ(source.reads, 0) << "nothing is read before the listing is checked";
    EXPECT_EQ(f.CountChunks(), 0u);
  }
}

TEST(VolumePushFrom, RefusesOptionsOutOfRange) {
  Fixture f;
  MemorySource source;
  source.Set("f", "x");
  const PushFromOptions bad[] = {ReadOptions(4095, 1, 1, 1),  ReadOptions(4096, 0, 1, 1),
                                 ReadOptions(4096, 1, 0, 1),  ReadOptions(4096, 1, 1, 0),
                                 ReadOptions(4096, 65, 1, 1), ReadOptions(4096, 1, 1, 65)};
  for (const PushFromOptions& o : bad) {
    EXPECT_EQ(f.volumes->PushFrom(source, "team", "x", o).status().code(),
              StatusCode::kInvalidArgument);
  }
  PushFromOptions no_piece;
  no_piece.push.piece_size = 0;
  EXPECT_EQ(f.volumes->PushFrom(source, "team", "x", no_piece).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(source.reads, 0);
}

}  // namespace
}  // namespace deltakv::deltasync
