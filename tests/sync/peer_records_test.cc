// The peer protocol's request and etcd records: round trips, and clear errors for bad JSON and
// missing or mistyped fields; sync keys and peer URLs.
#include "coord/peer_records.h"

#include <gtest/gtest.h>

namespace deltakv::sidecar {
namespace {

void ExpectError(const Status& s, StatusCode code, const char* words) {
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
}

TEST(PeerRecords, PrepareRoundTrips) {
  PeerPrepare p{"syncs/v2%2Fx@v1#3", "v2/x", "file:///deltas/d12", 3};
  auto back = ParsePeerPrepare(PeerPrepareToJson(p));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->sync_key, p.sync_key);
  EXPECT_EQ(back->version, "v2/x");
  EXPECT_EQ(back->delta, "file:///deltas/d12");
  EXPECT_EQ(back->attempt, 3);
}

TEST(PeerRecords, BadPreparesAreRejectedWithTheField) {
  const StatusCode kBad = StatusCode::kInvalidArgument;
  ExpectError(ParsePeerPrepare("{").status(), kBad, "not a JSON object");
  ExpectError(ParsePeerPrepare("[1]").status(), kBad, "not a JSON object");
  ExpectError(ParsePeerPrepare(R"({"version":"v2","delta":"d","attempt":0})").status(), kBad,
              "'sync_key' is missing");
  ExpectError(
      ParsePeerPrepare(R"({"sync_key":"syncs/v2@v1#0","version":2,"delta":"d","attempt":0})")
          .status(),
      kBad, "'version' is not a string");
  ExpectError(
      ParsePeerPrepare(R"({"sync_key":"syncs/v2@v1#0","version":"v2","attempt":0})").status(), kBad,
      "'delta' is missing");
  ExpectError(
      ParsePeerPrepare(R"({"sync_key":"syncs/v2@v1#0","version":"v2","delta":"d"})").status(), kBad,
      "'attempt' is missing");
  ExpectError(
      ParsePeerPrepare(R"({"sync_key":"syncs/v2@v1#0","version":"v2","delta":"d","attempt":-1})")
          .status(),
      kBad, "'attempt' is not a non-negative integer");
  ExpectError(
      ParsePeerPrepare(R"({"sync_key":"syncs/v2@v1#0","version":"v2","delta":"d","attempt":1})")
          .status(),
      kBad, "is not the sync key's (0)");
  ExpectError(
      ParsePeerPrepare(R"({"sync_key":"v2@v1#0","version":"v2","delta":"d","attempt":0})").status(),
      kBad, "is not syncs/<version>@<parent>#<attempt>");
  ExpectError(
      ParsePeerPrepare(R"({"sync_key":"syncs/v2@v1#0","version":"","delta":"d","attempt":0})")
          .status(),
      kBad, "empty");
}

TEST(PeerRecords, SyncKeyAttempt) {
  EXPECT_EQ(SyncKeyAttempt("syncs/v2@v1#0").value(), 0);
  EXPECT_EQ(SyncKeyAttempt("syncs/v%23@v1#12").value(), 12);
  for (const char* bad :
       {"syncs/v2@v1#", "syncs/v2@v1", "syncs/@v1#0", "syncs/v2@v1#x", "v2@v1#0", "syncs/v2v1#0"}) {
    EXPECT_FALSE(SyncKeyAttempt(bad).ok()) << bad;
  }
}

TEST(PeerRecords, MemberAndCoordinatorRoundTrip) {
  auto m = ParseMember(MemberToJson({"a", 42, 1.5, "http://10.0.0.1:8470"}));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->node, "a");
  EXPECT_EQ(m->pid, 42);
  EXPECT_EQ(m->peer_url, "http://10.0.0.1:8470");
  // A record written before peer URLs existed: no URL.
  auto old = ParseMember(R"({"node":"b","pid":7,"started_unix":2.5})");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->peer_url, "");
  ExpectError(ParseMember("nope").status(), StatusCode::kDataLoss, "member record");
  ExpectError(ParseMember(R"({"pid":1})").status(), StatusCode::kDataLoss, "'node' is missing");
  ExpectError(ParseMember(R"({"node":"a","peer_url":5})").status(), StatusCode::kDataLoss,
              "'peer_url' is not a string");

  auto c = ParseCoordinator(CoordinatorToJson({"a", "http://h:1", 3.0}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->node, "a");
  EXPECT_EQ(c->peer_url, "http://h:1");
  ExpectError(ParseCoordinator("{}").status(), StatusCode::kDataLoss, "'node' is missing");
}

TEST(PeerRecords, PeerUrls) {
  auto a = ParsePeerUrl("http://10.0.0.7:8470");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->host, "10.0.0.7");
  EXPECT_EQ(a->port, 8470);
  EXPECT_EQ(ParsePeerUrl("http://node-b.example:1/").value().host, "node-b.example");
  // An IPv6 address in brackets, as URLs write it: the host is the bare address.
  auto v6 = ParsePeerUrl("http://[fd00::7]:8470");
  ASSERT_TRUE(v6.ok()) << v6.status().ToString();
  EXPECT_EQ(v6->host, "fd00::7");
  EXPECT_EQ(v6->port, 8470);
  for (const char* bad :
       {"https://a:1", "http://a", "http://:80", "http://a:0", "http://a:65536", "http://a:80/path",
        "a:80", "http://a:8x", "http://[]:80", "http://[::1:80", "http://::1]:80",
        "http://[[::1]]:80", "http://[::1]x:80"}) {
    EXPECT_FALSE(ParsePeerUrl(bad).ok()) << bad;
  }
}

TEST(PeerRecords, UrlPathEscape) {
  EXPECT_EQ(UrlPathEscape("syncs/v2%2Fx@v1#0"), "syncs%2Fv2%252Fx%40v1%230");
}

}  // namespace
}  // namespace deltakv::sidecar
