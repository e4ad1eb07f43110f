// The S3 volume store against real S3-API servers on loopback: moto's S3 server (from the venv
// that scripts/setup-deps.sh makes; the tests skip with a message without it), moto with
// signature checking on, and a stub that recomputes every signature with botocore
// (s3_helper.py).
#include "store/s3_volume_store.h"

#include <curl/curl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "store/open_volume_store.h"
#include "store/s3_object_store.h"
#include "store/s3_config.h"
#include "test_util.h"

namespace deltakv::sidecar {
namespace {

using deltakv::testing::ReadAll;
using deltakv::testing::TempDir;
using deltakv::testing::WriteAll;
using Clock = std::chrono::steady_clock;

std::string MotoPython() {
  const char* venv = std::getenv("DELTAKV_MOTO_VENV");
  std::string dir = venv != nullptr ? venv
                                    : std::string(std::getenv("HOME") ? std::getenv("HOME") : "") +
                                          "/.cache/deltakv-venvs/moto";
  return dir + "/bin/python";
}

bool HaveMoto() { return std::filesystem::exists(MotoPython()); }

// One s3_helper.py server process; stopped with SIGTERM on destruction.
class Helper {
 public:
  Helper(const std::string& mode, bool auth) {
    for (const char* v : {"http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"}) {
      unsetenv(v);
    }
    const std::string ready = dir_ / "ready.json";
    const std::string python = MotoPython();
    pid_ = fork();
    if (pid_ == 0) {
      if (auth) {
        execl(python.c_str(), python.c_str(), DELTAKV_TEST_S3_HELPER, mode.c_str(), "--ready",
              ready.c_str(), "--auth", nullptr);
      } else {
        execl(python.c_str(), python.c_str(), DELTAKV_TEST_S3_HELPER, mode.c_str(), "--ready",
              ready.c_str(), nullptr);
      }
      _exit(127);
    }
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (!std::filesystem::exists(ready)) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      if (Clock::now() > deadline) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    info_ = nlohmann::json::parse(ReadAll(ready));
  }
  ~Helper() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      deltakv::testing::WaitExit(pid_);
    }
  }
  bool ok() const { return info_.contains("port"); }
  // "http://127.0.0.1:PORT"; another host name for virtual-hosted addressing ("localhost":
  // curl resolves BUCKET.localhost to loopback itself).
  std::string endpoint(const std::string& host = "127.0.0.1") const {
    return "http://" + host + ":" + std::to_string(info_["port"].get<int>());
  }
  const nlohmann::json& info() const { return info_; }

 private:
  TempDir dir_;
  pid_t pid_ = -1;
  nlohmann::json info_;
};

S3Config Config(const std::string& endpoint, std::string key = "testing",
                std::string secret = "testing") {
  S3Config c;
  c.endpoint = endpoint;
  c.region = "us-east-1";
  c.access_key_id = std::move(key);
  c.secret_access_key = std::move(secret);
  c.path_style = true;
  c.credential_source = "the test";
  return c;
}

std::unique_ptr<deltasync::VolumeStore> MustMake(const std::string& url, S3Config config,
                                                 S3StoreOptions opt = {}) {
  auto where = ParseS3Url(url);
  EXPECT_TRUE(where.ok()) << where.status().ToString();
  auto store = MakeS3VolumeStore(*where, std::move(config), opt);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return std::move(*store);
}

// moto without signature checks accepts a bare PUT /bucket as CreateBucket.
void CreateBucket(const std::string& endpoint, const std::string& bucket) {
  CURL* c = curl_easy_init();
  const std::string url = endpoint + "/" + bucket;
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "PUT");
  curl_easy_setopt(
      c, CURLOPT_WRITEFUNCTION, +[](char*, size_t s, size_t n, void*) { return s * n; });
  ASSERT_EQ(curl_easy_perform(c), CURLE_OK);
  long code = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_cleanup(c);
  ASSERT_EQ(code, 200) << url;
}

// The body of an unsigned GET (the helpers' /__ endpoints).
std::string Fetch(const std::string& url) {
  std::string body;
  CURL* c = curl_easy_init();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(
      c, CURLOPT_WRITEFUNCTION, +[](char* p, size_t s, size_t n, void* out) {
        static_cast<std::string*>(out)->append(p, s * n);
        return s * n;
      });
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
  EXPECT_EQ(curl_easy_perform(c), CURLE_OK) << url;
  curl_easy_cleanup(c);
  return body;
}

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

::testing::AssertionResult Fails(const Status& s, StatusCode code, const std::string& text) {
  if (s.ok()) return ::testing::AssertionFailure() << "succeeded";
  if (s.code() != code) return ::testing::AssertionFailure() << "wrong code: " << s.ToString();
  if (s.message().find(text) == std::string::npos) {
    return ::testing::AssertionFailure() << "'" << text << "' not in: " << s.ToString();
  }
  return ::testing::AssertionSuccess();
}

// The moto server shared by the S3StoreTest tests (each test makes its own bucket), started
// on first use and stopped when the tests end.
std::unique_ptr<Helper>& MotoSlot() {
  static std::unique_ptr<Helper> moto;
  return moto;
}
Helper* Moto() {
  if (!MotoSlot()) MotoSlot() = std::make_unique<Helper>("moto", false);
  return MotoSlot().get();
}
class StopMoto : public ::testing::Environment {
 public:
  void TearDown() override { MotoSlot().reset(); }
};
[[maybe_unused]] ::testing::Environment* const kStopMoto =
    ::testing::AddGlobalTestEnvironment(new StopMoto);

class S3StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveMoto()) {
      GTEST_SKIP() << "no moto venv at " << MotoPython()
                   << " (scripts/setup-deps.sh makes it; DELTAKV_MOTO_VENV names another)";
    }
    ASSERT_TRUE(Moto()->ok()) << "moto server did not start";
    static std::atomic<int> n{0};
    bucket_ = "test-" + std::to_string(getpid()) + "-" + std::to_string(n++);
    CreateBucket(Moto()->endpoint(), bucket_);
  }
  std::unique_ptr<deltasync::VolumeStore> Store(const std::string& prefix = "",
                                                S3StoreOptions opt = {}) {
    return MustMake("s3://" + bucket_ + prefix, Config(Moto()->endpoint()), opt);
  }
  std::string bucket_;
};

TEST(S3UrlTest, ParsesBucketAndPrefix) {
  auto a = ParseS3Url("s3://my-bucket.x/a/b/");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->bucket, "my-bucket.x");
  EXPECT_EQ(a->prefix, "a/b");
  auto b = ParseS3Url("s3://bkt");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->prefix, "");
  EXPECT_TRUE(Fails(ParseS3Url("s3://Bk").status(), StatusCode::kInvalidArgument, "bucket"));
  EXPECT_TRUE(Fails(ParseS3Url("s3://bkt/a//b").status(), StatusCode::kInvalidArgument, "empty"));
  EXPECT_TRUE(
      Fails(ParseS3Url("s3://bkt/a b").status(), StatusCode::kInvalidArgument, "character"));
  EXPECT_TRUE(Fails(ParseS3Url("s3://bkt/../x").status(), StatusCode::kInvalidArgument, "'..'"));
  EXPECT_TRUE(Fails(ParseS3Url("gs://bkt").status(), StatusCode::kInvalidArgument, "s3://"));
}

TEST(S3ConfigTest, EnvironmentFilesAndDefaults) {
  TempDir dir;
  WriteAll(dir / "credentials",
           "[default]\naws_access_key_id = DEFKEY\naws_secret_access_key = defsecret\n"
           "[other]\naws_access_key_id=OTHERKEY\naws_secret_access_key=othersecret\n"
           "aws_session_token = tok\n");
  WriteAll(dir / "config",
           "[default]\nregion = eu-west-1\n[profile other]\nregion = ap-south-1\n"
           "s3 =\n  addressing_style = path\n");
  std::map<std::string, std::string> env = {{"HOME", dir.path()}};
  EnvLookup lookup = [&env](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  std::filesystem::create_directories(dir / ".aws");
  std::filesystem::copy(dir / "credentials", dir / ".aws/credentials");
  std::filesystem::copy(dir / "config", dir / ".aws/config");

  auto c = ResolveS3Config(lookup);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key_id, "DEFKEY");
  EXPECT_EQ(c->region, "eu-west-1");
  EXPECT_EQ(c->endpoint, "https://s3.eu-west-1.amazonaws.com");
  EXPECT_FALSE(c->path_style);  // virtual-hosted on AWS
  EXPECT_EQ(c->Describe().find("defsecret"), std::string::npos);

  env["AWS_PROFILE"] = "other";
  c = ResolveS3Config(lookup);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key_id, "OTHERKEY");
  EXPECT_EQ(c->session_token, "tok");
  EXPECT_EQ(c->region, "ap-south-1");
  EXPECT_TRUE(c->path_style);  // the profile's s3.addressing_style

  env["AWS_ACCESS_KEY_ID"] = "ENVKEY";
  env["AWS_SECRET_ACCESS_KEY"] = "envsecret";
  env["AWS_REGION"] = "us-west-2";
  env["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9000/";
  env["AWS_S3_ADDRESSING_STYLE"] = "virtual";
  c = ResolveS3Config(lookup);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key_id, "ENVKEY");
  EXPECT_EQ(c->session_token, "");
  EXPECT_EQ(c->region, "us-west-2");
  EXPECT_EQ(c->endpoint, "http://127.0.0.1:9000");
  EXPECT_FALSE(c->path_style);

  env.erase("AWS_S3_ADDRESSING_STYLE");
  env["AWS_ENDPOINT_URL_S3"] = "http://localhost:5000";
  c = ResolveS3Config(lookup);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->endpoint, "http://localhost:5000");
  EXPECT_TRUE(c->path_style);  // custom endpoint: path-style by default

  env["AWS_S3_ADDRESSING_STYLE"] = "sideways";
  EXPECT_TRUE(Fails(ResolveS3Config(lookup).status(), StatusCode::kInvalidArgument, "sideways"));
  env.erase("AWS_S3_ADDRESSING_STYLE");
  env["AWS_ENDPOINT_URL_S3"] = "http://host/path";
  EXPECT_TRUE(Fails(ResolveS3Config(lookup).status(), StatusCode::kInvalidArgument, "no path"));
  env.erase("AWS_ENDPOINT_URL_S3");
  env.erase("AWS_SECRET_ACCESS_KEY");
  EXPECT_TRUE(Fails(ResolveS3Config(lookup).status(), StatusCode::kInvalidArgument, "together"));
  env.erase("AWS_ACCESS_KEY_ID");
  env["AWS_PROFILE"] = "nobody";
  EXPECT_TRUE(
      Fails(ResolveS3Config(lookup).status(), StatusCode::kInvalidArgument, "no S3 credentials"));
  env["AWS_SHARED_CREDENTIALS_FILE"] = dir / "missing";
  EXPECT_TRUE(Fails(ResolveS3Config(lookup).status(), StatusCode::kInvalidArgument, "missing"));
}

TEST_F(S3StoreTest, PlainObjects) {
  auto store = Store("/vols");
  EXPECT_NE(store->Describe().find("s3://" + bucket_ + "/vols"), std::string::npos);
  EXPECT_EQ(store->Describe().find("testing ("), std::string::npos);
  EXPECT_TRUE(Fails(store->Get("a/b", 100).status(), StatusCode::kNotFound, "a/b"));
  ASSERT_TRUE(store->Put("a/b", Bytes("hello")).ok());
  EXPECT_EQ(*store->Get("a/b", 100), "hello");
  EXPECT_EQ(*store->Size("a/b"), 5u);
  EXPECT_TRUE(*store->Exists("a/b"));
  EXPECT_FALSE(*store->Exists("a/c"));
  EXPECT_TRUE(Fails(store->Size("a/c").status(), StatusCode::kNotFound, "a/c"));
  EXPECT_TRUE(Fails(store->Get("a/b", 4).status(), StatusCode::kResourceExhausted, "4 bytes"));
  ASSERT_TRUE(store->Put("a/b", Bytes("")).ok());
  EXPECT_EQ(*store->Get("a/b", 0), "");
  ASSERT_TRUE(store->Delete("a/b").ok());
  EXPECT_FALSE(*store->Exists("a/b"));
  EXPECT_TRUE(store->Delete("a/b").ok());  // absent is success
  EXPECT_TRUE(Fails(store->Put("a/.tmp", Bytes("x")), StatusCode::kInvalidArgument, "dot"));
  EXPECT_TRUE(Fails(store->Put("a b", Bytes("x")), StatusCode::kInvalidArgument, "character"));

  ASSERT_TRUE(store->PutIfAbsent("once", Bytes("first")).ok());
  EXPECT_TRUE(
      Fails(store->PutIfAbsent("once", Bytes("second")), StatusCode::kFailedPrecondition, "once"));
  EXPECT_EQ(*store->Get("once", 100), "first");
}

TEST_F(S3StoreTest, VersionedObjects) {
  auto store = Store();
  auto g1 = store->PutIfGeneration("tags/t.json", Bytes("v1"), "");
  ASSERT_TRUE(g1.ok()) << g1.status().ToString();
  EXPECT_TRUE(Fails(store->PutIfGeneration("tags/t.json", Bytes("v1b"), "").status(),
                    StatusCode::kFailedPrecondition, "tags/t.json"));
  auto g2 = store->PutIfGeneration("tags/t.json", Bytes("v2"), *g1);
  ASSERT_TRUE(g2.ok()) << g2.status().ToString();
  EXPECT_NE(*g1, *g2);
  Status stale = store->PutIfGeneration("tags/t.json", Bytes("v3"), *g1).status();
  EXPECT_TRUE(Fails(stale, StatusCode::kFailedPrecondition, "tags/t.json"));
  EXPECT_NE(stale.message().find(*g2), std::string::npos) << stale.ToString();  // the current one
  auto v = store->GetVersioned("tags/t.json", 100);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->data, "v2");
  EXPECT_EQ(v->generation, *g2);
  EXPECT_TRUE(Fails(store->PutIfGeneration("tags/none.json", Bytes("x"), *g2).status(),
                    StatusCode::kFailedPrecondition, "absent"));
  EXPECT_TRUE(Fails(store->GetVersioned("tags/none.json", 100).status(), StatusCode::kNotFound,
                    "none.json"));
}

TEST_F(S3StoreTest, RacingConditionalWritesHaveOneWinner) {
  auto store = Store("/race");
  constexpr int kWriters = 8;
  for (int round = 0; round < 3; ++round) {
    const std::string key = "lease/" + std::to_string(round);
    std::atomic<int> won{0}, lost{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < kWriters; ++i) {
      threads.emplace_back([&, i] {
        Status s = store->PutIfAbsent(key, Bytes("writer " + std::to_string(i)));
        (s.ok() ? won : lost)++;
        if (!s.ok()) {
          EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(won.load(), 1);
    EXPECT_EQ(lost.load(), kWriters - 1);
  }
  auto g = store->PutIfGeneration("tag.json", Bytes("start"), "");
  ASSERT_TRUE(g.ok());
  std::atomic<int> won{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kWriters; ++i) {
    threads.emplace_back([&, i] {
      auto r = store->PutIfGeneration("tag.json", Bytes("mover " + std::to_string(i)), *g);
      if (r.ok()) {
        won++;
      } else {
        EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(won.load(), 1);
}

TEST_F(S3StoreTest, ListPagesAndStripsThePrefix) {
  S3StoreOptions opt;
  opt.max_keys = 7;
  auto store = Store("/p/q", opt);
  auto outside = Store("/p");
  std::vector<std::string> want;
  for (int i = 0; i < 25; ++i) {
    const std::string key = "chunks/" + std::to_string(1000 + (i * 7919) % 9000);
    ASSERT_TRUE(store->Put(key, Bytes("x")).ok());
    want.push_back(key);
  }
  ASSERT_TRUE(store->Put("chunksx", Bytes("x")).ok());
  ASSERT_TRUE(outside->Put("chunks/outside", Bytes("x")).ok());
  std::sort(want.begin(), want.end());
  auto got = store->List("chunks/");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, want);
  auto all = store->List("");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 26u);
  auto part = store->List("chunk");  // a string prefix, not only whole components
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(part->size(), 26u);
  EXPECT_TRUE(store->List("none/")->empty());
}

TEST_F(S3StoreTest, ListsMoreThanOneThousandKeys) {
  auto store = Store();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < 1100; i += 4) {
        char key[32];
        std::snprintf(key, sizeof key, "k/%05d", i);
        EXPECT_TRUE(store->Put(key, Bytes("")).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  auto got = store->List("k/");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 1100u);
  EXPECT_EQ(got->front(), "k/00000");
  EXPECT_EQ(got->back(), "k/01099");
}

TEST_F(S3StoreTest, MultipartUpload) {
  S3StoreOptions opt;
  opt.multipart_threshold = 6 << 20;
  opt.part_size = 5 << 20;
  auto store = Store("/mp", opt);
  const std::string big = Random((12 << 20) + 1, 7);  // three parts
  ASSERT_TRUE(store->Put("big", Bytes(big)).ok());
  EXPECT_EQ(*store->Size("big"), big.size());
  EXPECT_EQ(*store->Get("big", big.size()), big);
  // If-None-Match on CompleteMultipartUpload.
  ASSERT_TRUE(store->PutIfAbsent("big2", Bytes(big)).ok());
  const std::string other = Random(7 << 20, 8);
  EXPECT_TRUE(
      Fails(store->PutIfAbsent("big2", Bytes(other)), StatusCode::kFailedPrecondition, "big2"));
  EXPECT_EQ(*store->Get("big2", big.size()), big);
  // Below the threshold: one PUT.
  const std::string small = Random(5 << 20, 9);
  ASSERT_TRUE(store->Put("small", Bytes(small)).ok());
  EXPECT_EQ(*store->Get("small", small.size()), small);

  S3StoreOptions bad = opt;
  bad.part_size = 1 << 20;
  EXPECT_TRUE(Fails(MakeS3VolumeStore({bucket_, ""}, Config(Moto()->endpoint()), bad).status(),
                    StatusCode::kInvalidArgument, "5 MiB"));
}

// Virtual-hosted addressing, AWS's default: requests go to BUCKET.localhost:PORT/PREFIX/KEY, and
// moto takes the bucket from the host name (a Host with a subdomain that is not an IP address).
TEST_F(S3StoreTest, VirtualHostedAddressing) {
  S3Config c = Config(Moto()->endpoint("localhost"));
  c.path_style = false;
  S3StoreOptions opt;
  opt.max_keys = 2;
  opt.multipart_threshold = 6 << 20;
  opt.part_size = 5 << 20;
  auto store = MustMake("s3://" + bucket_ + "/vh", c, opt);
  EXPECT_NE(store->Describe().find("virtual-hosted"), std::string::npos) << store->Describe();
  ASSERT_TRUE(store->Put("a/b", Bytes("hello")).ok());
  EXPECT_EQ(*store->Get("a/b", 100), "hello");
  EXPECT_EQ(*store->Size("a/b"), 5u);
  EXPECT_TRUE(*store->Exists("a/b"));
  EXPECT_FALSE(*store->Exists("a/c"));
  ASSERT_TRUE(store->PutIfAbsent("a/once", Bytes("1")).ok());
  EXPECT_TRUE(
      Fails(store->PutIfAbsent("a/once", Bytes("2")), StatusCode::kFailedPrecondition, "a/once"));
  auto g = store->PutIfGeneration("tags/t.json", Bytes("v1"), "");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(store->PutIfGeneration("tags/t.json", Bytes("v2"), *g).ok());
  EXPECT_TRUE(Fails(store->PutIfGeneration("tags/t.json", Bytes("v3"), *g).status(),
                    StatusCode::kFailedPrecondition, "tags/t.json"));
  const std::string big = Random((10 << 20) + 3, 11);  // a multipart upload: two parts
  ASSERT_TRUE(store->PutIfAbsent("big", Bytes(big)).ok());
  auto keys = store->List("");  // pages of two
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  EXPECT_EQ(*keys, (std::vector<std::string>{"a/b", "a/once", "big", "tags/t.json"}));
  // The same objects through path-style addressing: they are in this bucket, under the prefix.
  auto path = Store("/vh");
  EXPECT_EQ(*path->Get("a/b", 100), "hello");
  EXPECT_EQ(*path->Get("big", big.size()), big);
  EXPECT_EQ(path->GetVersioned("tags/t.json", 100)->data, "v2");
  ASSERT_TRUE(store->Delete("a/b").ok());
  EXPECT_FALSE(*path->Exists("a/b"));
}

TEST_F(S3StoreTest, NoSuchBucketIsAnIoErrorWithS3sCode) {
  auto store = MustMake("s3://no-such-bucket-here", Config(Moto()->endpoint()));
  // Not NotFound: the volume layer would take that for a missing object.
  EXPECT_TRUE(Fails(store->Put("a", Bytes("x")), StatusCode::kIoError, "NoSuchBucket"));
  EXPECT_TRUE(Fails(store->Get("a", 10).status(), StatusCode::kIoError, "NoSuchBucket"));
  EXPECT_TRUE(Fails(store->List("").status(), StatusCode::kIoError, "NoSuchBucket"));
}

// An endpoint that is not S3 (a web server, an ingress) answers 404 without an S3 error code:
// that says nothing about the object, so it is an IoError naming the endpoint, never NotFound.
// Only HEAD, whose answers have no body, takes a 404 as a missing object.
TEST(S3StoreErrorsTest, A404WithoutAnS3ErrorCodeIsAnIoErrorNamingTheEndpoint) {
  if (!HaveMoto()) GTEST_SKIP() << "no moto venv (python) at " << MotoPython();
  Helper web("not-s3", false);
  ASSERT_TRUE(web.ok()) << "not-s3 server did not start";
  auto store = MustMake("s3://vols/pre", Config(web.endpoint()));
  const std::string hint = "is " + web.endpoint() + " an S3 endpoint?";
  EXPECT_TRUE(Fails(store->Get("tags/t.json", 100).status(), StatusCode::kIoError, hint));
  EXPECT_TRUE(Fails(store->GetVersioned("tags/t.json", 100).status(), StatusCode::kIoError, hint));
  EXPECT_TRUE(Fails(store->Put("a", Bytes("x")), StatusCode::kIoError, hint));
  EXPECT_TRUE(Fails(store->PutIfAbsent("a", Bytes("x")), StatusCode::kIoError, hint));
  EXPECT_TRUE(Fails(store->PutIfGeneration("t", Bytes("x"), "\"etag\"").status(),
                    StatusCode::kIoError, hint));
  EXPECT_TRUE(Fails(store->List("volumes/").status(), StatusCode::kIoError, hint));
  EXPECT_TRUE(Fails(store->Delete("a"), StatusCode::kIoError, hint));
  EXPECT_EQ(store->Exists("a").value(), false);
  EXPECT_EQ(store->Size("a").status().code(), StatusCode::kNotFound);
}

// The delta store over the same bucket: sizes, ranges, whole objects and each error.
TEST_F(S3StoreTest, DeltaObjectStoreReadsRangesAndWholeObjects) {
  auto volumes = Store("/deltas/step-2");
  std::string blob(300000, '\0');
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<char>(i * 131 + 7);
  ASSERT_TRUE(volumes->Put("shard-00000.zst", Bytes(blob)).ok());
  ASSERT_TRUE(volumes->Put("manifest.json", Bytes("{}")).ok());
  ASSERT_TRUE(volumes->Put("empty", Bytes("")).ok());
  auto where = ParseS3Url("s3://" + bucket_ + "/deltas/step-2");
  ASSERT_TRUE(where.ok());
  auto store = MakeS3ObjectStore(*where, Config(Moto()->endpoint()));
  EXPECT_EQ(store->Describe(), "s3://" + bucket_ + "/deltas/step-2");
  EXPECT_EQ(*store->Size("shard-00000.zst"), blob.size());
  EXPECT_EQ(*store->ReadObject("manifest.json", 100), "{}");
  EXPECT_EQ(*store->ReadObject("empty", 0), "");
  for (auto [offset, length] : {std::pair<uint64_t, uint64_t>{0, 1},
                                {0, 300000},
                                {12345, 100000},
                                {299999, 1},
                                {300000, 0},
                                {5, 0}}) {
    auto r = store->ReadRange("shard-00000.zst", offset, length);
    ASSERT_TRUE(r.ok()) << offset << " " << length << ": " << r.status().ToString();
    EXPECT_EQ(*r, blob.substr(offset, length)) << offset << " " << length;
  }
  for (auto [offset, length] : {std::pair<uint64_t, uint64_t>{299999, 2},
                                {300000, 1},
                                {400000, 10},
                                {300001, 0},
                                {1, UINT64_MAX}}) {
    auto r = store->ReadRange("shard-00000.zst", offset, length);
    EXPECT_TRUE(Fails(r.status(), StatusCode::kDataLoss, "")) << offset << " " << length;
  }
  EXPECT_TRUE(Fails(store->ReadObject("shard-00000.zst", 1000).status(),
                    StatusCode::kResourceExhausted, "limit"));
  EXPECT_TRUE(Fails(store->Size("missing").status(), StatusCode::kNotFound, "missing"));
  EXPECT_TRUE(Fails(store->ReadRange("missing", 0, 4).status(), StatusCode::kNotFound, "missing"));
  EXPECT_TRUE(Fails(store->ReadObject("missing", 4).status(), StatusCode::kNotFound, "missing"));
  EXPECT_TRUE(Fails(store->Size("../x").status(), StatusCode::kInvalidArgument, "dot-led"));
  EXPECT_TRUE(Fails(store->Size("a b").status(), StatusCode::kInvalidArgument, "may hold"));
  auto nowhere = MakeS3ObjectStore(*ParseS3Url("s3://no-such-bucket-here"),
                                   Config(Moto()->endpoint()));
  EXPECT_TRUE(Fails(nowhere->ReadObject("manifest.json", 100).status(), StatusCode::kIoError,
                    "NoSuchBucket"));
}

TEST(S3StoreErrorsTest, UnreachableEndpointIsAnIoErrorAfterRetries) {
  // Port 9 (discard) on loopback: nothing listens there.
  S3StoreOptions opt;
  opt.attempts = 3;
  opt.initial_backoff_ms = 10;
  auto store = MustMake("s3://bkt/x", Config("http://127.0.0.1:9"), opt);
  const auto start = Clock::now();
  Status s = store->Put("k", Bytes("x"));
  EXPECT_TRUE(Fails(s, StatusCode::kIoError, "after 3 tries")) << s.ToString();
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(30));
  EXPECT_TRUE(Fails(store->Get("k", 10).status(), StatusCode::kIoError, "after 3 tries"));
}

TEST(S3StoreAuthTest, MotoChecksTheSignatures) {
  if (!HaveMoto()) GTEST_SKIP() << "no moto venv at " << MotoPython();
  Helper moto("moto", true);
  ASSERT_TRUE(moto.ok()) << "moto server with auth did not start";
  const std::string key = moto.info()["key"];
  const std::string secret = moto.info()["secret"];
  auto store = MustMake("s3://authed", Config(moto.endpoint(), key, secret));
  ASSERT_TRUE(store->Put("chunks/a", Bytes("signed")).ok());
  EXPECT_EQ(*store->Get("chunks/a", 100), "signed");
  EXPECT_TRUE(*store->Exists("chunks/a"));
  auto g = store->PutIfGeneration("tag", Bytes("t"), "");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(store->PutIfGeneration("tag", Bytes("u"), *g).ok());
  EXPECT_TRUE(store->Delete("chunks/a").ok());

  S3StoreOptions fast;
  fast.attempts = 2;
  fast.initial_backoff_ms = 1;
  auto wrong_secret = MustMake("s3://authed", Config(moto.endpoint(), key, "not-the-secret"), fast);
  Status s = wrong_secret->Put("chunks/b", Bytes("x"));
  EXPECT_TRUE(Fails(s, StatusCode::kIoError, "SignatureDoesNotMatch")) << s.ToString();
  EXPECT_EQ(s.message().find("not-the-secret"), std::string::npos);
  EXPECT_TRUE(Fails(wrong_secret->Get("chunks/b", 10).status(), StatusCode::kIoError, "403"));
  auto unknown = MustMake("s3://authed", Config(moto.endpoint(), "AKIAUNKNOWN", "x"), fast);
  EXPECT_TRUE(
      Fails(unknown->Put("chunks/b", Bytes("x")), StatusCode::kIoError, "InvalidAccessKeyId"));
  // HEAD answers carry no error document: the message says what to check.
  EXPECT_TRUE(Fails(unknown->Exists("chunks/b").status(), StatusCode::kIoError, "credentials"));
}

TEST(S3StoreSigV4Test, BotocoreComputesTheSameSignatures) {
  if (!HaveMoto()) GTEST_SKIP() << "no moto venv (botocore) at " << MotoPython();
  Helper stub("sigv4", false);
  ASSERT_TRUE(stub.ok()) << "sigv4 stub did not start";
  for (bool with_token : {false, true}) {
    for (bool sign_payload : {true, false}) {
      SCOPED_TRACE(std::string(with_token ? "session token" : "no token") +
                   (sign_payload ? ", signed payload" : ", unsigned payload"));
      S3Config c = Config(stub.endpoint(), "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCY");
      if (with_token) c.session_token = "FwoGZXIvYXdzE+/token==";
      S3StoreOptions opt;
      opt.max_keys = 2;
      opt.sign_payload = sign_payload;
      opt.attempts = 1;
      auto store = MustMake(
          "s3://bkt/pre-fix/a.b_c~d/" + std::to_string(with_token) + std::to_string(sign_payload),
          c, opt);
      const std::string body = Random(100000, 3);
      ASSERT_TRUE(store->Put("volumes/ns/v/versions/x.json", Bytes(body)).ok());
      EXPECT_EQ(*store->Get("volumes/ns/v/versions/x.json", body.size()), body);
      EXPECT_TRUE(store->PutIfAbsent("chunks/sha256/ab/abcd", Bytes("c")).ok());
      EXPECT_TRUE(Fails(store->PutIfAbsent("chunks/sha256/ab/abcd", Bytes("c")),
                        StatusCode::kFailedPrecondition, "abcd"));
      auto g = store->PutIfGeneration("tags/t.json", Bytes("1"), "");
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      EXPECT_TRUE(store->PutIfGeneration("tags/t.json", Bytes("2"), *g).ok());
      EXPECT_EQ(*store->Size("chunks/sha256/ab/abcd"), 1u);
      for (int i = 0; i < 5; ++i) {
        ASSERT_TRUE(store->Put("volumes/ns/v/info/" + std::to_string(i), Bytes("")).ok());
      }
      auto keys = store->List("volumes/ns/");  // three pages, tokens with + / = @
      ASSERT_TRUE(keys.ok()) << keys.status().ToString();
      EXPECT_EQ(keys->size(), 6u);
      EXPECT_TRUE(store->Delete("tags/t.json").ok());
      EXPECT_FALSE(*store->Exists("tags/t.json"));
    }
  }
  // Virtual-hosted: Host is BUCKET.localhost:PORT and is signed as such.
  S3Config vh = Config(stub.endpoint("localhost"), "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCY");
  vh.path_style = false;
  auto virtual_hosted = MustMake("s3://bkt/vh", vh);
  ASSERT_TRUE(virtual_hosted->Put("chunks/sha256/cd/cdef", Bytes("v")).ok());
  EXPECT_EQ(*virtual_hosted->Get("chunks/sha256/cd/cdef", 10), "v");
  EXPECT_TRUE(virtual_hosted->PutIfGeneration("tags/v.json", Bytes("1"), "").ok());
  auto listed = virtual_hosted->List("chunks/");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(*listed, std::vector<std::string>{"chunks/sha256/cd/cdef"});
  const std::string hosts = Fetch(stub.endpoint() + "/__hosts");
  EXPECT_NE(hosts.find("\"bkt.localhost:"), std::string::npos) << hosts;
  EXPECT_NE(hosts.find("\"127.0.0.1:"), std::string::npos) << hosts;
  // The stub refuses what botocore does not agree with.
  auto wrong = MustMake("s3://bkt", Config(stub.endpoint(), "AKIDEXAMPLE", "other"));
  EXPECT_TRUE(Fails(wrong->Put("k", Bytes("x")), StatusCode::kIoError, "SignatureDoesNotMatch"));
}

TEST(OpenVolumeStoreUrlTest, SchemesAndConfigErrors) {
  TempDir dir;
  // Readers of a directory store that does not exist get NotFound and create nothing.
  const std::string missing = dir / "store";
  EXPECT_TRUE(Fails(OpenVolumeStoreUrl(missing).status(), StatusCode::kNotFound, "no such"));
  EXPECT_TRUE(Fails(OpenVolumeStoreUrl("dir://" + missing).status(), StatusCode::kNotFound,
                    "no such"));
  EXPECT_FALSE(std::filesystem::exists(missing));
  auto d = OpenVolumeStoreUrl(missing, StoreDir::kCreate);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(std::filesystem::is_directory(missing));
  EXPECT_TRUE(OpenVolumeStoreUrl(missing).ok());
  EXPECT_TRUE(Fails(OpenVolumeStoreUrl("dir://relative").status(), StatusCode::kInvalidArgument,
                    "absolute"));
  EXPECT_TRUE(Fails(OpenVolumeStoreUrl("s3://Bad_Bucket").status(), StatusCode::kInvalidArgument,
                    "bucket"));
  EXPECT_TRUE(Fails(OpenVolumeStoreUrl("ftp://x").status(), StatusCode::kInvalidArgument, "ftp"));
}

}  // namespace
}  // namespace deltakv::sidecar
