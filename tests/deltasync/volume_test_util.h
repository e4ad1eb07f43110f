// Shared by the volume tests: the VOLUME.md vectors, generated files and directories, a
// snapshot of a tree, and a fixture with a directory store and an injectable clock.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "deltasync/safetensors.h"
#include "deltasync/volume.h"
#include "test_util.h"

namespace deltakv::deltasync::volume_testing {

namespace fs = std::filesystem;
using deltakv::testing::ReadAll;
using deltakv::testing::TempDir;
using deltakv::testing::WriteAll;

// VOLUME.md, "Test vectors".
inline constexpr char kTinyManifest[] =
    R"({"files":[{"chunks":[{"digest":"sha256:a8076d3d28d21e02012b20eaf7dbf75409a6277134439025f282e368e3305abf","offset":0,"size":10}],"mode":"0755","path":"bin/run.sh","sha256":"a8076d3d28d21e02012b20eaf7dbf75409a6277134439025f282e368e3305abf","size":10},{"chunks":[],"mode":"0644","path":"empty","sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","size":0},{"chunks":[{"digest":"sha256:5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03","offset":0,"size":6}],"mode":"0644","path":"hello.txt","sha256":"5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03","size":6}],"format":"deltakv.volume.v1","name":"tiny","ns":"demo"})";
inline constexpr char kTinyDigest[] = "2a9cfe9e15928775426c28359dc75fcc5f5073e96f577b0809624c5020e627fd";

// splitmix64 from `seed`, 8 little-endian bytes per output (the vector input of VOLUME.md).
inline std::string SplitMixBytes(size_t n, uint64_t seed) {
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

inline std::span<const uint8_t> AsSpan(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

inline void WriteTinyDir(const std::string& dir) {
  fs::create_directories(dir + "/bin");
  WriteAll(dir + "/bin/run.sh", "#!/bin/sh\n");
  chmod((dir + "/bin/run.sh").c_str(), 0755);
  WriteAll(dir + "/empty", "");
  WriteAll(dir + "/hello.txt", "hello\n");
}

// A checkpoint: three tensors of 40000 bytes (one chunk each at the default piece size) and a
// 200000-byte tensor; tensor `changed` gets different bytes when `variant` is non-zero.
inline void WriteCheckpoint(const std::string& path, int variant) {
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

inline void WriteModelDir(const std::string& dir, int variant) {
  fs::create_directories(dir + "/tokenizer");
  WriteCheckpoint(dir + "/model.safetensors", variant);
  WriteAll(dir + "/config.json", R"({"hidden_size": 64})");
  WriteAll(dir + "/tokenizer/vocab.bin", SplitMixBytes(700000, 9));
  WriteTinyDir(dir);
}

// Every regular file under `dir` with its bytes and mode.
inline std::map<std::string, std::pair<std::string, unsigned>> Snapshot(const std::string& dir) {
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

inline VolumeRef Ref(const std::string& text) { return ParseVolumeRef(text).value(); }

// `text` with the first `from` replaced by `to`.
inline std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

}  // namespace deltakv::deltasync::volume_testing
