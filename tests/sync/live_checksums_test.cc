// LiveChecksums::ReplicaMismatches: a holder's REPLICA sums must equal the sum of its owners'
// REPLICA_REF sums for it, a missing entry counting as zero sums (PROTOCOL.md 9.4).
#include "sync/live_checksums.h"

#include <gtest/gtest.h>

namespace deltakv::sidecar {
namespace {

deltasync::AdlerDelta Sums(uint8_t value, uint64_t at) {
  deltasync::AdlerDelta d;
  d.AddByte(at, 0, value);
  return d;
}

TEST(LiveChecksums, ReplicaMismatchesCountMissingEntriesAsZero) {
  LiveChecksums live;
  TensorLive& t = live.tensors["w"];
  t.canonical_bytes = 16;
  t.ranks.resize(3);
  // Rank 1 holds a replica of bytes rank 0 owns: equal sums, no mismatch.
  t.ranks[1].has_replica = true;
  t.ranks[1].replica = Sums(7, 3);
  t.ranks[0].refs[1] = Sums(7, 3);
  EXPECT_TRUE(live.ReplicaMismatches().empty());
  // Rank 2 sent no REPLICA entry, but rank 0 says rank 2 holds nonzero bytes it owns.
  t.ranks[0].refs[2] = Sums(9, 5);
  std::vector<std::string> wrong = live.ReplicaMismatches();
  ASSERT_EQ(wrong.size(), 1u);
  EXPECT_NE(wrong[0].find("rank 2"), std::string::npos) << wrong[0];
  // Zero sums on both sides agree.
  t.ranks[0].refs[2] = deltasync::AdlerDelta();
  EXPECT_TRUE(live.ReplicaMismatches().empty());
  // A replica whose owners sent nothing for it differs unless it is zero too.
  t.ranks[0].refs.erase(1);
  EXPECT_EQ(live.ReplicaMismatches().size(), 1u);
}

}  // namespace
}  // namespace deltakv::sidecar
