// CollectFromRanks: what the sidecar does with each message a rank's response ring brings while
// it waits for a reply: one that does not decode is logged and ignored (PROTOCOL.md section 6),
// replies for another job are skipped, and the wanted reply completes the wait.
#include "sync/rank_collect.h"

#include <gtest/gtest.h>

#include <cstring>

#include "shm/control_block.h"
#include "shm/messages.h"
#include "shm_test_util.h"

namespace deltakv::sidecar {
namespace {

using namespace std::chrono_literals;

std::vector<uint8_t> Raw(uint32_t type, uint64_t sync_id) {
  std::vector<uint8_t> out(16, 0);
  std::memcpy(out.data(), &type, 4);  // payload_length 0
  std::memcpy(out.data() + 8, &sync_id, 8);
  return out;
}

TEST(RankCollect, UndecodableMessagesAreIgnoredAndTheReplyStillCounts) {
  const std::string name = shm::testing::UniqueName("collect");
  shm::testing::ScopedUnlink cleanup(name);
  auto sidecar = shm::ControlBlock::Create(name).value();
  auto engine = shm::ControlBlock::Attach(name).value();
  shm::RankHandle rank = engine->RegisterRank(0, 1).value();
  std::vector<shm::RankInfo> active = sidecar->ActiveRanks();
  ASSERT_EQ(active.size(), 1u);
  shm::RankChannel channel = sidecar->OpenChannel(active[0]).value();

  const uint64_t job = 7;
  ASSERT_TRUE(rank.responses().TryPush(Raw(99, job)).ok());  // unknown type
  std::vector<uint8_t> short_payload = Raw(1, 0);              // a PING without its nonce
  ASSERT_TRUE(rank.responses().TryPush(short_payload).ok());
  auto other = shm::EncodeMessage(shm::MakeText(shm::MessageType::kAborted, job + 1, "old").value());
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(rank.responses().TryPush(*other).ok());  // another job's: skipped
  auto reply = shm::EncodeMessage(shm::MakeText(shm::MessageType::kAborted, job, "done").value());
  ASSERT_TRUE(reply.ok());
  ASSERT_TRUE(rank.responses().TryPush(*reply).ok());

  CollectSpec spec;
  spec.id = job;
  spec.want = shm::MessageType::kAborted;
  spec.timeout = 10000ms;
  int replies = 0;
  spec.on_reply = [&](uint32_t r, const shm::Message& msg) -> StatusOr<bool> {
    EXPECT_EQ(r, 0u);
    EXPECT_EQ(msg.sync_id, job);
    ++replies;
    return true;
  };
  std::vector<shm::RankChannel*> channels = {&channel};
  Status s = CollectFromRanks(channels, spec);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(replies, 1);
}

}  // namespace
}  // namespace deltakv::sidecar
