// Tests of the trace parsers (kvsim/trace.h), the theoretical hit rate and the synthetic
// generator, on hand-written inputs.
#include "kvsim/trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <tuple>

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

const std::string kHead = R"({"id":"x","block_size":64,"hash_id_scope":"local","requests":[)";

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
  EXPECT_DOUBLE_EQ(sa.duration_ms, -1);  // null
  // Each record knows the line its object starts on.
  EXPECT_EQ(root[0].line, 3u);
  EXPECT_EQ(sa.turns[0].line, 8u);
  EXPECT_EQ(sa.turns[1].line, 9u);
  EXPECT_EQ(root[1].line, 10u);
  EXPECT_EQ(root[2].line, 11u);
}

TEST(WekaTrace, ErrorsNameTheLineOfTheirRecord) {
  std::string bad = kWeka;
  bad.replace(bad.find("\"in\":300"), 8, "\"in\":-30");
  auto t = ParseWekaTrace(bad, "trace.json");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("trace.json:10: trace.requests[2].in: expected an integer"),
            std::string::npos)
      << t.status().message();
  bad = kWeka;
  bad.replace(bad.find("\"ttft\":0.2"), 10, "\"ttft\":\"x\"");
  t = ParseWekaTrace(bad, "trace.json");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("trace.json:9: trace.requests[1].requests[1].ttft"),
            std::string::npos)
      << t.status().message();
  t = ParseWekaTrace(
      "{\"id\":\"x\",\n\"block_size\":0,\"hash_id_scope\":\"local\",\"requests\":[]}", "k.json");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("k.json:2: trace.block_size"), std::string::npos)
      << t.status().message();
  // An unknown top-level key names its own line.
  t = ParseWekaTrace(
      "{\"id\":\"x\",\n\"block_size\":64,\n\"hash_id_scope\":\"local\",\n\"requests\":[],\n"
      "\"colour\":1}",
      "u.json");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("u.json:5: trace: unknown field 'colour'"),
            std::string::npos)
      << t.status().message();
  // In a .jsonl file, lines count from the trace's own line.
  t = ParseWekaTrace(kHead + R"({"t":0,"type":"n","in":1}]})", "h.jsonl", {}, 7);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("h.jsonl:7: trace.requests[0].out: missing"),
            std::string::npos)
      << t.status().message();
}

// Subagent anchors: spawned by the root turn before the entry in the file, joined by the
// first later root turn that starts once the subagent has ended (duration_ms, else the end of
// its last request), background when none does; inner times relative when before the spawn.
TEST(WekaTrace, SubagentAnchorsAndTimes) {
  auto t = ParseWekaTrace(kHead + R"(
    {"t":0,"type":"n","in":64,"out":1,"hash_ids":[1],"api_time":1},
    {"t":1,"type":"subagent","agent_id":"short","requests":[
      {"t":0.5,"type":"n","in":1,"out":1,"api_time":2},
      {"t":1,"type":"n","in":1,"out":1,"api_time":1}]},
    {"t":1,"type":"subagent","agent_id":"long","duration_ms":15000,"requests":[
      {"t":2,"type":"n","in":1,"out":1}]},
    {"t":1,"type":"subagent","agent_id":"forever","duration_ms":99000,"requests":[]},
    {"t":4,"type":"n","in":64,"out":1,"hash_ids":[1]},
    {"t":16,"type":"n","in":64,"out":1,"hash_ids":[1]}]})",
                          "sa.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->conversations.size(), 4u);
  const Conversation& shrt = t->conversations[1];
  EXPECT_EQ(shrt.id, "x::sa:short");
  EXPECT_DOUBLE_EQ(shrt.turns[0].t_s, 1.5);  // relative: 0.5 < 1
  EXPECT_DOUBLE_EQ(shrt.turns[1].t_s, 1.0);  // t == spawn t: already absolute
  EXPECT_EQ(shrt.spawn_after, 0);
  EXPECT_EQ(shrt.join_before, 1);  // ends at 3.5, root turn 1 starts at 4
  const Conversation& lng = t->conversations[2];
  EXPECT_DOUBLE_EQ(lng.duration_ms, 15000);
  EXPECT_EQ(lng.join_before, 2);  // ends at 16: root turn 1 (t=4) runs on, turn 2 waits
  EXPECT_EQ(t->conversations[3].join_before, -1);  // ends at 100: background
  EXPECT_TRUE(t->conversations[3].turns.empty());
  // The writer keeps all of it.
  auto back = ParseWekaTrace(WriteWekaTrace(*t), "again.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  for (size_t c = 1; c < 4; ++c) {
    EXPECT_EQ(back->conversations[c].join_before, t->conversations[c].join_before);
    EXPECT_DOUBLE_EQ(back->conversations[c].duration_ms, t->conversations[c].duration_ms);
  }
  EXPECT_EQ(WriteWekaTrace(*back), WriteWekaTrace(*t));
}

TEST(WekaTrace, SubagentsWithoutARootTurnBeforeThemAreDropped) {
  // Before any root turn in the file (even with a later t), and in a trace with no root turn.
  auto t = ParseWekaTrace(kHead + R"(
    {"t":9,"type":"subagent","agent_id":"a","requests":[{"t":9,"type":"n","in":1,"out":1}]},
    {"t":2,"type":"n","in":64,"out":1,"hash_ids":[1]}]})",
                          "d.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->conversations.size(), 1u);
  t = ParseWekaTrace(kHead + R"(
    {"t":0,"type":"subagent","agent_id":"a","requests":[{"t":0,"type":"n","in":1,"out":1}]}]})",
                     "e.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->conversations.size(), 1u);
  EXPECT_TRUE(t->conversations[0].turns.empty());
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

TEST(WekaTrace, EachMalformedClassIsNamed) {
  ExpectError("{\"id\": \n \"x\",", "bad.json:2:");                       // syntax, with line
  ExpectError(kHead + "]" + ",\"colour\":1}", "unknown field 'colour'");  // unknown trace field
  ExpectError(kHead + R"({"t":0,"type":"n","in":1,"out":1,"speed":2}]})",
              "requests[0]: unknown field 'speed'");
  ExpectError(kHead + R"({"t":0,"type":"n","out":1}]})", "requests[0].in: missing");
  ExpectError(kHead + R"({"t":0,"type":"n","in":"7","out":1}]})", "requests[0].in: expected");
  ExpectError(kHead + R"({"t":-1,"type":"n","in":1,"out":1}]})",
              "requests[0].t: expected a finite");
  ExpectError(kHead + R"({"t":0,"type":"n","in":-5,"out":1}]})", "requests[0].in");
  ExpectError(kHead + R"({"t":0,"type":"x","in":1,"out":1}]})", "requests[0].type");
  ExpectError(kHead + R"({"t":0,"type":"n","in":128,"out":1,"hash_ids":[1,-2]}]})",
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
  ExpectError(
      kHead + R"({"t":0,"type":"n","in":1,"out":1},{"t":1,"type":"subagent","requests":[]}]})",
      "agent_id");
  ExpectError("[1,2]", "expected an object");
  ExpectError(kHead + R"({"t":NaN,"type":"n","in":1,"out":1}]})", "bad.json:1:");  // not JSON
  ExpectError(kHead + R"({"t":0,"type":"n","in":1,"out":1,"ttft":0.1}]})", "streaming");
  ExpectError(kHead + R"({"t":0,"type":"n","in":1.5,"out":1}]})", "requests[0].in: expected");
  ExpectError(kHead + R"({"t":0,"in":1,"out":1}]})", "requests[0].type: missing");
  ExpectError(kHead + "]" + ",\"totals\":[1]}", "trace.totals");
  ExpectError(kHead + "]" + ",\"models\":[1]}", "trace.models[0]");
  ExpectError(kHead + R"({"t":0,"type":"n","in":1,"out":1},{"t":1,"type":"subagent",
      "agent_id":"a","duration_ms":-4,"requests":[]}]})",
              "requests[1].duration_ms");
  ExpectError(kHead + R"({"t":0,"type":"n","in":1,"out":1},{"t":1,"type":"subagent",
      "agent_id":"a","requests":[{"t":1,"type":"n","in":1,"out":1,"zz":0}]}]})",
              "requests[1].requests[0]: unknown field 'zz'");
}

// Found by trace_fuzz: a number too large for a double threw out of the parser.
TEST(WekaTrace, RegressNumberOverflowIsAnError) {
  const std::string huge = "8" + std::string(400, '0');
  auto w = ParseWekaTrace(kHead + "{\"t\":" + huge + "}]}", "big.json");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("big.json:1:"), std::string::npos);
  EXPECT_NE(w.status().message().find(": malformed JSON"), std::string::npos);
  // The error names the number's own line and column, past lines that hold its digits
  // inside strings or longer numbers.
  const std::string spread = kHead + "{\"t\":1,\"type\":\"n\",\"in\":1,\"out\":1,\"x\":\"" +
                             huge + "\",\n\"y\":" + huge + "5,\n  \"z\":" + huge + "}]}";
  w = ParseWekaTrace(spread, "big.json");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("big.json:2:5: malformed JSON"), std::string::npos)
      << w.status().ToString();
  // docs/TRACES.md's example: a number on the third line of a Weka file.
  w = ParseWekaTrace(
      kHead + "\n{\"t\":0,\"type\":\"n\",\"in\":64,\"out\":1,\n \"api_time\":1e400}]}", "big.json");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("big.json:3:13: malformed JSON: "), std::string::npos)
      << w.status().ToString();
  EXPECT_NE(w.status().message().find("number overflow parsing '1e400'"), std::string::npos);
  auto m = ParseMooncakeTrace("{\"timestamp\":" + huge + "}\n", "big.jsonl");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
}

// More hash ids than the prompt has blocks were taken, and counted as blocks the request
// did not have.
TEST(WekaTrace, RegressHashIdsAreCheckedAgainstTheInput) {
  // As in Mooncake files: at most ceil(in / block_size), the last block possibly partial.
  ExpectError(kHead + R"({"t":0,"type":"n","in":64,"out":1,"hash_ids":[1,2,3,4,5,6,7,8,9,10]}]})",
              "bad.json:1: trace.requests[0].hash_ids: 10 ids for in 64 (at most 1 blocks of 64 "
              "tokens)");
  ExpectError(kHead + R"({"t":0,"type":"n","input_length":0,"out":1,"hash_ids":[1]}]})",
              "hash_ids: 1 ids for input_length 0 (at most 0 blocks");
  ExpectError(kHead + R"({"t":0,"type":"n","in":64,"out":1,"hash_ids":[1]},
      {"t":1,"type":"subagent","agent_id":"a","requests":[
      {"t":1,"type":"n","in":129,"out":1,"hash_ids":[1,2,3,4]}]}]})",
              "bad.json:3: trace.requests[1].requests[0].hash_ids: 4 ids for in 129 (at most 3");
  // Checked before the ids are read: a bad id past the limit is not what is reported.
  ExpectError(kHead + R"({"t":0,"type":"n","in":64,"out":1,"hash_ids":[1,-2]}]})", "2 ids for in");
  auto t = ParseWekaTrace(kHead + R"({"t":0,"type":"n","in":65,"out":1,"hash_ids":[1,2]},
      {"t":1,"type":"n","in":65,"out":1,"hash_ids":[1]}]})",
                          "ok.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->conversations[0].turns[0].hash_ids.size(), 2u);
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
      "{\"timestamp\": 1500.5, \"input_length\": 600, \"output_length\": 7, \"hash_ids\": [0, "
      "2]}\n",
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
  const std::string ok =
      "{\"timestamp\":0,\"input_length\":10,\"output_length\":1,\"hash_ids\":[1]}\n";
  err(ok + "{\"timestamp\":0,\"input_length\":10\n", "mc.jsonl:2:");
  err(ok + "{\"timestamp\":0,\"input_length\":10,\"output_length\":1,\"hash_ids\":[1],\"x\":1}",
      "mc.jsonl:2: record: unknown field 'x'");
  err("{\"timestamp\":0,\"output_length\":1,\"hash_ids\":[1]}", "input_length: missing");
  err("{\"timestamp\":0,\"input_length\":10,\"output_length\":1}", "hash_ids: missing");
  err("{\"timestamp\":-3,\"input_length\":10,\"output_length\":1,\"hash_ids\":[]}", "timestamp");
  err("{\"timestamp\":0,\"input_length\":600,\"output_length\":1,\"hash_ids\":[1,2,3]}",
      "at most 2 blocks");
  err("{\"timestamp\":0,\"input_length\":1,\"output_length\":1,\"hash_ids\":[1],\"session_id\":"
      "\"a\"}",
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
  d.Write("a.jsonl",
          "{\"timestamp\":0,\"input_length\":10,\"output_length\":1,\"hash_ids\":[1]}\n");
  d.Write("c.jsonl",
          std::string(R"({"id":"l1","block_size":64,"hash_id_scope":"local","requests":[]})") +
              "\n" + R"({"id":"l2","block_size":64,"hash_id_scope":"local","requests":[]})" + "\n");
  d.Write("d.json", "{\"timestamp\":0,\"input_length\":10,\"output_length\":1,\"hash_ids\":[1]}");
  d.Write("notes.txt", "ignored");
  auto c = LoadCorpus(d.path());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->traces[0].format, TraceFormat::kMooncake);
  EXPECT_EQ(c->traces[1].id, "trace_0001");
  EXPECT_EQ(c->traces[2].id, "l1");
  EXPECT_EQ(c->traces[3].id, "l2");
  ASSERT_EQ(c->traces.size(), 5u);  // a one-line Mooncake file named .json
  EXPECT_EQ(c->traces[4].format, TraceFormat::kMooncake);
  EXPECT_EQ(c->requests(), 1u + 5u + 1u);
}

TEST(Corpus, BadPathsAndFilesAreRefused) {
  TempDir d;
  EXPECT_FALSE(LoadCorpus(d.path()).ok());  // empty directory
  EXPECT_EQ(LoadCorpus(d.path() + "/missing").status().code(), StatusCode::kNotFound);
  d.Write("x.jsonl",
          std::string(R"({"id":"l1","block_size":64,"hash_id_scope":"local","requests":[]})") +
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
      R(0, 200, {1, 2, 3}, 5),      // nothing cached
      R(2, 200, {1, 2, 3}, 1),      // the first is still running at t=2: no hit
      R(10, 300, {1, 2, 3, 4}, 1),  // 3 blocks available
      R(20, 300, {1, 9, 3, 4}, 1),  // only the first block: the prefix breaks at 9
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

TEST(TheoreticalHit, TiesAreInFileOrder) {
  // At t = 5 the subagent (after root turn 0 in the file) comes before root turn 1, so the
  // root turn finds the subagent's block 2; no api_time: blocks count from their arrival.
  auto t = ParseWekaTrace(kHead + R"(
    {"t":0,"type":"n","in":64,"out":1,"hash_ids":[1]},
    {"t":1,"type":"subagent","agent_id":"a","requests":[{"t":5,"type":"n","in":128,"out":1,"hash_ids":[1,2]}]},
    {"t":5,"type":"n","in":192,"out":1,"hash_ids":[1,2,3]}]})",
                          "ties.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  Corpus c;
  c.traces.push_back(*t);
  for (Availability a : {Availability::kCausal, Availability::kArrival}) {
    const auto h = ComputeTheoreticalHit(c, a);
    EXPECT_EQ(h.total.hit_blocks, 0u + 1 + 2);
    EXPECT_EQ(h.total.total_blocks, 6u);
    EXPECT_EQ(h.total.hit_tokens, 192u);
    EXPECT_EQ(h.total.input_tokens, 384u);
  }
}

TEST(TheoreticalHit, ArrivalCountsRunningProducers) {
  Corpus c;
  c.traces.push_back(OneTrace({R(0, 200, {1, 2, 3}, 5), R(2, 200, {1, 2, 3}, 1)}));
  EXPECT_EQ(ComputeTheoreticalHit(c, Availability::kCausal).total.hit_blocks, 0u);
  EXPECT_EQ(ComputeTheoreticalHit(c, Availability::kArrival).total.hit_blocks, 3u);
  // A later, faster producer makes a block available earlier (the minimum end counts).
  c.traces[0] = OneTrace({R(0, 64, {1}, 100), R(1, 64, {1}, 1), R(3, 64, {1}, 1)});
  EXPECT_EQ(ComputeTheoreticalHit(c).total.hit_blocks, 1u);
  EXPECT_EQ(ComputeTheoreticalHit(Corpus{}).total.token_rate(), 0.0);
}

TEST(TheoreticalHit, MooncakeFileIsOneScope) {
  auto t = ParseMooncakeTrace(
      "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 1, \"hash_ids\": [1, 2]}\n"
      "{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 1, \"hash_ids\": [1, 2]}\n"
      "{\"timestamp\": 1, \"input_length\": 1500, \"output_length\": 1, \"hash_ids\": [1, 3, 4]}\n",
      "mc.jsonl");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  Corpus c;
  c.traces.push_back(*t);
  const auto h = ComputeTheoreticalHit(c);
  EXPECT_EQ(h.total.hit_blocks, 0u + 2 + 1);
  EXPECT_EQ(h.total.total_blocks, 7u);
  EXPECT_EQ(h.total.hit_tokens, 0u + 600 + 512);
  EXPECT_EQ(h.total.input_tokens, 3124u);
}

uint64_t Fnv1a(std::string_view s, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

template <typename T>
double Quantile(std::vector<T> v, double q) {
  std::sort(v.begin(), v.end());
  return static_cast<double>(v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))]);
}

TEST(Synthetic, IsDeterministic) {
  SyntheticOptions o;
  o.traces = 6;
  o.seed = 42;
  o.scale = 0.05;
  o.subagent_fraction = 0.5;
  auto a = GenerateSyntheticCorpus(o);
  auto b = GenerateSyntheticCorpus(o);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < a->traces.size(); ++i) {
    const std::string text = WriteWekaTrace(a->traces[i]);
    EXPECT_EQ(text, WriteWekaTrace(b->traces[i]));
    EXPECT_EQ(a->traces[i].id, "trace_000" + std::to_string(i));
    h = Fnv1a(text, h);
    // What it generates is what a parser reads back, subagent anchors included.
    auto again = ParseWekaTrace(text, a->traces[i].file);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    ASSERT_EQ(again->conversations.size(), a->traces[i].conversations.size());
    for (size_t c = 1; c < again->conversations.size(); ++c) {
      EXPECT_EQ(again->conversations[c].spawn_after, a->traces[i].conversations[c].spawn_after);
      EXPECT_EQ(again->conversations[c].join_before, a->traces[i].conversations[c].join_before);
    }
    EXPECT_EQ(WriteWekaTrace(*again), text);
  }
  // The golden digest of these six traces: a change here changes every generated corpus.
  EXPECT_EQ(h, 0x0e754b81d5ca0b87ull) << std::hex << h;
  o.seed = 43;
  EXPECT_NE(WriteWekaTrace(GenerateSyntheticCorpus(o)->traces[0]), WriteWekaTrace(a->traces[0]));
}

// Subagents of small-scale traces (the subagents' conversations were appended while the root
// turns were still in use through a reference into the same vector): every setting generates,
// and what it generates parses back with the same anchors.
TEST(Synthetic, SubagentsAtEveryScale) {
  for (const auto& [traces, seed, scale, fraction] :
       std::vector<std::tuple<uint32_t, uint64_t, double, double>>{
           {2, 2, 0.01, 0.5}, {5, 2, 0.02, 0.5}, {5, 2, 0.05, 0.5}, {8, 3, 1.0, 1.0}}) {
    SyntheticOptions o;
    o.traces = traces;
    o.seed = seed;
    o.scale = scale;
    o.subagent_fraction = fraction;
    auto a = GenerateSyntheticCorpus(o);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    for (const Trace& t : a->traces) {
      auto again = ParseWekaTrace(WriteWekaTrace(t), t.file);
      ASSERT_TRUE(again.ok()) << again.status().ToString();
      ASSERT_EQ(again->conversations.size(), t.conversations.size());
      for (size_t c = 1; c < t.conversations.size(); ++c) {
        EXPECT_EQ(again->conversations[c].join_before, t.conversations[c].join_before);
      }
    }
  }
}

// Measured against the published statistics of the kv-cache-tester v8 corpus (docs/TRACES.md).
TEST(Synthetic, IsCalibrated) {
  SyntheticOptions o;
  o.traces = 60;
  o.seed = 6;
  auto a = GenerateSyntheticCorpus(o);
  ASSERT_TRUE(a.ok());
  std::vector<uint64_t> turns, first, out, fresh;
  std::vector<double> think, api;
  size_t with_subagents = 0, changes = 0, partial = 0, resumed = 0;
  for (const Trace& t : a->traces) {
    const auto& root = t.conversations[0].turns;
    turns.push_back(root.size());
    first.push_back(root[0].input_tokens);
    resumed += root[0].input_tokens > 80000;
    with_subagents += t.conversations.size() > 1;
    for (size_t i = 0; i < root.size(); ++i) {
      const TraceRequest& r = root[i];
      EXPECT_EQ(r.hash_ids.size(), r.input_tokens / 64);
      out.push_back(r.output_tokens);
      api.push_back(r.api_time_s);
      if (i == 0) continue;
      think.push_back(r.think_time_s);
      const auto& p = root[i - 1].hash_ids;
      size_t l = 0;
      while (l < p.size() && l < r.hash_ids.size() && p[l] == r.hash_ids[l]) ++l;
      ++changes;
      partial += l < p.size();
      fresh.push_back(r.input_tokens - std::min<uint64_t>(r.input_tokens, l * 64));
    }
  }
  EXPECT_NEAR(Quantile(turns, 0.5), 45, 12);
  EXPECT_NEAR(Quantile(first, 0.25), 19000, 4000);
  EXPECT_GT(resumed, a->traces.size() / 5);  // bimodal: ~38 % resumed
  EXPECT_LT(resumed, a->traces.size() / 2);
  EXPECT_NEAR(Quantile(fresh, 0.5), 705, 150);
  EXPECT_NEAR(Quantile(fresh, 0.9), 4077, 1200);
  EXPECT_NEAR(Quantile(out, 0.5), 216, 30);
  EXPECT_NEAR(Quantile(out, 0.9), 899, 150);
  EXPECT_NEAR(Quantile(think, 0.5), 10, 2);
  EXPECT_NEAR(Quantile(think, 0.9), 160, 40);
  EXPECT_NEAR(Quantile(api, 0.5), 6.1, 1.0);
  EXPECT_NEAR(static_cast<double>(partial) / changes, 0.069, 0.02);
  EXPECT_GT(with_subagents, 0u);
  const auto h = ComputeTheoreticalHit(*a);
  EXPECT_NEAR(h.total.token_rate(), 0.965, 0.015);
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
  o = {};
  o.max_input_tokens = 100;
  EXPECT_FALSE(GenerateSyntheticCorpus(o).ok());
  o = {};
  o.max_turns = 2;
  EXPECT_FALSE(GenerateSyntheticCorpus(o).ok());
}

}  // namespace
}  // namespace deltakv::kvsim
