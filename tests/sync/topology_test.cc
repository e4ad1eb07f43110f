// The multi-node topology file: a good file parses; each kind of bad file is refused with a
// message that names what is wrong.
#include "coord/topology.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace deltakv::sidecar {
namespace {

const std::vector<std::string> kMembers = {"a", "b"};

std::string File(const std::string& nodes,
                 const std::string& degrees = R"("world": 4, "tp": 4, "pp": 1)") {
  return R"({"format": "deltakv.topology/1", )" + degrees + R"(, "nodes": )" + nodes + "}";
}

void ExpectRefused(const std::string& text, const std::string& why) {
  auto t = ParseTopology(text, kMembers);
  ASSERT_FALSE(t.ok()) << text;
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find(why), std::string::npos) << t.status().message();
}

TEST(TopologyTest, GoodFileParses) {
  auto t = ParseTopology(File(R"({"a": [0, 1], "b": [2, 3]})"), kMembers);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->world, 4u);
  EXPECT_EQ(t->tp, 4u);
  EXPECT_EQ(t->pp, 1u);
  EXPECT_EQ(t->RanksOf("a"), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(t->RanksOf("b"), (std::vector<uint32_t>{2, 3}));
  EXPECT_TRUE(t->RanksOf("c").empty());
}

TEST(TopologyTest, PipelineStagesOnDifferentNodes) {
  auto t = ParseTopology(
      File(R"({"a": [0, 1, 2, 3], "b": [4, 5, 6, 7]})", R"("world": 8, "tp": 4, "pp": 2)"),
      kMembers);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->RanksOf("b").front(), 4u);
}

TEST(TopologyTest, OverlapIsRefused) {
  ExpectRefused(File(R"({"a": [0, 1, 2], "b": [2, 3]})"), "rank 2 is served by two nodes");
}

TEST(TopologyTest, GapIsRefused) {
  ExpectRefused(File(R"({"a": [0, 1], "b": [3]})"), "rank 2 of 4 is served by no node");
}

TEST(TopologyTest, NodeNotAMemberIsRefused) {
  ExpectRefused(File(R"({"a": [0, 1], "b": [2], "c": [3]})"),
                "node 'c' is not among the group's members");
}

TEST(TopologyTest, MemberWithoutRanksIsRefused) {
  ExpectRefused(File(R"({"a": [0, 1, 2, 3]})"), "member 'b' has no entry");
  ExpectRefused(File(R"({"a": [0, 1, 2, 3], "b": []})"), "node 'b' must list at least one rank");
}

TEST(TopologyTest, RankOutsideTheWorldIsRefused) {
  ExpectRefused(File(R"({"a": [0, 1], "b": [2, 3, 4]})"), "rank 4 is outside the world 0..3");
  ExpectRefused(File(R"({"a": [0, 1], "b": [2, -3]})"), "rank -3 is outside the world");
  ExpectRefused(File(R"({"a": [0, 1], "b": [2, "3"]})"), "rank \"3\" is outside the world");
}

TEST(TopologyTest, RanksOutOfOrderAreRefused) {
  ExpectRefused(File(R"({"a": [1, 0], "b": [2, 3]})"), "increasing order");
  ExpectRefused(File(R"({"a": [0, 0, 1], "b": [2, 3]})"), "increasing order");
}

TEST(TopologyTest, RanksWithAHoleAreRefused) {
  ExpectRefused(File(R"({"a": [0, 2], "b": [1, 3]})"), "node 'a': ranks must be consecutive");
  ExpectRefused(File(R"({"a": [0, 1, 3], "b": [2]})"), "(3 after 1)");
}

TEST(TopologyTest, DegreesMustMultiplyToTheWorld) {
  ExpectRefused(File(R"({"a": [0, 1], "b": [2, 3]})", R"("world": 4, "tp": 2, "pp": 1)"),
                "tp 2 * pp 1 is not the world 4");
  ExpectRefused(File(R"({"a": [0, 1], "b": [2, 3]})", R"("world": 0, "tp": 4, "pp": 1)"),
                "'world' must be an integer");
  ExpectRefused(File(R"({"a": [0, 1], "b": [2, 3]})", R"("world": 4, "tp": 4)"), "'pp' is missing");
}

TEST(TopologyTest, MalformedFilesAreRefused) {
  ExpectRefused("[1, 2]", "not a JSON object");
  ExpectRefused("{", "not a JSON object");
  ExpectRefused(R"({"format": "other/1", "world": 1, "tp": 1, "pp": 1, "nodes": {"a": [0]}})",
                "'format' must be");
  ExpectRefused(File(R"({"a": [0, 1], "b": [2, 3]})").insert(1, R"("extra": 1, )"),
                "unknown key 'extra'");
  ExpectRefused(File(R"([0, 1, 2, 3])"), "'nodes' must be an object");
}

TEST(TopologyTest, LoadNamesTheFile) {
  auto t = LoadTopology("/nonexistent/topology.json", kMembers);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("/nonexistent/topology.json"), std::string::npos);
}

}  // namespace
}  // namespace deltakv::sidecar
