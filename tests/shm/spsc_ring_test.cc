// SpscRing: geometry checks, wrap-around, full/empty, corruption, and real cross-process use:
// 200k checksummed random-size messages, blocking pop/push wake-ups, and a producer SIGKILLed
// mid-stream.
#include "shm/spsc_ring.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "shm/liveness.h"
#include "shm/segment.h"
#include "shm_test_util.h"

namespace deltakv::shm {
namespace {

using namespace std::chrono_literals;
using testing::ForkChild;
using testing::UniqueName;
using testing::WaitChild;
using testing::WaitFor;

// A 64-aligned buffer holding a ring in this process.
struct LocalRing {
  explicit LocalRing(uint64_t capacity, uint32_t max_message) : storage(RingBytes(capacity) + 64) {
    auto addr = reinterpret_cast<uintptr_t>(storage.data());
    bytes = std::span<uint8_t>(storage.data() + ((64 - addr % 64) % 64), RingBytes(capacity));
    Status s = InitializeRing(bytes, capacity, max_message);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  RingHeader* header() { return reinterpret_cast<RingHeader*>(bytes.data()); }
  std::vector<uint8_t> storage;
  std::span<uint8_t> bytes;
};

std::vector<uint8_t> Bytes(std::string_view s) { return {s.begin(), s.end()}; }

uint32_t Fnv1a(const uint8_t* p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 16777619u;
  return h;
}

// [u64 seq][u32 fnv of the rest][rest]; sizes in [12, max].
std::vector<uint8_t> MakeMessage(uint64_t seq, size_t size, std::mt19937_64& rng) {
  std::vector<uint8_t> m(size);
  for (size_t i = 12; i < size; ++i) m[i] = static_cast<uint8_t>(rng());
  std::memcpy(m.data(), &seq, 8);
  uint32_t h = Fnv1a(m.data() + 12, size - 12);
  std::memcpy(m.data() + 8, &h, 4);
  return m;
}

// True if `m` is intact; stores its sequence number.
bool CheckMessage(const std::vector<uint8_t>& m, uint64_t* seq) {
  if (m.size() < 12) return false;
  uint32_t h = 0;
  std::memcpy(seq, m.data(), 8);
  std::memcpy(&h, m.data() + 8, 4);
  return h == Fnv1a(m.data() + 12, m.size() - 12);
}

TEST(SpscRingTest, InitializeRejectsBadGeometry) {
  std::vector<uint8_t> buf(RingBytes(4096) + 64);
  auto addr = reinterpret_cast<uintptr_t>(buf.data());
  std::span<uint8_t> aligned(buf.data() + ((64 - addr % 64) % 64), RingBytes(4096));
  EXPECT_EQ(InitializeRing(aligned, 1000, 100).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(InitializeRing(aligned, 32, 8).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(InitializeRing(aligned, 4096, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(InitializeRing(aligned, 4096, 4089).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(InitializeRing(aligned, 4096, 4088).ok());
  EXPECT_EQ(InitializeRing(aligned.subspan(0, RingBytes(4096) - 1), 4096, 100).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      InitializeRing(std::span<uint8_t>(aligned.data() + 8, RingBytes(2048)), 2048, 100).code(),
      StatusCode::kInvalidArgument);
}

TEST(SpscRingTest, AttachValidatesHeader) {
  LocalRing ring(4096, 1024);
  EXPECT_TRUE(ValidateRing(ring.bytes).ok());
  EXPECT_EQ(ValidateRing(ring.bytes.subspan(0, 100)).code(), StatusCode::kDataLoss);
  EXPECT_EQ(ValidateRing(ring.bytes.subspan(0, RingBytes(2048))).code(), StatusCode::kDataLoss);
  ring.header()->layout_version = kLayoutVersion + 1;
  EXPECT_EQ(SpscRingProducer::Attach(ring.bytes).status().code(), StatusCode::kFailedPrecondition);
  ring.header()->layout_version = kLayoutVersion;
  ring.header()->capacity = 3000;
  EXPECT_EQ(SpscRingConsumer::Attach(ring.bytes).status().code(), StatusCode::kDataLoss);
  ring.header()->capacity = 4096;
  ring.header()->max_message = 5000;
  EXPECT_EQ(SpscRingConsumer::Attach(ring.bytes).status().code(), StatusCode::kDataLoss);
  ring.header()->max_message = 1024;
  ring.header()->magic = 1;
  EXPECT_EQ(SpscRingConsumer::Attach(ring.bytes).status().code(), StatusCode::kDataLoss);
}

TEST(SpscRingTest, FifoWithWrapAroundFullAndEmpty) {
  LocalRing ring(256, 200);
  auto producer = SpscRingProducer::Attach(ring.bytes).value();
  auto consumer = SpscRingConsumer::Attach(ring.bytes).value();
  std::vector<uint8_t> out;
  EXPECT_FALSE(consumer.TryPop(&out).value());

  EXPECT_EQ(producer.TryPush(std::vector<uint8_t>(201)).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(producer.TryPush(std::vector<uint8_t>(200, 9)).ok());  // 208 bytes of 256
  EXPECT_EQ(producer.TryPush(Bytes("0123456789abcdefghijklmnopqrstuvwxyz-0123456789")).code(),
            StatusCode::kResourceExhausted);  // 8 + 48 > 48 left
  ASSERT_TRUE(producer.TryPush(Bytes("0123456789abcdefghijklmnopqrstuvwxyz")).ok());  // 48: full
  EXPECT_EQ(producer.TryPush({}).code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(consumer.TryPop(&out).value());
  EXPECT_EQ(out, std::vector<uint8_t>(200, 9));
  ASSERT_TRUE(consumer.TryPop(&out).value());
  EXPECT_EQ(out, Bytes("0123456789abcdefghijklmnopqrstuvwxyz"));
  EXPECT_FALSE(consumer.TryPop(&out).value());

  // Many rounds of odd sizes: records straddle the end of the data area in every way.
  std::mt19937_64 rng(7);
  uint64_t pushed = 0, popped = 0;
  for (int round = 0; round < 20000; ++round) {
    size_t size = 12 + rng() % 120;
    std::vector<uint8_t> m = MakeMessage(pushed, size, rng);
    Status s = producer.TryPush(m);
    if (s.ok()) {
      ++pushed;
    } else {
      ASSERT_EQ(s.code(), StatusCode::kResourceExhausted);
    }
    if (rng() % 3 != 0) {
      auto got = consumer.TryPop(&out);
      ASSERT_TRUE(got.ok());
      if (*got) {
        uint64_t seq = 0;
        ASSERT_TRUE(CheckMessage(out, &seq));
        ASSERT_EQ(seq, popped++);
      }
    }
  }
  while (consumer.TryPop(&out).value()) {
    uint64_t seq = 0;
    ASSERT_TRUE(CheckMessage(out, &seq));
    ASSERT_EQ(seq, popped++);
  }
  EXPECT_EQ(pushed, popped);
  EXPECT_GT(pushed, 10000u);
}

TEST(SpscRingTest, EmptyMessagesAndMaximumMessages) {
  LocalRing ring(128, 120);
  auto producer = SpscRingProducer::Attach(ring.bytes).value();
  auto consumer = SpscRingConsumer::Attach(ring.bytes).value();
  std::vector<uint8_t> out{1, 2, 3};
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(producer.TryPush({}).ok());
    ASSERT_TRUE(consumer.TryPop(&out).value());
    EXPECT_TRUE(out.empty());
    std::vector<uint8_t> big(120, static_cast<uint8_t>(i));
    ASSERT_TRUE(producer.TryPush(big).ok());
    ASSERT_TRUE(consumer.TryPop(&out).value());
    EXPECT_EQ(out, big);
  }
}

TEST(SpscRingTest, CorruptPositionsAndRecordsAreDataLoss) {
  LocalRing ring(256, 100);
  auto producer = SpscRingProducer::Attach(ring.bytes).value();
  auto consumer = SpscRingConsumer::Attach(ring.bytes).value();
  std::vector<uint8_t> out;
  ASSERT_TRUE(producer.TryPush(Bytes("abc")).ok());

  // A tail beyond head + capacity.
  ring.header()->tail.store(1000);
  EXPECT_EQ(consumer.TryPop(&out).status().code(), StatusCode::kDataLoss);
  ring.header()->tail.store(13);  // misaligned
  EXPECT_EQ(consumer.TryPop(&out).status().code(), StatusCode::kDataLoss);
  ring.header()->tail.store(16);

  // A record header whose check word is wrong, then one claiming more bytes than written.
  uint8_t* data = ring.bytes.data() + sizeof(RingHeader);
  data[4] ^= 0xFF;
  EXPECT_EQ(consumer.TryPop(&out).status().code(), StatusCode::kDataLoss);
  data[4] ^= 0xFF;
  uint32_t length = 50, check = ~length;
  std::memcpy(data, &length, 4);
  std::memcpy(data + 4, &check, 4);
  EXPECT_EQ(consumer.TryPop(&out).status().code(), StatusCode::kDataLoss);
  length = 500, check = ~length;  // beyond max_message
  std::memcpy(data, &length, 4);
  std::memcpy(data + 4, &check, 4);
  EXPECT_EQ(consumer.TryPop(&out).status().code(), StatusCode::kDataLoss);
  length = 3, check = ~length;
  std::memcpy(data, &length, 4);
  std::memcpy(data + 4, &check, 4);
  ASSERT_TRUE(consumer.TryPop(&out).value());  // repaired: delivered as written
  EXPECT_EQ(out, Bytes("abc"));

  // A head that overtook the tail is seen by the producer when it needs room.
  ring.header()->head.store(4096);
  for (int i = 0; i < 100; ++i) {
    Status s = producer.TryPush(std::vector<uint8_t>(100));
    if (!s.ok()) {
      EXPECT_EQ(s.code(), StatusCode::kDataLoss);
      break;
    }
  }
}

TEST(SpscRingTest, PopTimesOutOnEmptyRing) {
  LocalRing ring(256, 100);
  auto consumer = SpscRingConsumer::Attach(ring.bytes).value();
  std::vector<uint8_t> out;
  auto got = consumer.Pop(&out, 10ms);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(*got);
  EXPECT_EQ(ring.header()->consumer_waiting.load(), 0u);
}

// ------------------------------------------------------------------------- cross-process

// A scratch segment: words at 64.., a heartbeat at 128, the ring at 4096.
struct SharedRing {
  static constexpr uint64_t kRingOffset = 4096;

  SharedRing(uint64_t capacity, uint32_t max_message) : name(UniqueName("ring")) {
    segment =
        Segment::Create(name, kRingOffset + RingBytes(capacity), SegmentKind::kScratch).value();
    EXPECT_TRUE(InitializeRing(RingSpan(segment), capacity, max_message).ok());
    segment.Publish();
  }
  static std::span<uint8_t> RingSpan(const Segment& s) { return s.bytes().subspan(kRingOffset); }
  static std::atomic<uint32_t>* Word(const Segment& s, int i) {
    return reinterpret_cast<std::atomic<uint32_t>*>(s.data() + 64 + 4 * i);
  }
  static Heartbeat* Beat(const Segment& s) { return reinterpret_cast<Heartbeat*>(s.data() + 128); }

  std::string name;
  Segment segment;
};

constexpr uint64_t kMessages = 200000;

TEST(SpscRingTest, CrossProcessRandomSizesChecksummed) {
  SharedRing shared(64 << 10, 4096);
  pid_t child = ForkChild([&] {
    StatusOr<Segment> s = Segment::Open(shared.name, SegmentKind::kScratch);
    if (!s.ok()) return 1;
    auto producer = SpscRingProducer::Attach(SharedRing::RingSpan(*s));
    if (!producer.ok()) return 2;
    std::mt19937_64 rng(12345);
    for (uint64_t i = 0; i < kMessages; ++i) {
      size_t size = (i % 1000 == 0) ? 4096 : 12 + rng() % 2000;
      if (!producer->Push(MakeMessage(i, size, rng), 60s).ok()) return 3;
    }
    return 0;
  });
  auto consumer = SpscRingConsumer::Attach(SharedRing::RingSpan(shared.segment)).value();
  std::vector<uint8_t> out;
  uint64_t next = 0;
  uint64_t total_bytes = 0;
  while (next < kMessages) {
    auto got = consumer.Pop(&out, 60s);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(*got) << "producer stalled after " << next << " messages";
    uint64_t seq = 0;
    ASSERT_TRUE(CheckMessage(out, &seq)) << "message " << next << " corrupt";
    ASSERT_EQ(seq, next);
    if (seq % 1000 == 0) {
      ASSERT_EQ(out.size(), 4096u);
    }
    total_bytes += out.size();
    ++next;
  }
  EXPECT_FALSE(consumer.TryPop(&out).value());
  EXPECT_EQ(WaitChild(child), 0);
  EXPECT_GT(total_bytes, kMessages * 500);
}

TEST(SpscRingTest, BlockingPopWakesWhenAProcessPushes) {
  SharedRing shared(4096, 1024);
  auto consumer = SpscRingConsumer::Attach(SharedRing::RingSpan(shared.segment)).value();
  pid_t child = ForkChild([&] {
    StatusOr<Segment> s = Segment::Open(shared.name, SegmentKind::kScratch);
    if (!s.ok()) return 1;
    auto producer = SpscRingProducer::Attach(SharedRing::RingSpan(*s)).value();
    auto* h = reinterpret_cast<RingHeader*>(SharedRing::RingSpan(*s).data());
    // Push only once the consumer has announced that it sleeps.
    if (!WaitFor([&] { return h->consumer_waiting.load() == 1; })) return 2;
    std::this_thread::sleep_for(10ms);
    return producer.TryPush(Bytes("wake up")).ok() ? 0 : 3;
  });
  std::vector<uint8_t> out;
  auto got = consumer.Pop(&out, 60s);
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(*got);
  EXPECT_EQ(out, Bytes("wake up"));
  EXPECT_EQ(WaitChild(child), 0);
}

TEST(SpscRingTest, BlockingPushWakesWhenAProcessPops) {
  SharedRing shared(256, 200);
  auto producer = SpscRingProducer::Attach(SharedRing::RingSpan(shared.segment)).value();
  ASSERT_TRUE(producer.TryPush(std::vector<uint8_t>(200, 1)).ok());
  ASSERT_EQ(producer.TryPush(std::vector<uint8_t>(100, 2)).code(), StatusCode::kResourceExhausted);
  pid_t child = ForkChild([&] {
    StatusOr<Segment> s = Segment::Open(shared.name, SegmentKind::kScratch);
    if (!s.ok()) return 1;
    auto consumer = SpscRingConsumer::Attach(SharedRing::RingSpan(*s)).value();
    auto* h = reinterpret_cast<RingHeader*>(SharedRing::RingSpan(*s).data());
    if (!WaitFor([&] { return h->producer_waiting.load() == 1; })) return 2;
    std::vector<uint8_t> out;
    if (!consumer.TryPop(&out).value() || out != std::vector<uint8_t>(200, 1)) return 3;
    if (!consumer.Pop(&out, 60s).value() || out != std::vector<uint8_t>(100, 2)) return 4;
    return 0;
  });
  Status pushed = producer.Push(std::vector<uint8_t>(100, 2), 60s);
  EXPECT_TRUE(pushed.ok()) << pushed.ToString();
  EXPECT_EQ(WaitChild(child), 0);
  Status timeout = producer.Push(std::vector<uint8_t>(200, 3), 1ms);
  EXPECT_TRUE(timeout.ok());  // the child emptied the ring
  EXPECT_EQ(producer.Push(std::vector<uint8_t>(200, 3), 5ms).code(),
            StatusCode::kResourceExhausted);
}

// The producer streams with a heartbeat; the consumer polls with a bounded Pop and checks the
// producer's liveness between pops. After SIGKILL it must notice within about a second, every
// message it received must be whole, and it must never block past its timeouts.
TEST(SpscRingTest, ProducerKilledMidStreamIsDetectedAndNeverWedges) {
  SharedRing shared(16 << 10, 2048);
  std::atomic<uint32_t>* started = SharedRing::Word(shared.segment, 0);
  pid_t child = ForkChild([&] {
    StatusOr<Segment> s = Segment::Open(shared.name, SegmentKind::kScratch);
    if (!s.ok()) return 1;
    HeartbeatThread heartbeat(SharedRing::Beat(*s));
    auto producer = SpscRingProducer::Attach(SharedRing::RingSpan(*s)).value();
    std::mt19937_64 rng(99);
    SharedRing::Word(*s, 0)->store(1);
    for (uint64_t i = 0;; ++i) {
      if (!producer.Push(MakeMessage(i, 12 + rng() % 2000, rng), 60s).ok()) return 2;
    }
  });
  const ProcessIdentity identity{static_cast<uint32_t>(child), 0, ProcessStartTimeTicks(child)};
  ASSERT_TRUE(WaitFor([&] { return started->load() == 1; }));

  auto consumer = SpscRingConsumer::Attach(SharedRing::RingSpan(shared.segment)).value();
  std::vector<uint8_t> out;
  uint64_t next = 0;
  auto check_one = [&]() -> bool {
    uint64_t seq = 0;
    EXPECT_TRUE(CheckMessage(out, &seq));
    EXPECT_EQ(seq, next);
    ++next;
    return !::testing::Test::HasFailure();
  };
  while (next < 2000) {
    auto got = consumer.Pop(&out, 100ms);
    ASSERT_TRUE(got.ok());
    if (*got) {
      ASSERT_TRUE(check_one());
    }
  }
  ASSERT_EQ(kill(child, SIGKILL), 0);  // not reaped yet: a zombie until WaitChild
  const auto killed_at = std::chrono::steady_clock::now();
  LivenessOptions liveness;
  for (;;) {
    auto got = consumer.Pop(&out, 100ms);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    if (*got) {
      ASSERT_TRUE(check_one());
      continue;
    }
    if (CheckPeer(identity, *SharedRing::Beat(shared.segment), liveness) != PeerState::kAlive) {
      break;
    }
    ASSERT_LT(std::chrono::steady_clock::now() - killed_at, 30s) << "death never noticed";
  }
  const auto noticed_after = std::chrono::steady_clock::now() - killed_at;
  // ~1 s is the contract (heartbeat threshold); the pid check usually makes it immediate.
  // Allow generous slack for loaded machines.
  EXPECT_LT(noticed_after, 10s);
  EXPECT_EQ(WaitChild(child), 128 + SIGKILL);
  // Whatever was fully pushed is still readable and whole; nothing partial appears.
  while (consumer.TryPop(&out).value()) ASSERT_TRUE(check_one());
  auto got = consumer.Pop(&out, 20ms);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(*got);
}

}  // namespace
}  // namespace deltakv::shm
