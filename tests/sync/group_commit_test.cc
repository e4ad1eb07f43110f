// The etcd client and the group commit against a real etcd server started by the test
// (/usr/bin/etcd, Debian's etcd-server; the tests skip without it).
#include "coord/group_commit.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <thread>

#include "test_util.h"

namespace deltakv::sidecar {
namespace {

using namespace std::chrono_literals;

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

constexpr const char* kEtcd = "/usr/bin/etcd";

// One etcd member on loopback with its data in a temporary directory.
class EtcdServer {
 public:
  EtcdServer() {
    client_ = "http://127.0.0.1:" + std::to_string(FreePort());
    const std::string peer = "http://127.0.0.1:" + std::to_string(FreePort());
    pid_ = fork();
    if (pid_ == 0) {
      const std::string log = dir_ / "etcd.log";
      FILE* f = freopen(log.c_str(), "w", stderr);
      (void)f;
      execl(kEtcd, kEtcd, "--data-dir", (dir_ / "data").c_str(), "--listen-client-urls",
            client_.c_str(), "--advertise-client-urls", client_.c_str(), "--listen-peer-urls",
            peer.c_str(), "--initial-advertise-peer-urls", peer.c_str(), "--initial-cluster",
            ("default=" + peer).c_str(), nullptr);
      _exit(127);
    }
    auto c = EtcdClient::Create({{client_}, 500});
    for (int i = 0; i < 200 && c.ok(); ++i) {
      if ((*c)->Get("/probe").ok()) {
        up_ = true;
        break;
      }
      std::this_thread::sleep_for(50ms);
    }
  }
  ~EtcdServer() { Stop(); }
  void Stop() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  bool up() const { return up_; }
  const std::string& url() const { return client_; }

 private:
  testing::TempDir dir_;
  std::string client_;
  pid_t pid_ = -1;
  bool up_ = false;
};

#define REQUIRE_ETCD()                                                       \
  if (!std::filesystem::exists(kEtcd)) GTEST_SKIP() << "no " << kEtcd;       \
  EtcdServer etcd;                                                            \
  ASSERT_TRUE(etcd.up()) << "etcd did not start"

TEST(Base64, RoundTripsAndRefusesBadText) {
  for (std::string s : {std::string(""), std::string("f"), std::string("fo"), std::string("foo"),
                        std::string("foob"), std::string("\0\xff\x10", 3)}) {
    auto back = Base64Decode(Base64Encode(s));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, s);
  }
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");  // RFC 4648 section 10
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_FALSE(Base64Decode("Zm8").ok());
  EXPECT_FALSE(Base64Decode("Zm=8").ok());
  EXPECT_FALSE(Base64Decode("Z!8=").ok());
}

TEST(EtcdClient, RefusesBadEndpoints) {
  EXPECT_EQ(EtcdClient::Create({{}, 100}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EtcdClient::Create({{"https://x:1"}, 100}).status().code(),
            StatusCode::kInvalidArgument);
  for (const char* bad :
       {"http://x", "http://x:", "http://x:port", "http://:1", "http://x:123456"}) {
    EXPECT_EQ(EtcdClient::Create({{bad}, 100}).status().code(), StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_TRUE(EtcdClient::Create({{"http://[::1]:2379"}, 100}).ok());
  EXPECT_EQ(EtcdClient::Create({{"http://x:1/path"}, 100}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(EtcdClient, NoServerIsAnIoError) {
  auto c = EtcdClient::Create({{"http://127.0.0.1:" + std::to_string(FreePort())}, 300});
  ASSERT_TRUE(c.ok());
  auto r = (*c)->Get("/x");
  EXPECT_EQ(r.status().code(), StatusCode::kIoError) << r.status().ToString();
  EXPECT_NE(r.status().message().find("no endpoint answered"), std::string::npos);
}

TEST(EtcdClient, KeysTransactionsAndLeases) {
  REQUIRE_ETCD();
  // The first endpoint is dead: calls move on to the next.
  auto c = EtcdClient::Create(
      {{"http://127.0.0.1:" + std::to_string(FreePort()), etcd.url()}, 1000});
  ASSERT_TRUE(c.ok());
  EtcdClient& e = **c;
  auto missing = e.Get("/a/x");
  ASSERT_TRUE(missing.ok()) << missing.status().ToString();
  EXPECT_FALSE(missing->has_value());
  ASSERT_TRUE(e.Put("/a/x", std::string("one\0two", 7)).ok());
  ASSERT_TRUE(e.Put("/a/y", "2").ok());
  ASSERT_TRUE(e.Put("/b/z", "3").ok());
  auto got = e.Get("/a/x");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->value, std::string("one\0two", 7));
  auto list = e.List("/a/");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].key, "/a/x");
  EXPECT_EQ((*list)[1].key, "/a/y");
  // First writer wins.
  auto first = e.PutIfAbsent("/d", "commit");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->value, "commit");
  auto second = e.PutIfAbsent("/d", "abort");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->value, "commit");
  // Conditional on other keys.
  auto no = e.PutIfAbsentAndAllExist("/c", "v", {"/a/x", "/a/nope"});
  ASSERT_TRUE(no.ok());
  EXPECT_FALSE(*no);
  auto yes = e.PutIfAbsentAndAllExist("/c", "v", {"/a/x", "/a/y"});
  ASSERT_TRUE(yes.ok());
  EXPECT_TRUE(*yes);
  auto again = e.PutIfAbsentAndAllExist("/c", "w", {"/a/x"});
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
  ASSERT_TRUE(e.Delete("/a/y").ok());
  EXPECT_FALSE(e.Get("/a/y")->has_value());
  // Leases: keys go with a revoked lease; keep-alive of a dead lease is NotFound.
  auto lease = e.GrantLease(5);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_TRUE(e.Put("/l", "x", *lease).ok());
  EXPECT_TRUE(e.KeepAlive(*lease).ok());
  EXPECT_EQ((*e.Get("/l"))->lease, *lease);
  ASSERT_TRUE(e.RevokeLease(*lease).ok());
  EXPECT_FALSE(e.Get("/l")->has_value());
  EXPECT_EQ(e.KeepAlive(*lease).code(), StatusCode::kNotFound);
}

GroupOptions Options(const std::string& etcd, const std::string& node,
                     std::chrono::milliseconds prepare = 3000ms) {
  GroupOptions o;
  o.group = "g1";
  o.node = node;
  o.members = {"a", "b"};
  o.etcd = {{etcd}, 1000};
  o.prepare_timeout = prepare;
  o.in_doubt_timeout = 500ms;
  o.lease_ttl_s = 2;
  return o;
}

TEST(GroupCommit, RefusesBadOptions) {
  GroupOptions o = Options("http://127.0.0.1:1", "c");
  EXPECT_EQ(GroupCommit::Create(o).status().code(), StatusCode::kInvalidArgument);
  o.node = "a";
  o.group = "x/y";
  EXPECT_EQ(GroupCommit::Create(o).status().code(), StatusCode::kInvalidArgument);
  o.group = "g";
  o.members = {"a", "a"};
  EXPECT_EQ(GroupCommit::Create(o).status().code(), StatusCode::kInvalidArgument);
  o.members = {"a"};
  EXPECT_EQ(GroupCommit::Create(o).status().code(), StatusCode::kIoError);  // nothing there
}

TEST(GroupCommit, AllPreparedCommitsEverywhere) {
  REQUIRE_ETCD();
  auto a = GroupCommit::Create(Options(etcd.url(), "a"));
  auto b = GroupCommit::Create(Options(etcd.url(), "b"));
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
  auto live = (*a)->LiveMembers();
  ASSERT_TRUE(live.ok());
  EXPECT_EQ(*live, (std::vector<std::string>{"a", "b"}));
  auto key = (*a)->SyncKey("v2/x", "v1");
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(*key, "syncs/v2%2Fx@v1#0");
  auto fb = std::async(std::launch::async,
                       [&] { return (*b)->PrepareAndAwait(*key, "v2/x", "v1", "file:///d", 7); });
  std::this_thread::sleep_for(200ms);  // b waits for a
  auto da = (*a)->PrepareAndAwait(*key, "v2/x", "v1", "file:///d", 3);
  auto db = fb.get();
  ASSERT_TRUE(da.ok() && db.ok()) << da.status().ToString() << db.status().ToString();
  EXPECT_TRUE(da->commit);
  EXPECT_TRUE(db->commit);
  EXPECT_EQ(da->by, db->by);
  // A committed attempt is joined, not replaced: a late node meets under the same key.
  EXPECT_EQ(*(*b)->SyncKey("v2/x", "v1"), *key);
  // An abort cannot overturn it.
  auto ab = (*a)->Abort(*key, "late failure");
  ASSERT_TRUE(ab.ok());
  EXPECT_TRUE(ab->commit);
  // The COMMIT names the request and a commit point; `latest` points at it.
  EXPECT_EQ(da->version, "v2/x");
  EXPECT_EQ(da->parent, "v1");
  EXPECT_EQ(da->delta, "file:///d");
  EXPECT_GT(da->commit_at_unix_ns, static_cast<int64_t>(da->unix * 1e9));
  EXPECT_EQ(da->commit_at_unix_ns, db->commit_at_unix_ns);
  auto latest = (*a)->Latest();
  ASSERT_TRUE(latest.ok() && latest->has_value()) << latest.status().ToString();
  EXPECT_EQ((*latest)->key, *key);
  EXPECT_EQ((*latest)->version, "v2/x");
  EXPECT_EQ((*latest)->delta, "file:///d");
}

TEST(GroupCommit, PausesArePublishedAndTheViewWaitsOnlyForLiveMembers) {
  REQUIRE_ETCD();
  GroupOptions oa = Options(etcd.url(), "a");
  oa.report_timeout = 10s;
  auto a = GroupCommit::Create(oa);
  auto b = GroupCommit::Create(Options(etcd.url(), "b"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE((*a)->Latest()->has_value());  // nothing committed yet
  const std::string key = "syncs/v2@v1#0";
  ASSERT_TRUE((*a)->PublishPause(key, {"a", 1000, 5000000, 4.0}).ok());
  auto fb = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(150ms);
    return (*b)->PublishPause(key, {"b", 2000, 7000000, 6.0});
  });
  auto v = (*a)->AwaitPauses(key);
  ASSERT_TRUE(fb.get().ok());
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_EQ(v->nodes.size(), 2u);
  EXPECT_TRUE(v->missing.empty());
  EXPECT_DOUBLE_EQ(v->resume_skew_ms(), 2.0);
  // A member that is gone (no membership key) is not waited for.
  b->reset();
  ASSERT_TRUE((*a)->PublishPause("syncs/v3@v2#0", {"a", 1000, 2000, 0.5}).ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto v2 = (*a)->AwaitPauses("syncs/v3@v2#0");
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  ASSERT_EQ(v2->nodes.size(), 1u);
  EXPECT_EQ(v2->missing, (std::vector<std::string>{"b"}));
}

TEST(GroupCommit, ANodeThatFailsAbortsTheGroupAndTheRetryMovesOn) {
  REQUIRE_ETCD();
  auto a = GroupCommit::Create(Options(etcd.url(), "a"));
  auto b = GroupCommit::Create(Options(etcd.url(), "b"));
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string key = *(*a)->SyncKey("v2", "v1");
  auto fa = std::async(std::launch::async, [&] { return (*a)->PrepareAndAwait(key, "v2", "v1", "file:///d", 1); });
  std::this_thread::sleep_for(100ms);
  auto ab = (*b)->Abort(key, "node b: a corrupt frame in tensor 'w'");
  ASSERT_TRUE(ab.ok());
  EXPECT_FALSE(ab->commit);
  auto da = fa.get();
  ASSERT_TRUE(da.ok()) << da.status().ToString();
  EXPECT_FALSE(da->commit);
  EXPECT_EQ(da->by, "b");
  EXPECT_NE(da->reason.find("corrupt frame"), std::string::npos);
  EXPECT_EQ(*(*a)->SyncKey("v2", "v1"), "syncs/v2@v1#1");
}

TEST(GroupCommit, AMissingNodeTimesOutToAbort) {
  REQUIRE_ETCD();
  auto a = GroupCommit::Create(Options(etcd.url(), "a", 600ms));
  ASSERT_TRUE(a.ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto d = (*a)->PrepareAndAwait("syncs/v2@v1#0", "v2", "v1", "file:///d", 1);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->commit);
  EXPECT_NE(d->reason.find("missing: b"), std::string::npos) << d->reason;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST(GroupCommit, ANodeThatDiesAfterPreparingTakesItsPreparedWithIt) {
  REQUIRE_ETCD();
  auto a = GroupCommit::Create(Options(etcd.url(), "a", 800ms));
  auto raw = EtcdClient::Create({{etcd.url()}, 1000});
  ASSERT_TRUE(a.ok() && raw.ok());
  // Node b's PREPARED as b writes it, on b's lease.
  auto prepare_b = [&](const std::string& key) {
    auto lease = (*raw)->GrantLease(10);
    EXPECT_TRUE(lease.ok());
    EXPECT_TRUE((*raw)->Put("/deltakv/g1/" + key + "/prepared/b", "{}", *lease).ok());
    return *lease;
  };
  // b alive: a commits.
  prepare_b("syncs/v2@v1#0");
  auto d = (*a)->PrepareAndAwait("syncs/v2@v1#0", "v2", "v1", "file:///d", 1);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->commit);
  // b dies after preparing (its lease ends): the group cannot commit without it.
  int64_t lease = prepare_b("syncs/v3@v2#0");
  ASSERT_TRUE((*raw)->RevokeLease(lease).ok());
  d = (*a)->PrepareAndAwait("syncs/v3@v2#0", "v3", "v2", "file:///d", 2);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->commit);
  EXPECT_NE(d->reason.find("missing: b"), std::string::npos) << d->reason;
}

TEST(GroupCommit, EtcdGoneBeforeTheDecisionIsAnIoErrorAndNoCommit) {
  if (!std::filesystem::exists(kEtcd)) GTEST_SKIP() << "no " << kEtcd;
  auto etcd = std::make_unique<EtcdServer>();
  ASSERT_TRUE(etcd->up());
  auto a = GroupCommit::Create(Options(etcd->url(), "a", 400ms));
  ASSERT_TRUE(a.ok());
  etcd->Stop();
  auto d = (*a)->PrepareAndAwait("syncs/v2@v1#0", "v2", "v1", "file:///d", 1);
  EXPECT_EQ(d.status().code(), StatusCode::kIoError) << d.status().ToString();
  EXPECT_NE(d.status().message().find("decision is unknown"), std::string::npos);
}

}  // namespace
}  // namespace deltakv::sidecar
