// The group's etcd records: round trips, and clear errors for bad JSON and missing or mistyped
// fields; the pause view's skew.
#include "coord/group_records.h"

#include <gtest/gtest.h>

namespace deltakv::sidecar {
namespace {

TEST(GroupRecords, DecisionRoundTripsWithTheRequestAndCommitPoint) {
  GroupDecision d;
  d.commit = true;
  d.by = "a";
  d.unix = 1700000000.5;
  d.version = "v2/x";
  d.parent = "v1";
  d.delta = "file:///deltas/d12";
  d.commit_at_unix_ns = 1700000000550000000;
  auto back = ParseDecision(DecisionToJson(d));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->commit);
  EXPECT_EQ(back->by, "a");
  EXPECT_EQ(back->version, "v2/x");
  EXPECT_EQ(back->parent, "v1");
  EXPECT_EQ(back->delta, "file:///deltas/d12");
  EXPECT_EQ(back->commit_at_unix_ns, 1700000000550000000);
}

TEST(GroupRecords, OlderDecisionWithoutTheNewFieldsParses) {
  auto d = ParseDecision(R"({"decision":"abort","by":"b","reason":"bad frame","unix":1.5})");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->commit);
  EXPECT_EQ(d->reason, "bad frame");
  EXPECT_EQ(d->commit_at_unix_ns, 0);
  EXPECT_TRUE(d->delta.empty());
}

TEST(GroupRecords, BadDecisionsAreRejectedWithTheField) {
  auto expect = [](const char* text, const char* words) {
    auto d = ParseDecision(text);
    ASSERT_FALSE(d.ok()) << text;
    EXPECT_EQ(d.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(d.status().message().find(words), std::string::npos) << d.status().ToString();
  };
  expect("{not json", "not a JSON object");
  expect("[1,2]", "not a JSON object");
  expect(R"({"by":"a"})", "'decision' is missing");
  expect(R"({"decision":"maybe"})", "'maybe' is unknown");
  expect(R"({"decision":"commit","delta":7})", "'delta' is not a string");
  expect(R"({"decision":"commit","commit_at_unix_ns":"soon"})", "'commit_at_unix_ns'");
  expect(R"({"decision":"commit","commit_at_unix_ns":-5})", "'commit_at_unix_ns'");
}

TEST(GroupRecords, LatestRoundTripsAndNeedsEveryField) {
  LatestCommit l{"syncs/v2@v1#0", "v2", "v1", "/d12", 3.0};
  auto back = ParseLatest(LatestToJson(l));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->key, "syncs/v2@v1#0");
  EXPECT_EQ(back->delta, "/d12");
  for (const char* bad : {"", "null", R"({"key":"k","version":"v2","parent":"v1"})",
                          R"({"key":"k","version":"v2","parent":"v1","delta":""})",
                          R"({"key":1,"version":"v2","parent":"v1","delta":"/d"})"}) {
    auto r = ParseLatest(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("latest-commit record"), std::string::npos)
        << r.status().ToString();
  }
}

TEST(GroupRecords, NodePauseRoundTripsAndChecksItsTimes) {
  NodePause p{"b", 1000, 3000, 1.5};
  auto back = ParseNodePause(NodePauseJson(p).dump());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->node, "b");
  EXPECT_EQ(back->pause_start_ns, 1000);
  EXPECT_EQ(back->resume_ns, 3000);
  EXPECT_DOUBLE_EQ(back->pause_ms, 1.5);
  auto expect = [](const char* text, const char* words) {
    auto r = ParseNodePause(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().ToString();
  };
  expect("garbage", "not a JSON object");
  expect(R"({"pause_start_ns":1,"resume_ns":2,"pause_ms":0})", "'node' is missing");
  expect(R"({"node":"a","resume_ns":2,"pause_ms":0})", "'pause_start_ns' is missing");
  expect(R"({"node":"a","pause_start_ns":1,"resume_ns":2.5,"pause_ms":0})", "'resume_ns'");
  expect(R"({"node":"a","pause_start_ns":1,"resume_ns":2})", "'pause_ms'");
  expect(R"({"node":"a","pause_start_ns":1,"resume_ns":2,"pause_ms":-1})", "'pause_ms'");
  expect(R"({"node":"a","pause_start_ns":5,"resume_ns":2,"pause_ms":0})", "not at or after");
  expect(R"({"node":"a","pause_start_ns":0,"resume_ns":0,"pause_ms":0})", "not at or after");
}

TEST(GroupRecords, PauseViewOrdersMembersAndMeasuresTheResumeSpread) {
  std::vector<NodePause> found = {{"c", 100, 5000000, 1}, {"a", 100, 2000000, 2},
                                  {"x", 100, 90000000, 3}};  // x is no member
  GroupPauseView v = MakePauseView({"a", "b", "c"}, found);
  ASSERT_EQ(v.nodes.size(), 2u);
  EXPECT_EQ(v.nodes[0].node, "a");
  EXPECT_EQ(v.nodes[1].node, "c");
  EXPECT_EQ(v.missing, (std::vector<std::string>{"b"}));
  EXPECT_DOUBLE_EQ(v.resume_skew_ms(), 3.0);
  nlohmann::json j = v.ToJson();
  EXPECT_EQ(j["reported"], 2);
  EXPECT_EQ(j["nodes"]["c"]["pause_ms"], 1.0);
  EXPECT_EQ(MakePauseView({"a"}, {{"a", 1, 2, 0}}).resume_skew_ms(), 0.0);
  EXPECT_EQ(MakePauseView({"a", "b"}, {}).resume_skew_ms(), 0.0);
}

}  // namespace
}  // namespace deltakv::sidecar
