#include "sync/rank_collect.h"

#include "log/log.h"

namespace deltakv::sidecar {

Status CollectFromRanks(const std::vector<shm::RankChannel*>& channels, const CollectSpec& spec) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + spec.timeout;
  std::vector<bool> done(channels.size(), false);
  std::vector<uint8_t> buf;
  for (;;) {
    bool all = true;
    for (uint32_t r = 0; r < channels.size(); ++r) {
      if (done[r]) continue;
      all = false;
      const std::string who = "engine rank " + std::to_string(r);
      auto popped = channels[r]->responses.Pop(&buf, std::chrono::milliseconds(20));
      if (!popped.ok()) return popped.status().WithPrefix(who);
      if (!*popped) {
        Status gone = spec.rank_gone ? spec.rank_gone(r) : Status::Ok();
        if (!gone.ok()) {
          if (!spec.on_error) return gone;
          ASSIGN_OR_RETURN(bool finished, spec.on_error(r, gone.message()));
          done[r] = finished;
        }
        continue;
      }
      auto msg = shm::DecodeMessage(buf);
      if (!msg.ok()) {
        // A message that does not decode is logged and ignored, never acted on (PROTOCOL.md
        // section 6); the rank's answer may still come.
        log::Warn("ignored a message that does not decode",
                  {{"rank", r}, {"error", msg.status().message()}});
        continue;
      }
      if (msg->sync_id != spec.id) continue;
      if (msg->type == shm::MessageType::kError) {
        auto text = shm::ParseText(*msg);
        const std::string why = text.ok() ? *text : who + " failed";
        if (!spec.on_error) return DataLoss(why);
        ASSIGN_OR_RETURN(bool finished, spec.on_error(r, why));
        done[r] = finished;
        continue;
      }
      if (msg->type != spec.want) continue;
      ASSIGN_OR_RETURN(bool finished, spec.on_reply(r, *msg));
      done[r] = finished;
    }
    if (all) return Status::Ok();
    if (Clock::now() > deadline) {
      std::string missing;
      for (uint32_t r = 0; r < channels.size(); ++r) {
        if (!done[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      return FailedPrecondition("engine ranks " + missing + " did not answer " +
                                std::string(shm::MessageTypeName(spec.want)) + " within " +
                                std::to_string(spec.timeout.count()) + " ms");
    }
  }
}

}  // namespace deltakv::sidecar
