// CollectFromRanks: the sidecar's one loop for waiting on replies from every engine rank.
//
// It polls each rank's response ring in turn until every rank is done, and is the single
// place where the sync's failure rules for replies live: a reply about another sync or job id
// is skipped; an undecodable reply, a rank's ERROR (unless `on_error` takes it) or a rank
// judged gone (`rank_gone`: slot re-claimed, process dead or a zombie, heartbeat stale) fails
// the wait with a message naming the rank; so does the deadline.
//
// Thread-safety: uses the channels' consumer ends; one caller at a time.
#pragma once

#include <chrono>
#include <functional>
#include <vector>

#include "base/status.h"
#include "shm/control_block.h"
#include "shm/messages.h"

namespace deltakv::sidecar {

struct CollectSpec {
  uint64_t id = 0;  // sync or job id the replies must carry
  shm::MessageType want = shm::MessageType::kStaged;
  std::chrono::milliseconds timeout{120000};
  // OK while rank r is alive and still the incarnation the sync started with.
  std::function<Status(uint32_t)> rank_gone;
  // Called for each `want` reply; returns true once rank r has said all it will.
  std::function<StatusOr<bool>(uint32_t, const shm::Message&)> on_reply;
  // When set, a rank's ERROR text, or the reason `rank_gone` gave, goes here instead of failing
  // the wait (returns true: that rank is done). Used after COMMIT, where one rank's failure
  // must not stop the others' confirmations from being collected.
  std::function<StatusOr<bool>(uint32_t, const std::string&)> on_error;
};

// OK once every rank in `channels` (index = rank) is done. On error, ranks' remaining replies
// are left in their rings (the next wait skips them by id).
Status CollectFromRanks(const std::vector<shm::RankChannel*>& channels, const CollectSpec& spec);

}  // namespace deltakv::sidecar
