// The HTTP/HTTPS object store (store/open_store.h) against a real local server:
// tests/store/object_server.py, run with Python, whose CA and certificates are made with the
// openssl CLI when it starts. The store cases run over http:// and over https:// (verified
// with the test CA); the TLS cases check which certificates are refused.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "store/http_volume_store.h"
#include "store/open_store.h"
#include "test_util.h"

namespace deltakv::sidecar {
namespace {

using deltakv::testing::ReadAll;
using deltakv::testing::TempDir;
using deltakv::testing::WriteAll;
using Clock = std::chrono::steady_clock;

// The object server, shared by every test of this process.
struct ObjectServer {
  std::unique_ptr<TempDir> dir;
  pid_t pid = -1;
  int http_port = 0;
  int https_port = 0;
  int wrong_host_port = 0;  // https, certificate for another host name, signed by the test CA
  std::string ca;           // the test CA
  std::string other_ca;     // a CA that signed nothing the server shows
  std::string blob;         // served as <mode>/blob
};

ObjectServer& Server() {
  static ObjectServer server;
  return server;
}

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  uint32_t x = 12345;
  for (char& c : s) {
    x = x * 1103515245u + 12345u;
    c = static_cast<char>(x >> 23);
  }
  return s;
}

class ObjectServerEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    // Loopback only: a proxy named in the environment must not get in the way.
    for (const char* v : {"http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"}) {
      unsetenv(v);
    }
    ObjectServer& s = Server();
    s.dir = std::make_unique<TempDir>();
    std::filesystem::create_directories(*s.dir / "root");
    s.blob = Pattern(300000);
    WriteAll(*s.dir / "root/blob", s.blob);
    const std::string root = *s.dir / "root";
    const std::string certs = *s.dir / "certs";
    const std::string ready = *s.dir / "ready.json";
    s.pid = fork();
    if (s.pid == 0) {
      execl(DELTAKV_TEST_PYTHON, DELTAKV_TEST_PYTHON, DELTAKV_TEST_OBJECT_SERVER, "--root",
            root.c_str(), "--certs", certs.c_str(), "--ready", ready.c_str(), nullptr);
      _exit(127);
    }
    ASSERT_GT(s.pid, 0);
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (!std::filesystem::exists(ready)) {
      int status = 0;
      if (waitpid(s.pid, &status, WNOHANG) == s.pid) {
        s.pid = -1;
        FAIL() << "object server exited (status " << status << "); its stderr is above";
      }
      ASSERT_LT(Clock::now(), deadline) << "object server did not start";
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    nlohmann::json j = nlohmann::json::parse(ReadAll(ready));
    s.http_port = j["http"].get<int>();
    s.https_port = j["https"].get<int>();
    s.wrong_host_port = j["https_wrong_host"].get<int>();
    s.ca = j["ca"].get<std::string>();
    s.other_ca = j["other_ca"].get<std::string>();
  }

  void TearDown() override {
    ObjectServer& s = Server();
    if (s.pid > 0) {
      kill(s.pid, SIGTERM);
      deltakv::testing::WaitExit(s.pid);
    }
    s.dir.reset();
  }
};

[[maybe_unused]] ::testing::Environment* const kObjectServer =
    ::testing::AddGlobalTestEnvironment(new ObjectServerEnvironment);

::testing::AssertionResult Fails(const Status& s, StatusCode code, const std::string& text) {
  if (s.ok()) return ::testing::AssertionFailure() << "succeeded";
  if (s.code() != code) {
    return ::testing::AssertionFailure() << "code " << StatusCodeName(s.code()) << ", wanted "
                                         << StatusCodeName(code) << ": " << s.message();
  }
  if (s.message().find(text) == std::string::npos) {
    return ::testing::AssertionFailure() << "message without '" << text << "': " << s.message();
  }
  return ::testing::AssertionSuccess();
}

std::unique_ptr<deltasync::ObjectStore> MustOpen(const std::string& location,
                                                 const HttpStoreOptions& options) {
  auto store = OpenStore(location, options);
  if (!store.ok()) throw std::runtime_error(location + ": " + store.status().ToString());
  return std::move(store).value();
}

std::string HttpsLocation(int port, const std::string& mode, const std::string& host) {
  return "https://" + host + ":" + std::to_string(port) + "/" + mode;
}

// A port on 127.0.0.1 with nothing listening.
int ClosedPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// ---------------------------------------------------------------------------------------------
// The store over http:// and https://.

class HttpStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  bool https() const { return GetParam() == "https"; }
  const std::string& blob() const { return Server().blob; }

  std::string Location(const std::string& mode) const {
    int port = https() ? Server().https_port : Server().http_port;
    return GetParam() + "://127.0.0.1:" + std::to_string(port) + "/" + mode;
  }

  HttpStoreOptions Options() const {
    HttpStoreOptions o;
    o.attempts = 3;
    o.initial_backoff_ms = 10;
    o.timeout_seconds = 10;
    if (https()) o.ca_file = Server().ca;
    return o;
  }

  std::unique_ptr<deltasync::ObjectStore> Open(const std::string& mode) const {
    return MustOpen(Location(mode), Options());
  }

  // How many requests the server has had for /<mode>/<name>.
  int Count(const std::string& mode, const std::string& name) const {
    auto n = Open("_count/" + mode)->ReadObject(name, 64);
    return n.ok() ? std::stoi(*n) : -1;
  }
};

TEST_P(HttpStoreTest, ReadsSizesRangesAndWholeObjects) {
  auto store = Open("plain");
  EXPECT_EQ(store->Describe(), Location("plain"));
  EXPECT_EQ(MustOpen(Location("plain") + "//", Options())->Describe(), Location("plain"));
  auto size = store->Size("blob");
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_EQ(*size, blob().size());
  const std::vector<std::pair<uint64_t, uint64_t>> ranges = {
      {0, 1}, {1000, 5000}, {blob().size() - 7, 7}, {0, blob().size()}};
  for (auto [offset, length] : ranges) {
    auto r = store->ReadRange("blob", offset, length);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(*r, blob().substr(offset, length)) << offset << "+" << length;
  }
  auto empty = store->ReadRange("blob", 5, 0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, "");
  auto all = store->ReadObject("blob", blob().size());  // exactly at the cap
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(*all, blob());
  EXPECT_TRUE(Fails(store->ReadObject("../blob", 1 << 20).status(), StatusCode::kInvalidArgument,
                    "unsafe object name"));
}

TEST_P(HttpStoreTest, ServerThatIgnoresRange) {
  auto store = Open("norange");
  auto r = store->ReadRange("blob", 12345, 1000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, blob().substr(12345, 1000));
  r = store->ReadRange("blob", blob().size() - 10, 10);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, blob().substr(blob().size() - 10));
  EXPECT_TRUE(Fails(store->ReadRange("blob", blob().size() - 10, 20).status(),
                    StatusCode::kDataLoss, "truncated"));
}

TEST_P(HttpStoreTest, RangePastTheEndIsDataLoss) {
  auto store = Open("plain");
  Status s = store->ReadRange("blob", blob().size() - 10, 20).status();
  EXPECT_TRUE(Fails(s, StatusCode::kDataLoss, "truncated"));
  EXPECT_TRUE(Fails(s, StatusCode::kDataLoss, Location("plain") + "/blob"));
  EXPECT_TRUE(Fails(store->ReadRange("blob", blob().size() + 5, 10).status(), StatusCode::kDataLoss,
                    "truncated"));
}

TEST_P(HttpStoreTest, MissingObjectIsNotFound) {
  auto store = Open("plain");
  const std::string url = Location("plain") + "/missing";
  EXPECT_TRUE(Fails(store->Size("missing").status(), StatusCode::kNotFound, url));
  EXPECT_TRUE(Fails(store->ReadRange("missing", 0, 10).status(), StatusCode::kNotFound, "404"));
  EXPECT_TRUE(Fails(store->ReadObject("missing", 10).status(), StatusCode::kNotFound, url));
  EXPECT_EQ(Count("plain", "missing"), 3);  // one request each: no retries
}

TEST_P(HttpStoreTest, ServerErrorsAreRetried) {
  auto all = Open("flaky-2")->ReadObject("blob", 1 << 20);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(*all, blob());
  EXPECT_EQ(Count("flaky-2", "blob"), 3);
  auto range = Open("flaky-1")->ReadRange("blob", 7, 70);
  ASSERT_TRUE(range.ok()) << range.status().ToString();
  EXPECT_EQ(*range, blob().substr(7, 70));
}

TEST_P(HttpStoreTest, GivesUpAfterTheLastTry) {
  Status s = Open("status-503")->ReadObject("blob", 1 << 20).status();
  EXPECT_TRUE(Fails(s, StatusCode::kIoError, Location("status-503") + "/blob: HTTP 503"));
  EXPECT_TRUE(Fails(s, StatusCode::kIoError, "after 3 tries"));
  EXPECT_EQ(Count("status-503", "blob"), 3);
}

TEST_P(HttpStoreTest, ClientErrorsAreNotRetried) {
  Status s = Open("status-403")->ReadRange("blob", 0, 10).status();
  EXPECT_TRUE(Fails(s, StatusCode::kIoError, Location("status-403") + "/blob: HTTP 403"));
  EXPECT_EQ(Count("status-403", "blob"), 1);
  EXPECT_TRUE(Fails(Open("status-302")->Size("blob").status(), StatusCode::kIoError,
                    "redirects are not followed"));
}

TEST_P(HttpStoreTest, CapStopsTheTransfer) {
  Status s = Open("plain")->ReadObject("blob", blob().size() - 1).status();
  EXPECT_TRUE(Fails(s, StatusCode::kResourceExhausted, Location("plain") + "/blob"));
  // No Content-Length and no end: only stopping at the cap makes this return.
  const auto t0 = Clock::now();
  s = Open("endless")->ReadObject("blob", 1 << 20).status();
  EXPECT_TRUE(Fails(s, StatusCode::kResourceExhausted, "larger than 1048576 bytes"));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(20));
}

TEST_P(HttpStoreTest, TruncatedBodyIsDataLoss) {
  auto store = Open("truncate");
  Status s = store->ReadObject("blob", 1 << 20).status();
  EXPECT_TRUE(Fails(s, StatusCode::kDataLoss, "truncated"));
  EXPECT_TRUE(Fails(s, StatusCode::kDataLoss, Location("truncate") + "/blob"));
  EXPECT_EQ(Count("truncate", "blob"), 3);  // a cut connection is worth another try
  EXPECT_TRUE(
      Fails(store->ReadRange("blob", 1000, 2000).status(), StatusCode::kDataLoss, "truncated"));
  auto size = store->Size("blob");
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_EQ(*size, blob().size());
}

TEST_P(HttpStoreTest, StalledServerFails) {
  HttpStoreOptions o = Options();
  o.timeout_seconds = 1;
  o.attempts = 2;
  auto store = MustOpen(Location("stall"), o);
  const auto t0 = Clock::now();
  Status s = store->ReadObject("blob", 1 << 20).status();
  EXPECT_TRUE(Fails(s, StatusCode::kIoError, Location("stall") + "/blob"));
  EXPECT_TRUE(Fails(s, StatusCode::kIoError, "after 2 tries"));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(20));
  EXPECT_EQ(Count("stall", "blob"), 2);
}

TEST_P(HttpStoreTest, ManyThreadsShareOneStore) {
  auto store = Open("plain");
  std::vector<std::thread> threads;
  std::vector<int> wrong(8, 0);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      std::mt19937_64 rng(static_cast<uint64_t>(i));
      for (int k = 0; k < 20; ++k) {
        uint64_t offset = rng() % blob().size();
        uint64_t length = 1 + rng() % std::min<uint64_t>(blob().size() - offset, 40000);
        auto r = store->ReadRange("blob", offset, length);
        if (!r.ok() || *r != blob().substr(offset, length)) ++wrong[static_cast<size_t>(i)];
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(wrong[static_cast<size_t>(i)], 0) << "thread " << i;
}

TEST_P(HttpStoreTest, CredentialsStayOutOfMessages) {
  const std::string location = Location("status-403");
  const std::string scheme = GetParam() + "://";
  const std::string with_secret = scheme + "reader:s3cr3t-token@" + location.substr(scheme.size());
  auto store = MustOpen(with_secret, Options());
  EXPECT_EQ(store->Describe(), scheme + "***@" + location.substr(scheme.size()));
  Status s = store->ReadObject("blob", 100).status();
  EXPECT_TRUE(Fails(s, StatusCode::kIoError, "HTTP 403"));
  EXPECT_EQ(s.message().find("s3cr3t"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("reader"), std::string::npos) << s.message();
}

INSTANTIATE_TEST_SUITE_P(Schemes, HttpStoreTest, ::testing::Values("http", "https"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// ---------------------------------------------------------------------------------------------
// TLS: which certificates are refused.

HttpStoreOptions TlsOptions(const std::string& ca_file) {
  HttpStoreOptions o;
  o.attempts = 3;
  o.initial_backoff_ms = 2000;  // a retry would show in the elapsed time
  o.timeout_seconds = 10;
  o.ca_file = ca_file;
  return o;
}

TEST(HttpsStoreTest, HostNameInTheCertificate) {
  auto store =
      MustOpen(HttpsLocation(Server().https_port, "plain", "localhost"), TlsOptions(Server().ca));
  auto r = store->ReadRange("blob", 10, 10);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, Server().blob.substr(10, 10));
}

TEST(HttpsStoreTest, CertificateFromAnotherCaIsRefused) {
  const std::string location = HttpsLocation(Server().https_port, "plain", "127.0.0.1");
  auto store = MustOpen(location, TlsOptions(Server().other_ca));
  const auto t0 = Clock::now();
  Status s = store->ReadObject("blob", 1 << 20).status();
  EXPECT_TRUE(Fails(s, StatusCode::kIoError, location + "/blob: TLS: the server's certificate"));
  EXPECT_TRUE(Fails(s, StatusCode::kIoError, Server().other_ca));
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(1500));  // not retried
}

TEST(HttpsStoreTest, UnknownCaIsRefusedByDefault) {
  auto store = MustOpen(HttpsLocation(Server().https_port, "plain", "127.0.0.1"), TlsOptions(""));
  Status s = store->Size("blob").status();
  EXPECT_TRUE(Fails(s, StatusCode::kIoError, "certificate"));
  EXPECT_TRUE(Fails(s, StatusCode::kIoError, "system CA store"));
}

TEST(HttpsStoreTest, CertificateForAnotherHostIsRefused) {
  auto store = MustOpen(HttpsLocation(Server().wrong_host_port, "plain", "127.0.0.1"),
                        TlsOptions(Server().ca));
  Status s = store->ReadRange("blob", 0, 10).status();
  EXPECT_TRUE(Fails(s, StatusCode::kIoError, "certificate"));
  EXPECT_TRUE(Fails(s, StatusCode::kIoError, "127.0.0.1"));
}

TEST(HttpsStoreTest, HttpDoesNotSpeakToAnHttpsServer) {
  HttpStoreOptions o = TlsOptions("");
  o.attempts = 1;
  auto store = MustOpen("http://127.0.0.1:" + std::to_string(Server().https_port) + "/plain", o);
  EXPECT_FALSE(store->Size("blob").ok());
}

// ---------------------------------------------------------------------------------------------
// Locations.

TEST(OpenStoreTest, RefusedLocations) {
  for (const char* location : {"ftp://host/x", "relative/dir", "", "http:///p",
                               "https://host/a b", "https://:443/p"}) {
    EXPECT_TRUE(Fails(OpenStore(location).status(), StatusCode::kInvalidArgument, "location"))
        << location;
  }
  // s3:// is a store (s3_object_store.h); a bucket name S3 would refuse is refused here.
  EXPECT_TRUE(Fails(OpenStore("s3://Bad_Bucket/x").status(), StatusCode::kInvalidArgument,
                    "bucket"));
  Status s = OpenStore("https://host/deltas?signature=SECRETSIG").status();
  EXPECT_TRUE(Fails(s, StatusCode::kInvalidArgument, "'https://host/deltas...' has a query"));
  EXPECT_EQ(s.message().find("SECRETSIG"), std::string::npos) << s.message();
  s = OpenStore("ftp://user:hunter2@host/x").status();
  EXPECT_TRUE(Fails(s, StatusCode::kInvalidArgument, "'ftp://***@host/x'"));
  EXPECT_EQ(s.message().find("hunter2"), std::string::npos) << s.message();
  HttpStoreOptions o;
  o.ca_file = "/nonexistent/ca.pem";
  EXPECT_TRUE(Fails(OpenStore("https://host/x", o).status(), StatusCode::kInvalidArgument,
                    "HTTP CA file '/nonexistent/ca.pem'"));
}

TEST(OpenStoreTest, MessagesNameTheLocationsRole) {
  EXPECT_TRUE(Fails(OpenStore("https://host/deltas?x=1").status(), StatusCode::kInvalidArgument,
                    "delta location 'https://host/deltas...' has a query"));
  EXPECT_TRUE(Fails(
      OpenStore("https://host/ckpt?x=1", {}, "", VolumeView::kFiles, "checkpoint location")
          .status(),
      StatusCode::kInvalidArgument, "checkpoint location 'https://host/ckpt...' has a query"));
  EXPECT_TRUE(Fails(
      OpenStore("vol://ns/name:tag", {}, "", VolumeView::kFiles, "checkpoint location").status(),
      StatusCode::kFailedPrecondition, "checkpoint location 'vol://ns/name:tag'"));
  EXPECT_TRUE(Fails(OpenHttpVolumeStore("http://host/vols?x", {}).status(),
                    StatusCode::kInvalidArgument, "volume store 'http://host/vols...'"));
}

TEST(OpenStoreTest, DirectoriesStillWork) {
  TempDir dir;
  WriteAll(dir / "manifest.json", "{}");
  for (const std::string& location : {dir.path(), "file://" + dir.path()}) {
    auto store = OpenStore(location);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto m = (*store)->ReadObject("manifest.json", 100);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(*m, "{}");
  }
}

TEST(OpenStoreTest, ConnectionRefusedIsRetriedThenIoError) {
  HttpStoreOptions o;
  o.attempts = 3;
  o.initial_backoff_ms = 10;
  const std::string location = "http://127.0.0.1:" + std::to_string(ClosedPort()) + "/d";
  Status s = MustOpen(location, o)->ReadObject("manifest.json", 100).status();
  EXPECT_TRUE(Fails(s, StatusCode::kIoError, location + "/manifest.json: "));
  EXPECT_TRUE(Fails(s, StatusCode::kIoError, "after 3 tries"));
}

TEST(RedactCredentials, EveryUrlInAMessage) {
  EXPECT_EQ(RedactCredentials("checkpoint 'http://user:pw@h:1/c' has no manifest.json"),
            "checkpoint 'http://***@h:1/c' has no manifest.json");
  EXPECT_EQ(RedactCredentials("a https://u:p@h/x?sig=abc b s3://k:s@bucket c"),
            "a https://***@h/x... b s3://***@bucket c");
  EXPECT_EQ(RedactCredentials("\"http://h/p#frag\" and http://h:8/q"),
            "\"http://h/p...\" and http://h:8/q");
  // Nothing to hide: paths, volume digests, an '@' in a path, plain text.
  for (const char* same : {"/data/d12 missing", "vol://ns/name@sha256:ab not found",
                           "http://h/a@b", "no url here", "://", "x://@"}) {
    EXPECT_EQ(RedactCredentials(same), same);
  }
  EXPECT_EQ(RedactCredentials("http://u:p@h"), "http://***@h");
}

}  // namespace
}  // namespace deltakv::sidecar
