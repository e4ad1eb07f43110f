// ShmSyncExecutor::Job's verify (the ranks' live checksums against a checkpoint manifest) and
// scrub (against the checksum table).
#include <filesystem>

#include "deltasync/checkpoint.h"
#include "sync/rank_collect.h"
#include "sync/shm_job.h"

namespace deltakv::sidecar {

using namespace shm_job;

// ------------------------------------------------------------------------------ verify, scrub

namespace {

// The checkpoint's manifest: manifest.json from the store, or computed from a local directory
// that has none.
StatusOr<deltasync::CheckpointManifest> ReadCheckpointManifest(deltasync::ObjectStore& store,
                                                               const std::string& location) {
  auto text = store.ReadObject(deltasync::kManifestFileName, 1ull << 30);
  if (text.ok()) return deltasync::ParseCheckpointManifest(*text);
  if (text.status().code() != StatusCode::kNotFound) return text.status();
  std::string dir = location.rfind("file://", 0) == 0 ? location.substr(7) : location;
  if (dir.empty() || dir[0] != '/' || !std::filesystem::is_directory(dir)) {
    return NotFound("checkpoint '" + location + "' has no " + deltasync::kManifestFileName +
                    " (write one with `deltakv checkpoint manifest`)");
  }
  ASSIGN_OR_RETURN(deltasync::Checkpoint ckpt, deltasync::Checkpoint::Open(dir));
  return deltasync::ComputeCheckpointManifest(ckpt, "", 0, false);
}

}  // namespace

Status ShmSyncExecutor::Job::RunVerify() {
  SetState(SyncState::kVerifying);
  const auto t0 = Clock::now();
  ASSIGN_OR_RETURN(auto store,
                   OpenStore(request_.checkpoint, ex_.options_.http, ex_.options_.volume_store,
                             VolumeView::kFiles, "checkpoint location"));
  ASSIGN_OR_RETURN(deltasync::CheckpointManifest cm,
                   ReadCheckpointManifest(*store, request_.checkpoint));
  Phase("manifest", MsSince(t0));
  RETURN_IF_ERROR(AttachRanks());
  ASSIGN_OR_RETURN(std::string ranks_version, RanksVersion());
  const auto t1 = Clock::now();
  ASSIGN_OR_RETURN(LiveChecksums live, Checksum(request_.rate_bytes_per_s, 0));
  Phase("checksum", MsSince(t1));
  std::map<std::string, const deltasync::ManifestTensor*> by_name;
  for (const deltasync::ManifestTensor& t : cm.tensors) by_name[t.name] = &t;
  std::vector<std::string> wrong;
  if (!cm.version.empty() && !ranks_version.empty() && cm.version != ranks_version) {
    wrong.push_back("the engine says it serves '" + ranks_version + "' but the checkpoint is '" +
                    cm.version + "'");
  }
  for (const auto& [name, t] : live.tensors) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      wrong.push_back("tensor '" + name +
                      "' is registered by the engine but not in the checkpoint");
      continue;
    }
    const deltasync::ManifestTensor& mt = *it->second;
    if (mt.end - mt.begin != t.canonical_bytes) {
      wrong.push_back("tensor '" + name + "': the checkpoint has " +
                      std::to_string(mt.end - mt.begin) + " bytes, the engine's layout " +
                      std::to_string(t.canonical_bytes));
      continue;
    }
    // The checkpoint's bytes [offset, offset + length) of the tensor.
    auto read = [&](uint64_t offset, uint64_t length) {
      return store->ReadRange(mt.file, mt.begin + offset, length);
    };
    bool partial = false;
    if (!slice_.whole() && t.layout != nullptr) {
      ASSIGN_OR_RETURN(NodeHolding h, HoldingOf(*t.layout, slice_));
      partial = h.bytes < t.canonical_bytes;
    }
    if (partial) {
      // The node holds part of the tensor: its ranks' sums cover only those bytes, so compare
      // them with the checkpoint's bytes at exactly those positions (read only those).
      auto expected = NodeOwnedSumsFromReads(*t.layout, slice_, read);
      if (!expected.ok()) {
        wrong.push_back("tensor '" + name + "': reading this node's part from the checkpoint: " +
                        expected.status().message());
        continue;
      }
      deltasync::AdlerDelta want, have;
      for (const deltasync::AdlerDelta& d : *expected) want.Merge(d);
      for (const RankTensorSums& r : t.ranks) have.Merge(r.owned);
      const std::string ranks = DifferingRanks(t, *expected);
      if (ranks.empty() && want.s1() == have.s1() && want.s2() == have.s2()) continue;
      wrong.push_back("tensor '" + name + "' (split over nodes; node '" + NodeName() +
                      "' holds part of it at global ranks " + SliceText() +
                      (ranks.empty() ? "" : "; differing: local " + ranks) +
                      "): the engine's part has Adler-32 partial sums " + SumsText(have) +
                      ", the checkpoint's bytes there give " + SumsText(want));
      continue;
    }
    const uint32_t now = t.Adler32();
    if (now == mt.adler32) continue;
    // Name the ranks: read the tensor from the checkpoint and compare each rank's owned bytes.
    std::string ranks;
    if (t.layout != nullptr && slice_.whole()) {
      auto bytes = read(0, mt.end - mt.begin);
      if (bytes.ok()) {
        std::span<const uint8_t> span(reinterpret_cast<const uint8_t*>(bytes->data()),
                                      bytes->size());
        ranks = DifferingRanks(t, ExpectedOwnedSums(*t.layout, span, world_));
      }
    } else if (t.layout != nullptr) {
      // A slice's ranks own bytes at the lowest node rank holding them, not the group's.
      auto expected = NodeOwnedSumsFromReads(*t.layout, slice_, read);
      if (expected.ok()) ranks = DifferingRanks(t, *expected);
    }
    wrong.push_back("tensor '" + name + "'" + (ranks.empty() ? "" : " (" + ranks + ")") +
                    ": the engine holds Adler-32 " + Hex(now) + ", the checkpoint has " +
                    Hex(mt.adler32));
  }
  for (std::string& s : live.ReplicaMismatches()) wrong.push_back(std::move(s));
  update_([&](SyncRecord& r) { r.mismatches = wrong; });
  if (!wrong.empty()) {
    return Diverge("verify against '" + request_.checkpoint + "' found " +
                   std::to_string(wrong.size()) + " difference(s): " + JoinFirst(wrong));
  }
  ChecksumTable t = TableFromLive(live, ranks_version.empty() ? cm.version : ranks_version,
                                  "checkpoint " + RedactLocation(request_.checkpoint));
  t.checkpoint_verified = true;
  ex_.SetTable(std::move(t));
  return Status::Ok();
}

Status ShmSyncExecutor::Job::RunScrub() {
  SetState(SyncState::kVerifying);
  // A stop request is for this scrub only: clear it when the scrub ends, however it ends.
  struct ClearStop {
    std::atomic<bool>& flag;
    ~ClearStop() { flag.store(false); }
  } clear_stop{ex_.stop_scrub_};
  ChecksumTable table = ex_.table();
  if (table.empty()) {
    return FailedPrecondition(
        "nothing to scrub against: no checksum table yet (POST /v1/verify "
        "with the checkpoint the engine loaded, or run a sync)");
  }
  RETURN_IF_ERROR(AttachRanks());
  if (!table.ForSlice(slice_.first, slice_.count, slice_.world)) {
    return FailedPrecondition(
        "nothing to scrub against: the checksum table was made for other "
        "ranks of the group than global ranks " +
        SliceText() + " (POST /v1/verify with the checkpoint the engine loaded)");
  }
  const auto t0 = Clock::now();
  ASSIGN_OR_RETURN(LiveChecksums live, Checksum(request_.rate_bytes_per_s, shm::kVerifyScrub));
  Phase("checksum", MsSince(t0));
  std::vector<std::string> wrong = CompareWithTable(live, table);
  update_([&](SyncRecord& r) { r.mismatches = wrong; });
  if (!wrong.empty()) {
    return Diverge("scrub found the live weights differ from the checksum table: " +
                   JoinFirst(wrong));
  }
  return Status::Ok();
}

}  // namespace deltakv::sidecar
