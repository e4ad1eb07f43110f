#include "sync/live_checksums.h"

#include <cstdio>

#include "deltasync/delta_manifest.h"
#include "deltasync/plan_verify.h"
#include "sync/rank_collect.h"

namespace deltakv::sidecar {

namespace {

std::string Sums(const deltasync::AdlerDelta& d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "s1=%u s2=%u", d.s1(), d.s2());
  return buf;
}

bool Same(const deltasync::AdlerDelta& a, const deltasync::AdlerDelta& b) {
  return a.s1() == b.s1() && a.s2() == b.s2();
}

}  // namespace

uint32_t TensorLive::Adler32() const {
  deltasync::AdlerDelta total;
  for (const RankTensorSums& r : ranks) total.Merge(r.owned);
  return total.Apply(deltasync::Adler32OfZeros(canonical_bytes), canonical_bytes);
}

std::vector<std::string> LiveChecksums::ReplicaMismatches() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors) {
    for (uint32_t h = 0; h < t.ranks.size(); ++h) {
      // A holder that sent no REPLICA entry counts as zero sums (PROTOCOL.md 9.4): owners'
      // nonzero sums for it are a mismatch too.
      deltasync::AdlerDelta want;
      for (uint32_t r = 0; r < t.ranks.size(); ++r) {
        auto it = t.ranks[r].refs.find(h);
        if (r != h && it != t.ranks[r].refs.end()) want.Merge(it->second);
      }
      if (!Same(want, t.ranks[h].replica)) {
        out.push_back("tensor '" + name + "': rank " + std::to_string(h) +
                      " serves a replica that differs from its owners' bytes (replica sums " +
                      Sums(t.ranks[h].replica) + ", owners' " + Sums(want) + ")");
      }
    }
  }
  return out;
}

StatusOr<LiveChecksums> CollectLiveChecksums(
    const std::vector<shm::RankChannel*>& channels,
    const std::vector<deltasync::EngineTensorTable>& tables, uint64_t job_id,
    const shm::VerifyRequest& request, std::chrono::milliseconds timeout,
    const std::function<Status(uint32_t)>& rank_gone) {
  if (channels.size() != tables.size()) return Internal("ranks and tensor tables disagree");
  const auto t0 = std::chrono::steady_clock::now();
  const uint32_t world = static_cast<uint32_t>(channels.size());
  LiveChecksums out;
  for (uint32_t r = 0; r < world; ++r) {
    for (const deltasync::EngineTensor& e : tables[r].tensors) {
      TensorLive& t = out.tensors[e.name];
      t.canonical_bytes = e.layout.canonical_bytes();
      if (t.layout == nullptr) t.layout = &e.layout;
      t.ranks.resize(world);
    }
  }
  const shm::Message verify = shm::MakeVerify(job_id, request);
  for (uint32_t r = 0; r < world; ++r) {
    auto bytes = shm::EncodeMessage(verify);
    if (!bytes.ok()) return bytes.status();
    RETURN_IF_ERROR(channels[r]->commands.Push(*bytes, std::chrono::seconds(2))
                        .WithPrefix("engine rank " + std::to_string(r) + ": sending VERIFY"));
  }
  std::vector<uint32_t> parts(world, 0);
  CollectSpec spec;
  spec.id = job_id;
  spec.want = shm::MessageType::kVerified;
  spec.timeout = timeout;
  spec.rank_gone = rank_gone;
  spec.on_reply = [&](uint32_t r, const shm::Message& msg) -> StatusOr<bool> {
    ASSIGN_OR_RETURN(shm::StagedReport rep, shm::ParseVerified(msg));
    const std::string who = "engine rank " + std::to_string(r);
    if (rep.part_index != parts[r]) {
      return DataLoss(who + " sent VERIFIED part " + std::to_string(rep.part_index) +
                      " where part " + std::to_string(parts[r]) + " was due");
    }
    for (const shm::StagedEntry& e : rep.entries) {
      if (e.tensor_index >= tables[r].tensors.size()) {
        return DataLoss(who + " reported tensor index " + std::to_string(e.tensor_index) +
                        " but registered " + std::to_string(tables[r].tensors.size()));
      }
      RankTensorSums& s = out.tensors[tables[r].tensors[e.tensor_index].name].ranks[r];
      auto d = deltasync::AdlerDelta::FromSums(e.s1, e.s2);
      switch (shm::VerifiedEntry::Kind(e.flags)) {
        case shm::VerifiedEntry::kOwned:
          s.reported = true;
          s.owned.Merge(d);
          break;
        case shm::VerifiedEntry::kReplica:
          s.has_replica = true;
          s.replica.Merge(d);
          break;
        default: {
          const uint32_t holder = shm::VerifiedEntry::Holder(e.flags);
          if (holder >= world || holder == r) {
            return DataLoss(who + " reported replica sums for rank " + std::to_string(holder));
          }
          s.refs[holder].Merge(d);
        }
      }
    }
    out.bytes_read += rep.changed_bytes;
    return ++parts[r] == rep.part_count;
  };
  RETURN_IF_ERROR(CollectFromRanks(channels, spec));
  for (const auto& [name, t] : out.tensors) {
    for (uint32_t r = 0; r < world; ++r) {
      bool registered = false;
      for (const deltasync::EngineTensor& e : tables[r].tensors) registered |= e.name == name;
      if (registered && !t.ranks[r].reported) {
        return DataLoss("engine rank " + std::to_string(r) + " sent no checksum for tensor '" +
                        name + "'");
      }
    }
  }
  out.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

std::vector<deltasync::AdlerDelta> ExpectedOwnedSums(const deltasync::TensorLayout& layout,
                                                     std::span<const uint8_t> bytes,
                                                     uint32_t world) {
  std::vector<deltasync::AdlerDelta> sums(world);
  if (bytes.empty() || bytes.size() != layout.canonical_bytes()) return sums;
  (void)layout.ForEachPiece(0, bytes.size(), [&](const deltasync::LayoutPiece& p) {
    if (p.owner && p.rank < world) {
      sums[p.rank].AddBytes(p.canonical_offset, bytes.subspan(p.canonical_offset, p.length));
    }
  });
  return sums;
}

std::string DifferingRanks(const TensorLive& live,
                           const std::vector<deltasync::AdlerDelta>& expected) {
  std::string out;
  for (uint32_t r = 0; r < live.ranks.size() && r < expected.size(); ++r) {
    if (!Same(live.ranks[r].owned, expected[r])) {
      out += (out.empty() ? "rank " : ", ") + std::to_string(r);
    }
  }
  return out;
}

}  // namespace deltakv::sidecar
