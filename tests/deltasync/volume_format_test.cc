// Sealed volumes, formats: the VOLUME.md vectors, references and paths, manifests (XOR chains
// included) and chunking.
#include <gtest/gtest.h>

#include <cstring>
#include <unistd.h>

#include "deltasync/volume.h"
#include "volume_test_util.h"

namespace deltakv::deltasync {
namespace {

using namespace volume_testing;

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

}  // namespace
}  // namespace deltakv::deltasync
