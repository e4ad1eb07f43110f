// Messages: round trips of every type, exact little-endian bytes, and every malformed input.
#include "shm/messages.h"

#include <gtest/gtest.h>

#include <random>

namespace deltakv::shm {
namespace {

std::vector<uint8_t> Encode(const Message& m) {
  StatusOr<std::vector<uint8_t>> bytes = EncodeMessage(m);
  EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
  return bytes.ok() ? *bytes : std::vector<uint8_t>{};
}

Message RoundTrip(const Message& m) {
  StatusOr<Message> back = DecodeMessage(Encode(m));
  EXPECT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->type, m.type);
  EXPECT_EQ(back->sync_id, m.sync_id);
  EXPECT_EQ(back->payload, m.payload);
  return *back;
}

void PutU32(std::vector<uint8_t>* b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) (*b)[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

// A raw message with the given header fields and payload.
std::vector<uint8_t> Raw(uint32_t type, uint64_t sync_id, std::vector<uint8_t> payload) {
  std::vector<uint8_t> b(16);
  PutU32(&b, 0, type);
  PutU32(&b, 4, static_cast<uint32_t>(payload.size()));
  for (int i = 0; i < 8; ++i) b[8 + i] = static_cast<uint8_t>(sync_id >> (8 * i));
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

void ExpectRejected(const std::vector<uint8_t>& bytes, std::string_view fragment) {
  StatusOr<Message> m = DecodeMessage(bytes);
  ASSERT_FALSE(m.ok()) << "accepted; expected an error containing '" << fragment << "'";
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find(fragment), std::string::npos) << m.status().message();
}

TEST(MessagesTest, PlanRoundTripAndExactBytes) {
  Message m = MakePlan(0x0102030405060708ull, {"arena-1", 0x1122334455667788ull}).value();
  const std::vector<uint8_t> expected = {
      3,    0,    0,    0,                             // type kPlan
      23,   0,    0,    0,                             // payload length
      0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,  // sync id
      0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,  // generation
      7,    0,    0,    0,    0,    0,    0,    0,     // name length, flags
      'a',  'r',  'e',  'n',  'a',  '-',  '1'};
  EXPECT_EQ(Encode(m), expected);
  PlanRef plan = ParsePlan(RoundTrip(m)).value();
  EXPECT_EQ(plan.arena_name, "arena-1");
  EXPECT_EQ(plan.generation, 0x1122334455667788ull);
  EXPECT_FALSE(plan.more());
  PlanRef more = ParsePlan(RoundTrip(MakePlan(1, {"arena-2", 9, kPlanMore}).value())).value();
  EXPECT_TRUE(more.more());
  EXPECT_EQ(MakePlan(1, {"arena-2", 9, 2}).status().code(), StatusCode::kInvalidArgument);
}

TEST(MessagesTest, StagedRoundTrip) {
  StagedReport report;
  report.part_index = 1;
  report.part_count = 3;
  report.changed_bytes = 123456789012ull;
  report.entries = {{0, 1, 2, 0}, {7, 65520, 65520, StagedEntry::kFullChecksum}, {99, 0, 0, 0}};
  Message m = MakeStaged(42, report).value();
  EXPECT_EQ(m.payload.size(), kStagedHeaderBytes + 3 * kStagedEntryBytes);
  StagedReport back = ParseStaged(RoundTrip(m)).value();
  EXPECT_EQ(back.part_index, 1u);
  EXPECT_EQ(back.part_count, 3u);
  EXPECT_EQ(back.changed_bytes, 123456789012ull);
  EXPECT_EQ(back.entries, report.entries);

  StagedReport empty;
  EXPECT_TRUE(ParseStaged(RoundTrip(MakeStaged(1, empty).value())).value().entries.empty());
}

TEST(MessagesTest, OtherTypesRoundTrip) {
  EXPECT_EQ(ParseNonce(RoundTrip(MakePing(77))).value(), 77u);
  EXPECT_EQ(ParseNonce(RoundTrip(MakePong(~uint64_t{0}))).value(), ~uint64_t{0});
  EXPECT_TRUE(RoundTrip(MakeCommit(9)).payload.empty());
  CommittedReport c = ParseCommitted(RoundTrip(MakeCommitted(9, {17, 830000}))).value();
  EXPECT_EQ(c.live_version, 17u);
  EXPECT_EQ(c.pause_us, 830000u);
  c = ParseCommitted(RoundTrip(MakeCommitted(9, {17, 830000, 1700000000123456789, 1700000000953456789})))
          .value();
  EXPECT_EQ(c.pause_start_unix_ns, 1700000000123456789);
  EXPECT_EQ(c.resume_unix_ns, 1700000000953456789);
  // The 16-byte form (no pause times) is still accepted; other sizes are not.
  Message old{MessageType::kCommitted, 9, std::vector<uint8_t>(16, 0)};
  old.payload[0] = 17;
  c = ParseCommitted(RoundTrip(old)).value();
  EXPECT_EQ(c.live_version, 17u);
  EXPECT_EQ(c.pause_start_unix_ns, 0);
  Message odd{MessageType::kCommitted, 9, std::vector<uint8_t>(24, 0)};
  EXPECT_FALSE(ParseCommitted(odd).ok());
  for (MessageType t : {MessageType::kAbort, MessageType::kAborted, MessageType::kError}) {
    EXPECT_EQ(ParseText(RoundTrip(MakeText(t, 5, "rank 3 died").value())).value(), "rank 3 died");
    EXPECT_EQ(ParseText(RoundTrip(MakeText(t, 5, "").value())).value(), "");
  }
  EXPECT_EQ(ParseText(RoundTrip(MakeError(1, "x").value())).value(), "x");
  // Long text is cut to the limit, never rejected by the builder.
  Message long_text = MakeText(MessageType::kError, 1, std::string(10000, 'e')).value();
  EXPECT_EQ(long_text.payload.size(), kMaxMessageText);
  RoundTrip(long_text);
}

TEST(MessagesTest, RejectsMalformedHeaders) {
  ExpectRejected({}, "shorter than its 16-byte header");
  ExpectRejected(std::vector<uint8_t>(15), "shorter than its 16-byte header");
  ExpectRejected(Raw(0, 1, {}), "unknown message type 0");
  ExpectRejected(Raw(12, 1, {}), "unknown message type 12");
  ExpectRejected(Raw(0xFFFFFFFF, 1, {}), "unknown message type");

  std::vector<uint8_t> longer = Raw(5, 1, {});
  PutU32(&longer, 4, 4);  // claims 4 payload bytes, has none
  ExpectRejected(longer, "disagrees");
  std::vector<uint8_t> trailing = Raw(5, 1, {});
  trailing.push_back(0);  // one byte more than the header says
  ExpectRejected(trailing, "disagrees");
  std::vector<uint8_t> huge = Raw(9, 1, {});
  PutU32(&huge, 4, 0xFFFFFFFF);
  ExpectRejected(huge, "exceeds");
}

TEST(MessagesTest, RejectsMalformedFixedSizePayloads) {
  ExpectRejected(Raw(1, 0, std::vector<uint8_t>(7)), "expected 8");
  ExpectRejected(Raw(2, 0, std::vector<uint8_t>(9)), "expected 8");
  ExpectRejected(Raw(5, 1, {0}), "expected 0");
  ExpectRejected(Raw(7, 1, std::vector<uint8_t>(15)), "expected 16");
  ExpectRejected(Raw(9, 1, std::vector<uint8_t>(kMaxMessageText + 1, 'x')), "exceeds 4096");
  ExpectRejected(Raw(6, 1, std::vector<uint8_t>(kMaxMessageText + 1, 'x')), "exceeds 4096");
}

TEST(MessagesTest, RejectsMalformedPlans) {
  const std::vector<uint8_t> good = Encode(MakePlan(1, {"a-b", 5}).value());
  ASSERT_TRUE(DecodeMessage(good).ok());
  std::vector<uint8_t> payload(good.begin() + 16, good.end());

  ExpectRejected(Raw(3, 1, std::vector<uint8_t>(15)), "shorter than its 16-byte fixed part");
  std::vector<uint8_t> p = payload;
  p[12] = 2;
  ExpectRejected(Raw(3, 1, p), "unknown flag bits 2");
  p = payload;
  p[8] = 4;  // name length 4, 3 bytes follow
  ExpectRejected(Raw(3, 1, p), "name length 4");
  p = payload;
  p[8] = 2;
  ExpectRejected(Raw(3, 1, p), "name length 2");
  p = payload;
  p[8] = 0;
  p.resize(16);
  ExpectRejected(Raw(3, 1, p), "arena name");
  p = payload;
  p[17] = '/';
  ExpectRejected(Raw(3, 1, p), "arena name");
  p = payload;
  p[16] = '.';
  ExpectRejected(Raw(3, 1, p), "arena name");
  EXPECT_EQ(MakePlan(1, {"bad/name", 1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakePlan(1, {"", 1}).status().code(), StatusCode::kInvalidArgument);
}

TEST(MessagesTest, RejectsMalformedStagedReports) {
  StagedReport report;
  report.entries = {{1, 2, 3, 0}, {4, 5, 6, 0}};
  const std::vector<uint8_t> good = Encode(MakeStaged(1, report).value());
  std::vector<uint8_t> payload(good.begin() + 16, good.end());

  ExpectRejected(Raw(4, 1, std::vector<uint8_t>(23)), "shorter than its 24-byte header");
  std::vector<uint8_t> p = payload;
  PutU32(&p, 12, 1);
  ExpectRejected(Raw(4, 1, p), "reserved field not zero");
  p = payload;
  PutU32(&p, 8, 0);  // part_count 0
  ExpectRejected(Raw(4, 1, p), "part 0 of 0");
  p = payload;
  PutU32(&p, 4, 1);  // part_index 1 of 1
  ExpectRejected(Raw(4, 1, p), "part 1 of 1");
  p = payload;
  PutU32(&p, 0, 3);  // 3 entries claimed, 2 present
  ExpectRejected(Raw(4, 1, p), "3 entries need 48 bytes, have 32");
  p = payload;
  PutU32(&p, 0, 0xFFFFFFFF);  // a count whose byte size overflows 32 bits
  ExpectRejected(Raw(4, 1, p), "entries need");
  p = payload;
  p.pop_back();  // a partial entry
  ExpectRejected(Raw(4, 1, p), "entries need");
  p = payload;
  PutU32(&p, 24 + 4, 65521);  // s1 of entry 0
  ExpectRejected(Raw(4, 1, p), "not reduced mod 65521");
  p = payload;
  PutU32(&p, 40 + 8, 70000);  // s2 of entry 1
  ExpectRejected(Raw(4, 1, p), "entry 1");
  p = payload;
  PutU32(&p, 24 + 12, 2);  // unknown flag bit
  ExpectRejected(Raw(4, 1, p), "unknown flags 0x00000002");

  StagedReport bad;
  bad.entries = {{0, 65521, 0, 0}};
  EXPECT_EQ(MakeStaged(1, bad).status().code(), StatusCode::kInvalidArgument);
  bad.entries.assign(kMaxStagedEntries + 1, StagedEntry{});
  EXPECT_EQ(MakeStaged(1, bad).status().code(), StatusCode::kInvalidArgument);
  bad.entries.assign(kMaxStagedEntries, StagedEntry{});
  EXPECT_TRUE(MakeStaged(1, bad).ok());
  StagedReport bad_part;
  bad_part.part_index = 2;
  bad_part.part_count = 2;
  EXPECT_EQ(MakeStaged(1, bad_part).status().code(), StatusCode::kInvalidArgument);
}

TEST(MessagesTest, VerifyRoundTripAndExactBytes) {
  Message m = MakeVerify(42, {kVerifyScrub, 3'000'000'000ull});
  std::vector<uint8_t> bytes = Encode(m);
  ASSERT_EQ(bytes.size(), 16u + kVerifyPayloadBytes);
  EXPECT_EQ(bytes[0], 10);  // type VERIFY
  EXPECT_EQ(bytes[16], 1);  // flags
  EXPECT_EQ(bytes[20], 0);  // reserved
  Message back = RoundTrip(m);
  VerifyRequest r = ParseVerify(back).value();
  EXPECT_EQ(r.flags, kVerifyScrub);
  EXPECT_EQ(r.rate_bytes_per_s, 3'000'000'000ull);
  EXPECT_EQ(MessageTypeName(MessageType::kVerify), "VERIFY");
  EXPECT_EQ(MessageTypeName(MessageType::kVerified), "VERIFIED");

  std::vector<uint8_t> payload(bytes.begin() + 16, bytes.end());
  ExpectRejected(Raw(10, 1, std::vector<uint8_t>(15)), "payload is 15 bytes, expected 16");
  std::vector<uint8_t> p = payload;
  PutU32(&p, 0, 2);  // unknown flag
  ExpectRejected(Raw(10, 1, p), "unknown flag bits");
  p = payload;
  PutU32(&p, 4, 1);  // reserved
  ExpectRejected(Raw(10, 1, p), "reserved");
}

TEST(MessagesTest, VerifiedRoundTripAndEntryKinds) {
  StagedReport report;
  report.part_index = 1;
  report.part_count = 3;
  report.changed_bytes = 1ull << 40;  // bytes read
  report.entries = {{0, 1, 2, VerifiedEntry::Flags(VerifiedEntry::kOwned)},
                    {0, 3, 4, VerifiedEntry::Flags(VerifiedEntry::kReplica)},
                    {7, 5, 6, VerifiedEntry::Flags(VerifiedEntry::kReplicaRef, 65535)}};
  Message back = RoundTrip(MakeVerified(9, report).value());
  EXPECT_EQ(back.type, MessageType::kVerified);
  StagedReport got = ParseVerified(back).value();
  EXPECT_EQ(got.entries, report.entries);
  EXPECT_EQ(got.changed_bytes, report.changed_bytes);
  EXPECT_EQ(VerifiedEntry::Holder(got.entries[2].flags), 65535u);
  EXPECT_EQ(VerifiedEntry::Kind(got.entries[2].flags), VerifiedEntry::kReplicaRef);
  // A VERIFIED is not a STAGED: each parser refuses the other.
  EXPECT_FALSE(ParseStaged(back).ok());

  const std::vector<uint8_t> good = Encode(MakeVerified(9, report).value());
  std::vector<uint8_t> payload(good.begin() + 16, good.end());
  std::vector<uint8_t> p = payload;
  PutU32(&p, 24 + 12, 3);  // kind 3 does not exist
  ExpectRejected(Raw(11, 1, p), "verified message: entry 0: unknown flags 0x00000003");
  p = payload;
  PutU32(&p, 24 + 12, 4);  // bit 2 is reserved
  ExpectRejected(Raw(11, 1, p), "unknown flags 0x00000004");
  p = payload;
  PutU32(&p, 40 + 12, VerifiedEntry::Flags(VerifiedEntry::kReplica) | (5u << 16));
  ExpectRejected(Raw(11, 1, p), "entry 1: unknown flags");  // a holder on a non-ref entry
  p = payload;
  PutU32(&p, 24 + 4, 65521);
  ExpectRejected(Raw(11, 1, p), "not reduced mod 65521");
  // STAGED keeps its own flag rules: the VERIFIED kinds are not STAGED flags.
  StagedReport staged;
  staged.entries = {{0, 1, 2, VerifiedEntry::Flags(VerifiedEntry::kReplicaRef, 1)}};
  EXPECT_EQ(MakeStaged(1, staged).status().code(), StatusCode::kInvalidArgument);
}

TEST(MessagesTest, TypedParsersCheckTypeAndPayload) {
  Message ping = MakePing(1);
  EXPECT_EQ(ParsePlan(ping).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseStaged(ping).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCommitted(ping).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseText(ping).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseNonce(MakeCommit(1)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeText(MessageType::kPing, 1, "x").status().code(), StatusCode::kInvalidArgument);

  // Hand-built messages with broken payloads are caught by the parsers and by the encoder.
  Message broken{MessageType::kCommitted, 1, {1, 2, 3}};
  EXPECT_EQ(ParseCommitted(broken).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeMessage(broken).status().code(), StatusCode::kInvalidArgument);
  Message unknown{static_cast<MessageType>(42), 1, {}};
  EXPECT_EQ(EncodeMessage(unknown).status().code(), StatusCode::kInvalidArgument);
  Message plan{MessageType::kPlan, 1, std::vector<uint8_t>(16)};
  EXPECT_EQ(ParsePlan(plan).status().code(), StatusCode::kInvalidArgument);
}

// Mutated and truncated valid messages either decode or fail cleanly; never crash.
TEST(MessagesTest, RandomCorruptionNeverCrashes) {
  StagedReport report;
  report.entries = {{1, 2, 3, 0}, {4, 5, 6, 1}};
  std::vector<std::vector<uint8_t>> seeds = {
      Encode(MakePlan(1, {"arena", 2}).value()), Encode(MakeStaged(3, report).value()),
      Encode(MakeCommitted(4, {5, 6})), Encode(MakeText(MessageType::kAbort, 7, "why").value()),
      Encode(MakePing(8))};
  std::mt19937_64 rng(2024);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> b = seeds[rng() % seeds.size()];
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 3) {
        case 0:
          if (!b.empty()) b[rng() % b.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
          break;
        case 1:
          if (!b.empty()) b.resize(rng() % b.size());
          break;
        default:
          b.push_back(static_cast<uint8_t>(rng()));
      }
    }
    StatusOr<Message> m = DecodeMessage(b);
    if (m.ok()) {
      ++accepted;
      // Whatever decodes re-encodes to the same bytes.
      EXPECT_EQ(EncodeMessage(*m).value(), b);
    } else {
      EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
    }
  }
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace deltakv::shm
