// The engine handle through its C ABI against a real control block (this test plays the
// sidecar's side of the rings): its states, VERIFY answered with the Adler-32 sums of the live
// bytes, and the regressions of the handle's races, each run many times in a bounded loop.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "deltakv/deltakv.h"
#include "deltasync/adler32.h"
#include "deltasync/plan_verify.h"
#include "shm/control_block.h"
#include "shm/messages.h"

namespace {

using namespace std::chrono_literals;
using deltakv::shm::ControlBlock;

std::string UniqueShmName(const char* what) {
  static std::atomic<int> n{0};
  return "dkv-eh-" + std::string(what) + "-" + std::to_string(getpid()) + "-" + std::to_string(n++);
}

struct Sidecar {
  explicit Sidecar(const char* what) : name(UniqueShmName(what)) {
    cb = ControlBlock::Create(name).value();
  }
  ~Sidecar() {
    cb.reset();
    (void)deltakv::shm::Segment::UnlinkWithPrefix(name);
  }
  // Waits until rank 0 is ACTIVE and returns its channel.
  deltakv::shm::RankChannel Channel() {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    for (;;) {
      auto ranks = cb->ActiveRanks();
      if (!ranks.empty()) return cb->OpenChannel(ranks[0]).value();
      EXPECT_LT(std::chrono::steady_clock::now(), deadline);
      std::this_thread::sleep_for(5ms);
    }
  }
  std::string name;
  std::unique_ptr<ControlBlock> cb;
};

deltakv_engine* MakeEngine(const std::string& shm, std::vector<uint8_t>& weights,
                           bool start = true) {
  deltakv_engine_params p = deltakv_engine_default_params();
  p.shm_name = shm.c_str();
  p.rank = 0;
  p.world_size = 1;
  p.initial_version = "v1";
  deltakv_engine* e = nullptr;
  EXPECT_EQ(deltakv_engine_create(&p, &e), DELTAKV_OK);
  int64_t shape = static_cast<int64_t>(weights.size());
  EXPECT_EQ(deltakv_engine_register_tensor(e, "w", weights.data(), "U8", &shape, 1, nullptr),
            DELTAKV_OK)
      << deltakv_last_error();
  if (start) {
    EXPECT_EQ(deltakv_engine_start(e), DELTAKV_OK) << deltakv_last_error();
  }
  return e;
}

// VERIFY: the rank reads every byte and its OWNED sums give the tensor's Adler-32; the handle
// is VERIFYING only while it reads, ATTACHED before and after.
TEST(EngineHandle, StatesAndVerifyAnswersTheLiveChecksum) {
  Sidecar sidecar("verify");
  std::vector<uint8_t> weights(1 << 20);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<uint8_t>(i * 131 + 7);
  deltakv_engine* e = MakeEngine(sidecar.name, weights, /*start=*/false);
  EXPECT_EQ(deltakv_engine_get_state(e), DELTAKV_ENGINE_CREATED);
  ASSERT_EQ(deltakv_engine_start(e), DELTAKV_OK);
  EXPECT_EQ(deltakv_engine_get_state(e), DELTAKV_ENGINE_ATTACHED);
  auto ch = sidecar.Channel();
  for (uint8_t flip : {uint8_t{0}, uint8_t{0x40}}) {
    weights[12345] ^= flip;
    const uint64_t job = sidecar.cb->AllocateSyncId();
    auto bytes = deltakv::shm::EncodeMessage(deltakv::shm::MakeVerify(job, {}));
    ASSERT_TRUE(ch.commands.Push(*bytes, 1s).ok());
    std::vector<uint8_t> buf;
    deltakv::shm::StagedReport rep;
    for (;;) {
      auto popped = ch.responses.Pop(&buf, 10s);
      ASSERT_TRUE(popped.ok() && *popped) << "no VERIFIED within 10 s";
      auto msg = deltakv::shm::DecodeMessage(buf);
      ASSERT_TRUE(msg.ok());
      if (msg->type != deltakv::shm::MessageType::kVerified) continue;
      EXPECT_EQ(msg->sync_id, job);
      rep = deltakv::shm::ParseVerified(*msg).value();
      break;
    }
    ASSERT_EQ(rep.entries.size(), 1u) << "one OWNED entry, no replicas at world size 1";
    EXPECT_EQ(rep.changed_bytes, weights.size());
    auto d = deltakv::deltasync::AdlerDelta::FromSums(rep.entries[0].s1, rep.entries[0].s2);
    EXPECT_EQ(d.Apply(deltakv::deltasync::Adler32OfZeros(weights.size()), weights.size()),
              deltakv::deltasync::Adler32(weights));
    EXPECT_EQ(deltakv_engine_get_state(e), DELTAKV_ENGINE_ATTACHED);
  }
  deltakv_engine_free(e);
  EXPECT_EQ(deltakv_engine_get_state(nullptr), DELTAKV_ENGINE_STOPPED);
}

// A tensor name must be a checkpoint name: non-empty UTF-8 (the sidecar reads the names as JSON).
TEST(EngineHandle, TensorNamesMustBeUtf8) {
  deltakv_engine_params p = deltakv_engine_default_params();
  deltakv_engine* e = nullptr;
  ASSERT_EQ(deltakv_engine_create(&p, &e), DELTAKV_OK);
  std::vector<uint8_t> weights(64, 1);
  int64_t shape = 64;
  for (const char* bad : {"", "w\xff", "caf\xe9", "\xc0\xaf"}) {
    EXPECT_EQ(deltakv_engine_register_tensor(e, bad, weights.data(), "U8", &shape, 1, nullptr),
              DELTAKV_ERR_INVALID_ARGUMENT)
        << bad;
  }
  EXPECT_NE(std::string(deltakv_last_error()).find("not valid UTF-8"), std::string::npos)
      << deltakv_last_error();
  EXPECT_EQ(deltakv_engine_register_tensor(e, "caf\xc3\xa9", weights.data(), "U8", &shape, 1,
                                           nullptr),
            DELTAKV_OK)
      << deltakv_last_error();
  // A layout of another dtype (the same bytes: 32 BF16 elements as 64 U8).
  int64_t halves = 32;
  EXPECT_EQ(deltakv_engine_register_tensor(
                e, "w2", weights.data(), "BF16", &halves, 1,
                R"({"kind":"replicated","dtype":"U8","shape":[64],"world":1})"),
            DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(deltakv_last_error()).find("layout's is U8"), std::string::npos)
      << deltakv_last_error();
  deltakv_engine_free(e);
}

// Once started, the handle refuses new callbacks and tensors (its worker uses them) and keeps
// the ones it has; deltakv_engine_poll writes *committed only when it succeeds.
TEST(EngineHandle, StartedHandleRefusesCallbacksAndPollKeepsItsOutputOnError) {
  Sidecar sidecar("started");
  std::vector<uint8_t> weights(4096, 1);
  deltakv_engine* e = MakeEngine(sidecar.name, weights);
  deltakv_callbacks cb = deltakv_default_callbacks();
  EXPECT_EQ(deltakv_engine_set_callbacks(e, &cb), DELTAKV_ERR_FAILED_PRECONDITION);
  EXPECT_NE(std::string(deltakv_last_error()).find("before start"), std::string::npos)
      << deltakv_last_error();
  int64_t shape = 16;
  EXPECT_EQ(deltakv_engine_register_tensor(e, "late", weights.data(), "U8", &shape, 1, nullptr),
            DELTAKV_ERR_FAILED_PRECONDITION);
  int32_t committed = 77;
  EXPECT_EQ(deltakv_engine_poll(nullptr, &committed), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(committed, 77);
  EXPECT_EQ(deltakv_engine_poll(e, &committed), DELTAKV_OK) << deltakv_last_error();
  EXPECT_EQ(committed, 0);  // nothing to apply
  deltakv_engine_free(e);
}

// A PLAN for a sync older than the newest one the rank has seen is ignored (PROTOCOL.md
// section 8): no ERROR for it, no change of state. A part naming a missing arena fails its own
// sync with an ERROR.
TEST(EngineHandle, PlanOfAnOlderSyncIsIgnored) {
  Sidecar sidecar("stale");
  std::vector<uint8_t> weights(4096, 1);
  deltakv_engine* e = MakeEngine(sidecar.name, weights);
  auto ch = sidecar.Channel();
  auto send = [&](const deltakv::shm::Message& m) {
    auto bytes = deltakv::shm::EncodeMessage(m);
    ASSERT_TRUE(bytes.ok());
    ASSERT_TRUE(ch.commands.Push(*bytes, 1s).ok());
  };
  auto next = [&]() {
    std::vector<uint8_t> buf;
    auto popped = ch.responses.Pop(&buf, 10s);
    EXPECT_TRUE(popped.ok() && *popped) << "no answer within 10 s";
    return deltakv::shm::DecodeMessage(buf).value();
  };
  deltakv::shm::PlanRef ref;
  ref.arena_name = sidecar.name + "-plan-r0-a9";  // never created
  ref.generation = 1;
  send(deltakv::shm::MakePlan(5, ref).value());
  deltakv::shm::Message m = next();
  EXPECT_EQ(m.type, deltakv::shm::MessageType::kError);
  EXPECT_EQ(m.sync_id, 5u);
  send(deltakv::shm::MakePlan(3, ref).value());  // older: ignored
  send(deltakv::shm::MakePing(42));
  m = next();
  EXPECT_EQ(m.type, deltakv::shm::MessageType::kPong) << "the older sync's PLAN was acted on";
  EXPECT_EQ(deltakv::shm::ParseNonce(m).value(), 42u);
  EXPECT_EQ(deltakv_engine_get_state(e), DELTAKV_ENGINE_ATTACHED);
  deltakv_engine_free(e);
}

// staging_reserve_bytes: the cpu backend has no device memory to set aside, so a reserve of any
// size starts the handle as usual.
TEST(EngineHandle, StagingReserveStartsOnTheCpuBackend) {
  Sidecar sidecar("reserve");
  std::vector<uint8_t> weights(4096, 1);
  deltakv_engine_params p = deltakv_engine_default_params();
  p.shm_name = sidecar.name.c_str();
  p.staging_reserve_bytes = uint64_t{1} << 40;
  deltakv_engine* e = nullptr;
  ASSERT_EQ(deltakv_engine_create(&p, &e), DELTAKV_OK) << deltakv_last_error();
  int64_t shape = static_cast<int64_t>(weights.size());
  ASSERT_EQ(deltakv_engine_register_tensor(e, "w", weights.data(), "U8", &shape, 1, nullptr),
            DELTAKV_OK);
  ASSERT_EQ(deltakv_engine_start(e), DELTAKV_OK) << deltakv_last_error();
  EXPECT_EQ(deltakv_engine_get_state(e), DELTAKV_ENGINE_ATTACHED);
  deltakv_engine_free(e);
}

// Regression: ~Engine stored stop_ and notified without the mutex, so a worker about to sleep
// could miss the wake-up and join() hung. Free right after start, and right after a VERIFY was
// queued, many times; each free must return promptly.
TEST(EngineHandle, FreeNeverHangsLostWakeup) {
  Sidecar sidecar("free");
  std::vector<uint8_t> weights(64 << 10, 3);
  for (int i = 0; i < 60; ++i) {
    deltakv_engine* e = MakeEngine(sidecar.name, weights);
    if (i % 2 == 1) {
      auto ch = sidecar.Channel();
      auto bytes =
          deltakv::shm::EncodeMessage(deltakv::shm::MakeVerify(sidecar.cb->AllocateSyncId(), {}));
      (void)ch.commands.TryPush(*bytes);
    }
    const auto t0 = std::chrono::steady_clock::now();
    deltakv_engine_free(e);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s) << "iteration " << i;
    // The slot is free again before the next iteration registers rank 0.
    sidecar.cb->ReclaimDead();
  }
}

// Regression: last_error and version_id returned a string the worker could rewrite
// concurrently. Many threads read both while the caller keeps failing calls.
TEST(EngineHandle, LastErrorAndVersionIdAreSafeFromAnyThread) {
  Sidecar sidecar("err");
  std::vector<uint8_t> weights(4096, 1);
  deltakv_engine* e = MakeEngine(sidecar.name, weights);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reads{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        // The handle's own messages are read under its lock; a failing call on another
        // thread never writes them (its message is that thread's, deltakv_base.h).
        std::string err = deltakv_engine_sync_error(e);
        std::string version = deltakv_engine_version_id(e);
        EXPECT_EQ(version, "v1");
        EXPECT_EQ(err, "");
        EXPECT_EQ(std::string(deltakv_last_error()), "");
        reads.fetch_add(1);
      }
    });
  }
  int64_t shape = 16;
  // At least 2000 failing calls, and on until the readers have read a while (bounded: on a
  // loaded machine the readers may start late).
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  for (int i = 0; (i < 2000 || reads.load() < 2000) && std::chrono::steady_clock::now() < deadline;
       ++i) {
    // Registering after start is refused; each refusal rewrites this thread's message.
    EXPECT_NE(deltakv_engine_register_tensor(e, ("late" + std::to_string(i)).c_str(),
                                             weights.data(), "U8", &shape, 1, nullptr),
              DELTAKV_OK);
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_GT(reads.load(), 0u);
  EXPECT_NE(std::string(deltakv_last_error()).find("deltakv_engine_register_tensor: "),
            std::string::npos)
      << deltakv_last_error();
  EXPECT_EQ(std::string(deltakv_engine_sync_error(e)), "");
  deltakv_engine_free(e);
}

}  // namespace
