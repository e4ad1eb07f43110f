// Tests of the trace parsers (kvsim/trace.h), the theoretical hit rate and the synthetic
// generator, on hand-written inputs.
#include "kvsim/trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "kvsim/synthetic.h"
#include "kvsim/theoretical_hit.h"

namespace deltakv::kvsim {
namespace {

const char* kWeka = R"({"id":"trace_0001","models":["m"],"block_size":64,"hash_id_scope":"local",
"tool_tokens":100,"system_tokens":28,"totals":{"x":1},"requests":[
{"t":0.0,"type":"n","model":"m","in":200,"out":10,"hash_ids":[1,2,3],"input_types":["text"],
 "output_types":["text"],"stop":"tool_use","api_time":2.0,"think_time":0.0},
{"t":5.0,"type":"subagent","agent_id":"a1","subagent_type":"Explore","duration_ms":null,
 "total_tokens":null,"tool_use_count":null,"status":"async_launched","models":["h"],
 "tool_tokens":1,"system_tokens":2,"requests":[
   {"t":0.0,"type":"n","in":128,"out":5,"hash_ids":[50,51],"api_time":1.0},
   {"t":3.0,"type":"s","in":192,"out":5,"hash_ids":[50,51,52],"api_time":1.0,"ttft":0.2}]},
{"t":10.0,"type":"s","in":300,"out":20,"hash_ids":[1,2,3,4],"api_time":3.0,"think_time":5.0,"ttft":0.5},
{"t":20.0,"type":"n","input_length":320,"output_length":1,"hash_ids":[1,2,3,4,5]}]})";

TEST(WekaTrace, ParsesEveryField) {
  auto t = ParseWekaTrace(kWeka, "trace.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->id, "trace_0001");
  EXPECT_EQ(t->block_size, 64u);
  EXPECT_EQ(t->tool_tokens, 100u);
  EXPECT_EQ(t->system_tokens, 28u);
  ASSERT_EQ(t->conversations.size(), 2u);
  const auto& root = t->conversations[0].turns;
  ASSERT_EQ(root.size(), 3u);
  EXPECT_EQ(root[0].input_tokens, 200u);
  EXPECT_EQ(root[0].output_tokens, 10u);
  EXPECT_EQ(root[0].hash_ids, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_DOUBLE_EQ(root[0].api_time_s, 2.0);
  EXPECT_DOUBLE_EQ(root[1].think_time_s, 5.0);
  EXPECT_EQ(root[2].input_tokens, 320u);  // the input_length alias
  EXPECT_DOUBLE_EQ(root[2].api_time_s, -1);
  const Conversation& sa = t->conversations[1];
  EXPECT_EQ(sa.id, "trace_0001::sa:a1");
  EXPECT_EQ(sa.spawn_after, 0);
  EXPECT_EQ(sa.join_before, 1);
  EXPECT_DOUBLE_EQ(sa.spawn_t_s, 5.0);
  // Inner times earlier than the spawn are relative to it.
  EXPECT_DOUBLE_EQ(sa.turns[0].t_s, 5.0);
  EXPECT_DOUBLE_EQ(sa.turns[1].t_s, 8.0);
}

TEST(WekaTrace, AbsoluteInnerTimesStayAndOrphansAreDropped) {
  auto t = ParseWekaTrace(R"({"id":"x","block_size":64,"hash_id_scope":"local","requests":[
    {"t":1,"type":"subagent","agent_id":"orphan","requests":[{"t":1,"type":"n","in":1,"out":1}]},
    {"t":2,"type":"n","in":64,"out":1,"hash_ids":[1]},
    {"t":3,"type":"subagent","agent_id":"bg","requests":[{"t":4,"type":"n","in":1,"out":1}]}]})",
                          "x.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->conversations.size(), 2u);  // the subagent before any root turn is dropped
  EXPECT_EQ(t->conversations[1].id, "x::sa:bg");
  EXPECT_EQ(t->conversations[1].spawn_after, 0);
  EXPECT_EQ(t->conversations[1].join_before, -1);  // no following turn: background
  EXPECT_DOUBLE_EQ(t->conversations[1].turns[0].t_s, 4.0);
}

void ExpectError(const std::string& text, const std::string& needle) {
  auto t = ParseWekaTrace(text, "bad.json");
  ASSERT_FALSE(t.ok()) << text;
  EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().message();
  EXPECT_NE(t.status().message().find("bad.json:"), std::string::npos) << t.status().message();
}

const std::string kHead = R"({"id":"x","block_size":64,"hash_id_scope":"local","requests":[)";

TEST(WekaTrace, EachMalformedClassIsNamed) {
  ExpectError("{\"id\": \n \"x\",", "bad.json:2:");                      // syntax, with line
  ExpectError(kHead + "]" + ",\"colour\":1}", "unknown field 'colour'");  // unknown trace field
  ExpectError(kHead + R"({"t":0,"type":"n","in":1,"out":1,"speed":2}]})",
              "requests[0]: unknown field 'speed'");
  ExpectError(kHead + R"({"t":0,"type":"n","out":1}]})", "requests[0].in: missing");
  ExpectError(kHead + R"({"t":0,"type":"n","in":"7","out":1}]})", "requests[0].in: expected");
  ExpectError(kHead + R"({"t":-1,"type":"n","in":1,"out":1}]})", "requests[0].t: expected a finite");
  ExpectError(kHead + R"({"t":0,"type":"n","in":-5,"out":1}]})", "requests[0].in");
  ExpectError(kHead + R"({"t":0,"type":"x","in":1,"out":1}]})", "requests[0].type");
  ExpectError(kHead + R"({"t":0,"type":"n","in":1,"out":1,"hash_ids":[1,-2]}]})",
              "requests[0].hash_ids[1]");
  ExpectError(kHead + R"({"t":0,"type":"n","in":1,"out":1,"api_time":"x"}]})",
              "requests[0].api_time");
  ExpectError(kHead + R"({"t":0,"type":"n","in":1,"input_length":1,"out":1}]})", "alias");
  ExpectError(kHead + R"({"t":5,"type":"n","in":1,"out":1},{"t":1,"type":"n","in":1,"out":1}]})",
              "starts before");
  ExpectError(R"({"id":"x","block_size":0,"hash_id_scope":"local","requests":[]})",
              "block_size: must be");
  ExpectError(R"({"id":"x","block_size":64,"hash_id_scope":"global","requests":[]})",
              "hash_id_scope");
  ExpectError(R"({"id":"x","block_size":64,"hash_id_scope":"local"})", "requests: missing");
  ExpectError(R"({"block_size":64,"hash_id_scope":"local","requests":[]})", "trace.id");
  ExpectError(kHead + R"({"t":0,"type":"n","in":1,"out":1},{"t":1,"type":"subagent","agent_id":"a",
      "requests":[{"t":1,"type":"subagent","agent_id":"b","requests":[]}]}]})",
              "subagent inside a subagent");
  ExpectError(kHead + R"({"t":0,"type":"n","in":1,"out":1},{"t":1,"type":"subagent","requests":[]}]})",
              "agent_id");
  ExpectError("[1,2]", "expected an object");
}

// Found by trace_fuzz: a number too large for a double threw out of the parser.
TEST(WekaTrace, RegressNumberOverflowIsAnError) {
  const std::string huge = "8" + std::string(400, '0');
  auto w = ParseWekaTrace(kHead + "{\"t\":" + huge + "}]}", "big.json");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("big.json:1: malformed JSON"), std::string::npos);
  auto m = ParseMooncakeTrace("{\"timestamp\":" + huge + "}\n", "big.jsonl");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
}

TEST(WekaTrace, LimitsAreEnforced) {
  TraceLimits l;
  l.max_tokens_per_request = 100;
  auto t = ParseWekaTrace(kWeka, "t.json", l);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("over the limit"), std::string::npos);
  l = {};
  l.max_requests = 2;
  EXPECT_FALSE(ParseWekaTrace(kWeka, "t.json", l).ok());
  l = {};
  l.max_file_bytes = 10;
  EXPECT_FALSE(ParseWekaTrace(kWeka, "t.json", l).ok());
}

TEST(WekaTrace, WriteRoundTripsExactly) {
  auto t = ParseWekaTrace(kWeka, "trace.json");
  ASSERT_TRUE(t.ok());
  auto back = ParseWekaTrace(WriteWekaTrace(*t), "again.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->conversations.size(), t->conversations.size());
  for (size_t c = 0; c < t->conversations.size(); ++c) {
    const auto& a = t->conversations[c];
    const auto& b = back->conversations[c];
    EXPECT_EQ(a.id, b.id);
    EXPECT_EQ(a.spawn_after, b.spawn_after);
    EXPECT_EQ(a.join_before, b.join_before);
    ASSERT_EQ(a.turns.size(), b.turns.size());
    for (size_t i = 0; i < a.turns.size(); ++i) {
      EXPECT_DOUBLE_EQ(a.turns[i].t_s, b.turns[i].t_s);
      EXPECT_EQ(a.turns[i].input_tokens, b.turns[i].input_tokens);
      EXPECT_EQ(a.turns[i].output_tokens, b.turns[i].output_tokens);
      EXPECT_EQ(a.turns[i].hash_ids, b.turns[i].hash_ids);
      EXPECT_DOUBLE_EQ(a.turns[i].api_time_s, b.turns[i].api_time_s);
      EXPECT_DOUBLE_EQ(a.turns[i].think_time_s, b.turns[i].think_time_s);
    }
  }
  EXPECT_EQ(WriteWekaTrace(*back), WriteWekaTrace(*t));
}

TEST(MooncakeTrace, ParsesRecordsAsIndependentSessions) {
  auto t = ParseMooncakeTrace(
      "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 5, \"hash_ids\": [0, 1]}\n"
      "\n"
      "{\"timestamp\": 1500.5, \"input_length\": 600, \"output_length\": 7, \"hash_ids\": [0, 2]}\n",
      "mc.jsonl");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->sessions_independent);
  EXPECT_EQ(t->block_size, 512u);
  ASSERT_EQ(t->conversations.size(), 2u);
  EXPECT_DOUBLE_EQ(t->conversations[1].turns[0].t_s, 1.5005);
  EXPECT_EQ(t->conversations[1].turns[0].line, 3u);
  EXPECT_EQ(t->conversations[1].turns[0].output_tokens, 7u);
}

TEST(MooncakeTrace, EachMalformedClassNamesItsLine) {
  auto err = [](const std::string& text, const std::string& needle) {
    auto t = ParseMooncakeTrace(text, "mc.jsonl");
    ASSERT_FALSE(t.ok()) << text;
    EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().message();
  };
  const std::string ok = "{\"timestamp\":0,\"input_length\":10,\"output_length\":1,\"hash_ids\":[1]}\n";
  err(ok + "{\"timestamp\":0,\"input_length\":10\n", "mc.jsonl:2:");
  err(ok + "{\"timestamp\":0,\"input_length\":10,\"output_length\":1,\"hash_ids\":[1],\"x\":1}",
      "mc.jsonl:2: record: unknown field 'x'");
  err("{\"timestamp\":0,\"output_length\":1,\"hash_ids\":[1]}", "input_length: missing");
  err("{\"timestamp\":0,\"input_length\":10,\"output_length\":1}", "hash_ids: missing");
  err("{\"timestamp\":-3,\"input_length\":10,\"output_length\":1,\"hash_ids\":[]}", "timestamp");
  err("{\"timestamp\":0,\"input_length\":600,\"output_length\":1,\"hash_ids\":[1,2,3]}",
      "at most 2 blocks");
  err("{\"timestamp\":0,\"input_length\":1,\"output_length\":1,\"hash_ids\":[1],\"session_id\":\"a\"}",
      "not supported");
  err("\n\n", "no records");
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kvsim-trace-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string Write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ + "/" + name) << text;
    return path_ + "/" + name;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(Corpus, DirectoryIsOneCorpusInNameOrder) {
  TempDir d;
  d.Write("b.json", kWeka);
  d.Write("a.jsonl", "{\"timestamp\":0,\"input_length\":10,\"output_length\":1,\"hash_ids\":[1]}\n");
  d.Write("c.jsonl", std::string(R"({"id":"l1","block_size":64,"hash_id_scope":"local","requests":[]})") +
                         "\n" + R"({"id":"l2","block_size":64,"hash_id_scope":"local","requests":[]})" +
                         "\n");
  d.Write("notes.txt", "ignored");
  auto c = LoadCorpus(d.path());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->traces.size(), 4u);
  EXPECT_EQ(c->traces[0].format, TraceFormat::kMooncake);
  EXPECT_EQ(c->traces[1].id, "trace_0001");
  EXPECT_EQ(c->traces[2].id, "l1");
  EXPECT_EQ(c->traces[3].id, "l2");
  EXPECT_EQ(c->requests(), 1u + 5u);
}

TEST(Corpus, BadPathsAndFilesAreRefused) {
  TempDir d;
  EXPECT_FALSE(LoadCorpus(d.path()).ok());  // empty directory
  EXPECT_EQ(LoadCorpus(d.path() + "/missing").status().code(), StatusCode::kNotFound);
  d.Write("x.jsonl", std::string(R"({"id":"l1","block_size":64,"hash_id_scope":"local","requests":[]})") +
                         "\n{\"id\":\"l2\"\n");
  auto c = LoadCorpus(d.path());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("x.jsonl:2:"), std::string::npos) << c.status().message();
}

Trace OneTrace(std::vector<TraceRequest> reqs, uint32_t bs = 64) {
  Trace t;
  t.id = "t";
  t.block_size = bs;
  Conversation c;
  c.turns = std::move(reqs);
  t.conversations.push_back(std::move(c));
  return t;
}

TraceRequest R(double t, uint64_t in, std::vector<uint64_t> ids, double api) {
  TraceRequest r;
  r.t_s = t;
  r.input_tokens = in;
  r.hash_ids = std::move(ids);
  r.api_time_s = api;
  return r;
}

TEST(TheoreticalHit, CausalLongestPrefixPerTrace) {
  Corpus c;
  c.traces.push_back(OneTrace({
      R(0, 200, {1, 2, 3}, 5),       // nothing cached
      R(2, 200, {1, 2, 3}, 1),       // the first is still running at t=2: no hit
      R(10, 300, {1, 2, 3, 4}, 1),   // 3 blocks available
      R(20, 300, {1, 9, 3, 4}, 1),   // only the first block: the prefix breaks at 9
  }));
  c.traces.push_back(OneTrace({R(0, 100, {1}, 1)}));  // another trace: its own scope
  auto h = ComputeTheoreticalHit(c);
  EXPECT_EQ(h.per_trace[0].hit_blocks, 0u + 0 + 3 + 1);
  EXPECT_EQ(h.per_trace[0].hit_tokens, 3u * 64 + 64);
  EXPECT_EQ(h.per_trace[0].input_tokens, 1000u);
  EXPECT_EQ(h.per_trace[0].total_blocks, 14u);
  EXPECT_EQ(h.per_trace[1].hit_blocks, 0u);
  EXPECT_EQ(h.total.hit_tokens, 256u);
  EXPECT_EQ(h.total.input_tokens, 1100u);
  EXPECT_NEAR(h.total.token_rate(), 256.0 / 1100, 1e-12);
}

TEST(TheoreticalHit, AHitIsCappedAtTheInput) {
  Corpus c;
  c.traces.push_back(OneTrace({R(0, 1024, {1, 2}, 0), R(1, 600, {1, 2}, 0)}, 512));
  auto h = ComputeTheoreticalHit(c);
  EXPECT_EQ(h.total.hit_tokens, 600u);  // 2 blocks of 512, but only 600 tokens of input
}

TEST(Synthetic, IsDeterministicAndCalibrated) {
  SyntheticOptions o;
  o.traces = 40;
  o.seed = 6;
  auto a = GenerateSyntheticCorpus(o);
  auto b = GenerateSyntheticCorpus(o);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(a->traces.size(), 40u);
  for (size_t i = 0; i < a->traces.size(); ++i) {
    EXPECT_EQ(WriteWekaTrace(a->traces[i]), WriteWekaTrace(b->traces[i]));
  }
  o.seed = 7;
  auto other = GenerateSyntheticCorpus(o);
  EXPECT_NE(WriteWekaTrace(other->traces[0]), WriteWekaTrace(a->traces[0]));
  // Published medians: ~45 turns, output ~216, think ~10 s; theoretical hit ~96 %.
  std::vector<double> turns, out, think;
  size_t with_subagents = 0;
  for (const Trace& t : a->traces) {
    turns.push_back(static_cast<double>(t.conversations[0].turns.size()));
    with_subagents += t.conversations.size() > 1;
    for (const auto& r : t.conversations[0].turns) {
      out.push_back(static_cast<double>(r.output_tokens));
      if (r.think_time_s >= 0) think.push_back(r.think_time_s);
      EXPECT_EQ(r.hash_ids.size(), r.input_tokens / 64);
    }
    auto again = ParseWekaTrace(WriteWekaTrace(t), "syn.json");
    ASSERT_TRUE(again.ok()) << again.status().ToString();
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  EXPECT_GT(median(turns), 25);
  EXPECT_LT(median(turns), 75);
  EXPECT_GT(median(out), 120);
  EXPECT_LT(median(out), 400);
  EXPECT_GT(median(think), 5);
  EXPECT_LT(median(think), 20);
  EXPECT_GT(with_subagents, 0u);
  auto h = ComputeTheoreticalHit(*a);
  EXPECT_GT(h.total.token_rate(), 0.9);
  EXPECT_LT(h.total.token_rate(), 0.99);
}

TEST(Synthetic, BadOptionsAreRefused) {
  SyntheticOptions o;
  o.traces = 0;
  EXPECT_FALSE(GenerateSyntheticCorpus(o).ok());
  o = {};
  o.scale = 0;
  EXPECT_FALSE(GenerateSyntheticCorpus(o).ok());
  o = {};
  o.subagent_fraction = 2;
  EXPECT_FALSE(GenerateSyntheticCorpus(o).ok());
}

}  // namespace
}  // namespace deltakv::kvsim
