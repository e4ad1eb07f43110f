// ChecksumTable: the sidecar's persisted record of the engine's live checksums. Round trips
// through JSON and the state dir, staleness against the attached ranks, and every kind of bad
// input refused with a message naming the problem.
#include "sync/checksum_table.h"

#include <gtest/gtest.h>

#include <fstream>

#include "test_util.h"

namespace deltakv::sidecar {
namespace {

ChecksumTable Sample() {
  ChecksumTable t;
  t.version = "v7";
  t.source = "checkpoint /ckpt/v7";
  t.checkpoint_verified = true;
  t.updated_unix = 1234.5;
  t.ranks = {{0, 100, 1, 0x0100000000000064ull}, {1, 101, 2, 0x0101000100000065ull}};
  t.adler32 = {{"a.weight", 0xdeadbeef}, {"b.bias", 0x00000001}};
  t.owned["a.weight"] = {deltasync::AdlerDelta::FromSums(1, 2), deltasync::AdlerDelta::FromSums(65520, 0)};
  return t;
}

TEST(ChecksumTable, RoundTripsThroughJsonAndTheStateDir) {
  ChecksumTable t = Sample();
  auto back = ChecksumTable::FromJson(t.ToJson().dump());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->version, "v7");
  EXPECT_EQ(back->source, t.source);
  EXPECT_TRUE(back->checkpoint_verified);
  EXPECT_EQ(back->ranks, t.ranks);
  EXPECT_EQ(back->adler32, t.adler32);
  ASSERT_EQ(back->owned["a.weight"].size(), 2u);
  EXPECT_EQ(back->owned["a.weight"][1].s1(), 65520u);
  EXPECT_EQ(back->diverged, "");

  deltakv::testing::TempDir dir;
  EXPECT_EQ(ChecksumTable::Load(dir.path()).status().code(), StatusCode::kNotFound);
  t.diverged = "scrub: tensor 'a.weight' differs";
  ASSERT_TRUE(t.Save(dir.path()).ok());
  auto loaded = ChecksumTable::Load(dir.path());
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->diverged, t.diverged);
  EXPECT_EQ(loaded->adler32, t.adler32);
}

TEST(ChecksumTable, CurrentOnlyForTheSameRankProcesses) {
  ChecksumTable t = Sample();
  std::vector<shm::RankInfo> ranks(2);
  ranks[0].rank = 1, ranks[0].pid = 101, ranks[0].epoch = 2, ranks[0].state_word = t.ranks[1].state_word;
  ranks[1].rank = 0, ranks[1].pid = 100, ranks[1].epoch = 1, ranks[1].state_word = t.ranks[0].state_word;
  EXPECT_TRUE(t.CurrentFor(ranks)) << "slot order does not matter";
  ranks[0].pid = 999;  // rank 1 restarted
  EXPECT_FALSE(t.CurrentFor(ranks));
  ranks.pop_back();
  EXPECT_FALSE(t.CurrentFor(ranks));
  EXPECT_FALSE(ChecksumTable{}.CurrentFor({}));  // an empty table vouches for nothing
}

TEST(ChecksumTable, RecordsTheSliceItWasMadeFor) {
  ChecksumTable whole = Sample();
  EXPECT_TRUE(whole.ForSlice(0, 4, 4)) << "a table without a slice is the whole group's";
  EXPECT_FALSE(whole.ForSlice(2, 2, 4));
  EXPECT_FALSE(whole.ToJson().contains("slice"));

  ChecksumTable t = Sample();
  t.slice_first = 2, t.slice_count = 2, t.slice_world = 4;
  auto back = ChecksumTable::FromJson(t.ToJson().dump());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->ForSlice(2, 2, 4));
  EXPECT_FALSE(back->ForSlice(0, 2, 4));
  EXPECT_FALSE(back->ForSlice(0, 4, 4));

  nlohmann::json j = t.ToJson();
  j["slice"]["count"] = 3;  // ranks 2..4 of 4
  auto bad = ChecksumTable::FromJson(j.dump());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("slice"), std::string::npos) << bad.status().message();
}

TEST(ChecksumTable, BadInputIsRefusedWithTheReason) {
  const std::string good = Sample().ToJson().dump();
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  struct Case {
    std::string text, message;
  } cases[] = {
      {"", "not a JSON object"},
      {"[1,2]", "not a JSON object"},
      {"{\"format\":\"other\"}", "format is not"},
      {"{\"format\":1234.5}", "format is not"},  // found by checksum_table_fuzz
      {with("\"deadbeef\"", "\"deadbee\""), "is not 8 hex digits"},
      {with("\"deadbeef\"", "\"deadbeeg\""), "is not 8 hex digits"},
      {with("\"deadbeef\"", "17"), "checksum table"},
      {with("[65520,0]", "[65521,0]"), "owned sums must be pairs below 65521"},
      {with("[65520,0]", "[1]"), "checksum table"},
      {with("\"version\":\"v7\"", "\"version\":7"), "checksum table"},
      {with("\"ranks\":[", "\"ranks\":[{\"rank\":-1},"), "checksum table"},
  };
  for (const Case& c : cases) {
    auto t = ChecksumTable::FromJson(c.text);
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(t.status().message().find(c.message), std::string::npos)
        << c.text << " -> " << t.status().message();
  }
  deltakv::testing::TempDir dir;
  std::ofstream(dir.path() + "/checksums.json") << "{";
  auto t = ChecksumTable::Load(dir.path());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("checksums.json"), std::string::npos);
}

}  // namespace
}  // namespace deltakv::sidecar
