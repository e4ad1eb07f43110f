// Sealed volumes: the VOLUME.md vectors, refs and paths, manifests, chunking, the directory
// store, and push / pull / tag / rm / restore / gc against a store in a temporary directory.
#include "deltasync/volume.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

#include "deltasync/safetensors.h"
#include "deltasync/volume_files.h"
#include "test_util.h"

namespace deltakv::deltasync {
namespace {

namespace fs = std::filesystem;
using deltakv::testing::ReadAll;
using deltakv::testing::TempDir;
using deltakv::testing::WriteAll;

// VOLUME.md, "Test vectors".
constexpr char kTinyManifest[] =
    R"({"files":[{"chunks":[{"digest":"sha256:a8076d3d28d21e02012b20eaf7dbf75409a6277134439025f282e368e3305abf","offset":0,"size":10}],"mode":"0755","path":"bin/run.sh","sha256":"a8076d3d28d21e02012b20eaf7dbf75409a6277134439025f282e368e3305abf","size":10},{"chunks":[],"mode":"0644","path":"empty","sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","size":0},{"chunks":[{"digest":"sha256:5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03","offset":0,"size":6}],"mode":"0644","path":"hello.txt","sha256":"5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03","size":6}],"format":"deltakv.volume.v1","name":"tiny","ns":"demo"})";
constexpr char kTinyDigest[] = "2a9cfe9e15928775426c28359dc75fcc5f5073e96f577b0809624c5020e627fd";

// splitmix64 from `seed`, 8 little-endian bytes per output (the vector input of VOLUME.md).
std::string SplitMixBytes(size_t n, uint64_t seed) {
  std::string out;
  uint64_t s = seed;
  while (out.size() < n) {
    s += 0x9e3779b97f4a7c15ull;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    for (int i = 0; i < 8; ++i) out += static_cast<char>((z >> (8 * i)) & 0xff);
  }
  out.resize(n);
  return out;
}

std::span<const uint8_t> AsSpan(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

void WriteTinyDir(const std::string& dir) {
  fs::create_directories(dir + "/bin");
  WriteAll(dir + "/bin/run.sh", "#!/bin/sh\n");
  chmod((dir + "/bin/run.sh").c_str(), 0755);
  WriteAll(dir + "/empty", "");
  WriteAll(dir + "/hello.txt", "hello\n");
}

// A checkpoint: three tensors of 40000 bytes (one chunk each at the default piece size) and a
// 200000-byte tensor; tensor `changed` gets different bytes when `variant` is non-zero.
void WriteCheckpoint(const std::string& path, int variant) {
  std::vector<std::string> data = {SplitMixBytes(40000, 1), SplitMixBytes(40000, 2),
                                   SplitMixBytes(40000, 3), SplitMixBytes(200000, 4)};
  if (variant != 0) data[1] = SplitMixBytes(40000, 100 + variant);
  std::vector<TensorToWrite> tensors;
  const char* names[] = {"a.weight", "b.weight", "c.weight", "embed"};
  for (size_t i = 0; i < data.size(); ++i) {
    tensors.push_back({names[i], DType::kU8, {data[i].size()}, AsSpan(data[i])});
  }
  ASSERT_TRUE(WriteSafetensors(path, tensors, {}).ok());
}

void WriteModelDir(const std::string& dir, int variant) {
  fs::create_directories(dir + "/tokenizer");
  WriteCheckpoint(dir + "/model.safetensors", variant);
  WriteAll(dir + "/config.json", R"({"hidden_size": 64})");
  WriteAll(dir + "/tokenizer/vocab.bin", SplitMixBytes(700000, 9));
  WriteTinyDir(dir);
}

// Every regular file under `dir` with its bytes and mode.
std::map<std::string, std::pair<std::string, unsigned>> Snapshot(const std::string& dir) {
  std::map<std::string, std::pair<std::string, unsigned>> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    struct stat st {};
    stat(e.path().c_str(), &st);
    out[fs::relative(e.path(), dir).string()] = {ReadAll(e.path()), st.st_mode & 0777};
  }
  return out;
}

struct Fixture {
  TempDir tmp;
  std::atomic<int64_t> now{1'700'000'000};
  std::unique_ptr<VolumeStore> store;
  std::unique_ptr<Volumes> volumes;

  Fixture() {
    auto s = MakeDirVolumeStore(tmp / "store");
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    store = std::move(s).value();
    VolumesOptions options;
    options.clock = [this] { return now.load(); };
    volumes = std::make_unique<Volumes>(*store, options);
  }
  PushResult Push(const std::string& dir, const std::string& name, PushOptions options = {}) {
    auto r = volumes->Push(dir, "team", name, options);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : PushResult{};
  }
  size_t CountChunks() { return store->List("chunks/").value().size(); }
};

VolumeRef Ref(const std::string& text) { return ParseVolumeRef(text).value(); }

// ----- vectors -----

TEST(VolumeVectors, GearTable) {
  EXPECT_EQ(CdcGearTable()[0], 0xa862dc516e942ff5ull);
  EXPECT_EQ(CdcGearTable()[1], 0xd0840ca6e0a6d961ull);
  EXPECT_EQ(CdcGearTable()[255], 0x0bf062dcf64b3e54ull);
}

TEST(VolumeVectors, CdcBoundaries) {
  const std::string data = SplitMixBytes(1 << 20, 0);
  std::vector<uint64_t> sizes;
  uint64_t next = 0;
  for (const ChunkSpan& c : CdcChunks(AsSpan(data))) {
    EXPECT_EQ(c.offset, next);
    next += c.size;
    sizes.push_back(c.size);
  }
  const std::vector<uint64_t> expected = {88596, 69628, 49779, 69438, 67507, 68875,  75953,
                                          67151, 83065, 95737, 69544, 42470, 101683, 99150};
  EXPECT_EQ(sizes, expected);
}

TEST(VolumeVectors, TinyManifest) {
  auto m = ParseVolumeManifest(kTinyManifest);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(ManifestDigest(kTinyManifest), kTinyDigest);
  EXPECT_EQ(SerializeVolumeManifest(*m).value(), kTinyManifest);
  ASSERT_EQ(m->files.size(), 3u);
  EXPECT_EQ(m->files[0].mode, 0755u);
}

// Pushing the vector's files seals the vector's bytes under its digest.
TEST(VolumeVectors, PushOfTinyDirMatchesVector) {
  Fixture f;
  WriteTinyDir(f.tmp / "src");
  auto r = f.volumes->Push(f.tmp / "src", "demo", "tiny");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->ref.digest, kTinyDigest);
  EXPECT_EQ(
      f.store->Get(std::string("volumes/demo/tiny/versions/") + kTinyDigest + ".json", 1 << 20)
          .value(),
      kTinyManifest);
}

// ----- refs and paths -----

TEST(VolumeRefTest, ParsesAndPrints) {
  const std::string digest_text = std::string("team/llama-3.1@sha256:") + kTinyDigest;
  auto d = ParseVolumeRef(digest_text);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->ns, "team");
  EXPECT_EQ(d->name, "llama-3.1");
  EXPECT_EQ(d->digest, kTinyDigest);
  EXPECT_EQ(d->ToString(), digest_text);
  auto t = ParseVolumeRef("team/llama:Step_100.final-2");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->tag, "Step_100.final-2");
  EXPECT_FALSE(t->is_digest());
  EXPECT_EQ(t->ToString(), "team/llama:Step_100.final-2");
}

TEST(VolumeRefTest, RejectsEveryKindOfBadRef) {
  const std::string hex(64, 'a');
  const std::pair<std::string, std::string> cases[] = {
      {"nons", "no '/'"},
      {"team/name", "expected '@sha256:HEX' or ':TAG'"},
      {"/name:t", "namespace is empty"},
      {"team/:t", "name is empty"},
      {"Team/name:t", "must start with a lowercase letter or digit"},
      {"team/Name:t", "must start with a lowercase letter or digit"},
      {"-team/name:t", "must start with"},
      {"team/na$me:t", "character 2 is not one of [a-z0-9._-]"},
      {"team/a/b:t", "character 1 is not one of"},
      {std::string(129, 'a') + "/n:t", "129 characters, more than 128"},
      {"team/name:", "tag is empty"},
      {"team/name:.t", "must start with a letter, digit or '_'"},
      {"team/name:t/x", "character 1 is not one of [A-Za-z0-9._-]"},
      {"team/name:" + std::string(129, 't'), "more than 128"},
      {"team/name@" + hex, "is not 'sha256:' followed by 64 lowercase hex digits"},
      {"team/name@sha256:" + hex.substr(1), "64 lowercase hex"},
      {"team/name@sha256:" + std::string(64, 'A'), "64 lowercase hex"},
      {"team/name@sha512:" + hex, "64 lowercase hex"},
      {"team/name@sha256:" + hex + "0", "64 lowercase hex"},
  };
  for (const auto& [text, message] : cases) {
    auto r = ParseVolumeRef(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(r.status().message().find(message), std::string::npos)
        << text << " -> " << r.status().message();
    EXPECT_NE(r.status().message().find("volume reference"), std::string::npos) << text;
  }
}

TEST(VolumePathTest, RejectsBadPaths) {
  const std::pair<std::string, std::string> cases[] = {
      {"", "path is empty"},
      {"/etc/passwd", "is absolute"},
      {"a//b", "empty, '.' or '..' component"},
      {"a/", "empty, '.' or '..' component"},
      {"../x", "empty, '.' or '..' component"},
      {"a/../../x", "empty, '.' or '..' component"},
      {"./a", "empty, '.' or '..' component"},
      {"a/\nb", "control character at byte 2"},
      {"a\x7f", "control character"},
      {"bad\xff", "invalid UTF-8 at byte 3"},
      {"over\xc0\xaf", "invalid UTF-8"},
      {"sur\xed\xa0\x80", "invalid UTF-8"},
      {std::string(256, 'x'), "component longer than 255"},
      {std::string(4097, 'x'), "longer than 4096"},
  };
  for (const auto& [path, message] : cases) {
    const Status st = ValidateVolumePath(path);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << path;
    EXPECT_NE(st.message().find(message), std::string::npos) << path << " -> " << st.message();
  }
  EXPECT_TRUE(ValidateVolumePath("a/b c/d.e-f_\xc3\xa9").ok());
  EXPECT_TRUE(ValidateVolumePath(".hidden/..x").ok());
}

// ----- manifests -----

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

TEST(VolumeManifestTest, RejectsEveryTruncation) {
  const std::string full = kTinyManifest;
  for (size_t n = 0; n < full.size(); ++n) {
    auto m = ParseVolumeManifest(full.substr(0, n));
    ASSERT_FALSE(m.ok()) << n;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << n;
  }
}

TEST(VolumeManifestTest, RejectsGarbledManifests) {
  const std::string full = kTinyManifest;
  const std::string hello = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03";
  const std::pair<std::string, std::string> cases[] = {
      {Replace(full, "\"ns\":\"demo\"}", "\"ns\":\"demo\",\"zz\":1}"), "unknown field 'zz'"},
      {Replace(full, "\"ns\":\"demo\"}", "\"ns\":\"demo\",\"ns\":\"demo\"}"), "duplicate key 'ns'"},
      {Replace(full, "\"format\":\"deltakv.volume.v1\",", ""), "field 'format' missing"},
      {Replace(full, "deltakv.volume.v1", "deltakv.volume.v2"), "format 'deltakv.volume.v2'"},
      {Replace(full, "\"ns\":\"demo\"", "\"ns\":\"Demo\""), "must start with a lowercase"},
      {Replace(full, "\"ns\":\"demo\"}", "\"ns\":\"demo\",\"parent\":\"abc\"}"),
       "field 'parent' 'abc' is not 'sha256:'"},
      {Replace(full, "\"path\":\"empty\"", "\"path\":\"../empty\""), "'..' component"},
      {Replace(full, "\"path\":\"empty\"", "\"path\":\"bin/run.sh\""), "duplicate or out of order"},
      {Replace(full, "\"path\":\"empty\"", "\"path\":\"zzz\""), "duplicate or out of order"},
      {Replace(full, "\"path\":\"empty\"", "\"path\":\"bin\""), "duplicate or out of order"},
      {Replace(full, "\"path\":\"empty\"", "\"path\":\"bin/run.sh/x\""),
       "is both a file and the directory of 'bin/run.sh/x'"},
      {Replace(full, "\"mode\":\"0755\"", "\"mode\":\"0777\""), "mode must be"},
      {Replace(full, "\"mode\":\"0755\"", "\"mode\":493"), "mode must be"},
      {Replace(full, "\"offset\":0,\"size\":6}", "\"offset\":1,\"size\":5}"),
       "offset 1, expected 0 (gap)"},
      {Replace(full, "\"offset\":0,\"size\":6}",
               "\"offset\":0,\"size\":3},{\"digest\":\"sha256:" + hello +
                   "\",\"offset\":2,\"size\":4}"),
       "offset 2, expected 3 (overlap)"},
      {Replace(full, "\"offset\":0,\"size\":6}", "\"offset\":0,\"size\":5}"),
       "chunks cover 5 bytes, file size 6"},
      {Replace(full, "\"offset\":0,\"size\":6}", "\"offset\":0,\"size\":7}"),
       "past the file size 6"},
      {Replace(full, "\"offset\":0,\"size\":6}", "\"offset\":0,\"size\":-6}"),
       "must be a non-negative integer"},
      {Replace(full, "\"size\":10}", "\"size\":10.0}"), "must be a non-negative integer"},
      {Replace(full, "\"sha256\":\"a8", "\"sha256\":\"A8"), "sha256 is not 64 lowercase hex"},
      {Replace(full, "\"digest\":\"sha256:a8", "\"digest\":\"md5:a8"), "is not 'sha256:'"},
      {Replace(full, "{\"files\"", "{ \"files\""),
       "not in canonical form (first difference at byte 1)"},
      {Replace(full, "\"path\":\"empty\"", "\"path\":\"\\u0065mpty\""), "not in canonical form"},
      {Replace(full, "{\"chunks\":[],\"mode\":\"0644\"", "{\"mode\":\"0644\",\"chunks\":[]"),
       "not in canonical form"},
      {"[]", "top level must be an object"},
      {std::string("{\"files\":[]\0}", 13), "NUL byte at offset 11"},
      {std::string(20, '[') + std::string(20, ']'), "nested more than 8 levels"},
  };
  for (const auto& [text, message] : cases) {
    auto m = ParseVolumeManifest(text);
    ASSERT_FALSE(m.ok()) << text;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(m.status().message().find(message), std::string::npos)
        << text << "\n -> " << m.status().message();
  }
}

TEST(VolumeManifestTest, SerializeRefusesInvalidManifests) {
  VolumeManifest m{"demo", "tiny", "", {}};
  m.files.push_back({"b", 0, 0644, std::string(64, '0'), {}});
  m.files.push_back({"a", 0, 0644, std::string(64, '0'), {}});
  EXPECT_EQ(SerializeVolumeManifest(m).status().code(), StatusCode::kInvalidArgument);
  std::swap(m.files[0], m.files[1]);
  m.parent = std::string(64, 'f');
  auto text = SerializeVolumeManifest(m);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_NE(text->find("\"parent\":\"sha256:ffff"), std::string::npos);
  EXPECT_EQ(ParseVolumeManifest(*text).value().parent, m.parent);
}

// ----- chunking -----

TEST(VolumeChunking, SafetensorsOnTensorBoundaries) {
  TempDir tmp;
  WriteCheckpoint(tmp / "m.safetensors", 0);
  const std::string bytes = ReadAll(tmp / "m.safetensors");
  auto header = ParseSafetensorsHeader(AsSpan(bytes), bytes.size());
  ASSERT_TRUE(header.ok());
  const uint64_t d = header->data_offset();
  // Piece size 64 KiB: the 200000-byte tensor splits into 65536 x 3 + 3392.
  const std::vector<ChunkSpan> chunks = ChunkFile(AsSpan(bytes), 65536);
  const std::vector<std::pair<uint64_t, uint64_t>> expected = {{0, d},
                                                               {d, 40000},
                                                               {d + 40000, 40000},
                                                               {d + 80000, 40000},
                                                               {d + 120000, 65536},
                                                               {d + 185536, 65536},
                                                               {d + 251072, 65536},
                                                               {d + 316608, 3392}};
  ASSERT_EQ(chunks.size(), expected.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    EXPECT_EQ(chunks[i].offset, expected[i].first) << i;
    EXPECT_EQ(chunks[i].size, expected[i].second) << i;
  }
}

TEST(VolumeChunking, BrokenSafetensorsFallsBackToCdc) {
  TempDir tmp;
  WriteCheckpoint(tmp / "m.safetensors", 0);
  std::string bytes = ReadAll(tmp / "m.safetensors");
  bytes.resize(bytes.size() - 1);  // truncated: the header no longer fits the data
  const std::vector<ChunkSpan> chunks = ChunkFile(AsSpan(bytes), 65536);
  const std::vector<ChunkSpan> cdc = CdcChunks(AsSpan(bytes));
  ASSERT_EQ(chunks.size(), cdc.size());
  for (size_t i = 0; i < cdc.size(); ++i) EXPECT_EQ(chunks[i].size, cdc[i].size);
}

TEST(VolumeChunking, CdcBoundsAndStabilityUnderInsertion) {
  const std::string base = SplitMixBytes(4 << 20, 7);
  std::string edited = base;
  edited.insert(2 << 20, SplitMixBytes(100, 8));
  const auto digests = [](const std::string& data) {
    std::multiset<std::string> out;
    const std::vector<ChunkSpan> chunks = CdcChunks(AsSpan(data));
    for (size_t i = 0; i < chunks.size(); ++i) {
      EXPECT_LE(chunks[i].size, kCdcMaxChunk);
      if (i + 1 < chunks.size()) {
        EXPECT_GE(chunks[i].size, kCdcMinChunk);
      }
      out.insert(data.substr(chunks[i].offset, chunks[i].size));
    }
    return out;
  };
  const std::multiset<std::string> before = digests(base);
  const std::multiset<std::string> after = digests(edited);
  size_t changed = 0;
  for (const std::string& c : after) changed += before.count(c) == 0 ? 1 : 0;
  EXPECT_GE(before.size(), 40u);
  EXPECT_GE(changed, 1u);
  EXPECT_LE(changed, 3u);
}

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
  std::function<void(const std::string& key)> before_list, before_delete;

  Status Put(const std::string& k, std::span<const uint8_t> d) override { return inner_.Put(k, d); }
  Status PutIfAbsent(const std::string& k, std::span<const uint8_t> d) override {
    return inner_.PutIfAbsent(k, d);
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
    return inner_.PutIfGeneration(k, d, e);
  }
  std::string Describe() const override { return inner_.Describe(); }

 private:
  VolumeStore& inner_;
};

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
  EXPECT_EQ(second_marker, "{\"expires\":" + std::to_string(f.now.load() + 3600) + "}");
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

TEST(VolumeXor, ManifestChainsParseStrictly) {
  const std::string d1(64, '1'), d2(64, '2'), d3(64, '3'), x(64, 'a');
  auto manifest = [&](const std::string& chain) {
    return R"({"files":[{"chunks":[{"digest":"sha256:)" + d1 + R"(","offset":0,"size":4)" +
           chain + R"(}],"mode":"0644","path":"f","sha256":")" + d1 +
           R"(","size":4}],"format":"deltakv.volume.v1","name":"n","ns":"s"})";
  };
  auto link = [&](const std::string& base) {
    return R"({"base":"sha256:)" + base + R"(","delta":"sha256:)" + x + R"("})";
  };
  const std::string good = manifest(",\"xor\":[" + link(d2) + "," + link(d3) + "]");
  auto m = ParseVolumeManifest(good);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->files[0].chunks[0].xor_chain.size(), 2u);
  EXPECT_EQ(m->files[0].chunks[0].xor_chain[1].base, d3);
  EXPECT_EQ(SerializeVolumeManifest(*m).value(), good);
  for (const std::string& bad :
       {manifest(",\"xor\":[]"), manifest(",\"xor\":[" + link(d1) + "]"),
        manifest(",\"xor\":[" + link(d2) + "," + link(d2) + "]"),
        manifest(",\"xor\":[{\"base\":\"sha256:" + d2 + "\"}]"),
        manifest(",\"xor\":[{\"base\":\"sha256:" + d2 + "\",\"delta\":\"sha256:zz\"}]"),
        manifest(",\"xor\":{}")}) {
    EXPECT_EQ(ParseVolumeManifest(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  std::string longest = ",\"xor\":[";
  for (size_t i = 0; i <= kMaxXorChain; ++i) {
    longest += (i ? "," : "") + link(std::string(63, 'b') + "0123456789abcdef"[i]);
  }
  EXPECT_EQ(ParseVolumeManifest(manifest(longest + "]")).status().code(),
            StatusCode::kInvalidArgument);
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

}  // namespace deltakv::deltasync
