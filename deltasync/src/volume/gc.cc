// Volumes::Gc: mark chunks from leases, restorable versions and live versions; sweep the rest
// (VOLUME.md, "Garbage collection").
#include <functional>
#include <set>

#include "deltasync/volume.h"
#include "volume/names.h"
#include "volume/records.h"

namespace deltakv::deltasync {
namespace {

struct Plan {
  std::set<std::string> marked;          // chunk digests to keep
  std::set<std::string> live_versions;   // "<ns>/<name>/<digest>"
  std::vector<std::string> doomed_keys;  // expired leases and retention records
  std::vector<std::string> purged;       // "<ns>/<name>/<digest>" past its window
  GcResult result;
  GcProgress progress;
  const std::function<void(const GcProgress&)>* report = nullptr;

  // Counts one more record read and reports.
  void RecordRead() {
    ++progress.objects_scanned;
    Report();
  }
  void Report() {
    progress.chunks_deleted = result.chunks_deleted;
    progress.bytes_freed = result.bytes_freed;
    if (report != nullptr && *report) (*report)(progress);
  }
};

// The gc sweep marker, held from Acquire until destruction. Released by writing an expired
// marker with the generation this gc wrote, so a gc that outlived its marker never releases
// the marker of another gc that took it over.
class Marker {
 public:
  static StatusOr<std::unique_ptr<Marker>> Acquire(VolumeStore& store, int64_t now, int64_t ttl) {
    const std::string key(keys::kGcMarker);
    std::string expected;
    auto current = store.GetVersioned(key, kMaxSmallRecordBytes);
    if (current.ok()) {
      ASSIGN_OR_RETURN(MarkerRecord held, ParseMarkerRecord(current->data, key));
      if (held.expires > now) {
        return FailedPrecondition("gc: another gc holds '" + key + "' until " +
                                  std::to_string(held.expires));
      }
      expected = current->generation;
    } else if (current.status().code() != StatusCode::kNotFound) {
      return current.status();
    }
    const std::string mine = MarkerRecordJson({now + ttl, RandomId()});
    auto generation = store.PutIfGeneration(key, Bytes(mine), expected);
    if (!generation.ok()) {
      // A write whose answer was lost may fail on its retry although it took effect (VOLUME.md,
      // section 2.1): if the marker names this run as its holder, this run holds it (and
      // releases it when done).
      auto back = store.GetVersioned(key, kMaxSmallRecordBytes);
      if (back.ok() && back->data == mine) generation = std::move(back->generation);
    }
    if (generation.status().code() == StatusCode::kFailedPrecondition) {
      return FailedPrecondition("gc: another gc holds '" + key + "' (it took it first)");
    }
    if (!generation.ok()) return generation.status().WithPrefix("gc: take the sweep marker");
    return std::unique_ptr<Marker>(new Marker(store, now + ttl, std::move(*generation)));
  }
  Marker(const Marker&) = delete;
  Marker& operator=(const Marker&) = delete;
  ~Marker() {
    // FailedPrecondition here means another gc holds the marker now: it is left to that gc.
    (void)store_.PutIfGeneration(std::string(keys::kGcMarker), Bytes(MarkerRecordJson({})),
                                 generation_);
  }
  int64_t expires() const { return expires_; }

 private:
  Marker(VolumeStore& store, int64_t expires, std::string generation)
      : store_(store), expires_(expires), generation_(std::move(generation)) {}
  VolumeStore& store_;
  int64_t expires_;
  std::string generation_;
};

// Lists the records of one kind ("pushes/", "removed/", "versions/") of every volume.
StatusOr<std::vector<keys::RecordKey>> ListKind(VolumeStore& store, std::string_view kind) {
  ASSIGN_OR_RETURN(std::vector<std::string> all, store.List(std::string(keys::kVolumes)));
  std::vector<keys::RecordKey> out;
  for (const std::string& key : all) {
    std::optional<keys::RecordKey> k = keys::SplitRecordKey(key);
    if (k && k->kind == kind) out.push_back(std::move(*k));
  }
  return out;
}

void MarkManifest(const VolumeManifest& m, Plan& plan) {
  for (const VolumeFile& f : m.files) {
    for (const VolumeChunk& c : f.chunks) {
      plan.marked.insert(c.digest);
      for (const XorLink& link : c.xor_chain) {
        plan.marked.insert(link.base);
        plan.marked.insert(link.delta);
      }
    }
  }
}

// Deletes (or, for a dry run, counts) the unmarked chunks, then the doomed records. Before
// every delete it checks that the marker still holds: a gc whose marker expired may have been
// overtaken by a push that the marks do not cover.
StatusOr<GcResult> Sweep(VolumeStore& store, const std::vector<std::string>& chunks, Plan& plan,
                         const std::function<int64_t()>& now, int64_t marker_expires,
                         bool dry_run) {
  auto still_held = [&]() -> Status {
    if (dry_run || now() < marker_expires) return Status::Ok();
    return FailedPrecondition("gc: the sweep marker expired after " +
                              std::to_string(plan.result.chunks_deleted) +
                              " chunk(s) were deleted; nothing more was deleted");
  };
  if (!dry_run && now() >= marker_expires) {
    return FailedPrecondition("gc: marking outlasted the sweep marker; nothing was deleted");
  }
  for (const std::string& key : chunks) {
    const std::string digest = key.substr(key.rfind('/') + 1);
    ++plan.progress.chunks_checked;
    if (plan.marked.count(digest)) {
      ++plan.result.chunks_kept;
      plan.Report();
      continue;
    }
    ASSIGN_OR_RETURN(uint64_t size, store.Size(key));
    RETURN_IF_ERROR(still_held());
    if (!dry_run) RETURN_IF_ERROR(store.Delete(key));
    ++plan.result.chunks_deleted;
    plan.result.bytes_freed += size;
    plan.Report();
  }
  for (const std::string& v : plan.purged) {
    if (plan.live_versions.count(v)) continue;
    const size_t a = v.find('/'), b = v.rfind('/');
    const std::string info =
        keys::Record(v.substr(0, a), v.substr(a + 1, b - a - 1), keys::kInfo, v.substr(b + 1));
    plan.doomed_keys.push_back(info);
  }
  plan.result.versions_purged = plan.purged.size();
  if (dry_run) return plan.result;
  for (const std::string& key : plan.doomed_keys) {
    RETURN_IF_ERROR(still_held());
    RETURN_IF_ERROR(store.Delete(key));
  }
  return plan.result;
}

Status MarkLeases(VolumeStore& store, int64_t now, Plan& plan) {
  ASSIGN_OR_RETURN(std::vector<keys::RecordKey> leases, ListKind(store, keys::kPushes));
  for (const keys::RecordKey& k : leases) {
    auto text = store.Get(k.key, kMaxLeaseBytes);
    if (text.status().code() == StatusCode::kNotFound) continue;  // its push just finished
    if (!text.ok()) return text.status();
    plan.RecordRead();
    ASSIGN_OR_RETURN(LeaseRecord lease, ParseLeaseRecord(*text, k.key));
    if (lease.expires <= now) {
      plan.doomed_keys.push_back(k.key);
      ++plan.result.leases_expired;
      continue;
    }
    plan.marked.insert(lease.chunks.begin(), lease.chunks.end());
  }
  return Status::Ok();
}

Status MarkVersions(VolumeStore& store, uint64_t max_manifest_bytes, Plan& plan) {
  ASSIGN_OR_RETURN(std::vector<keys::RecordKey> versions, ListKind(store, keys::kVersions));
  for (const keys::RecordKey& k : versions) {
    auto m = ReadManifest(store, k.ns, k.name, k.id, max_manifest_bytes);
    if (m.status().code() == StatusCode::kNotFound) continue;  // just removed: its record follows
    if (!m.ok()) return m.status();
    plan.RecordRead();
    MarkManifest(*m, plan);
    plan.live_versions.insert(k.ns + "/" + k.name + "/" + k.id);
  }
  return Status::Ok();
}

Status MarkRemoved(VolumeStore& store, int64_t now, const VolumesOptions& options, Plan& plan) {
  ASSIGN_OR_RETURN(std::vector<keys::RecordKey> removed, ListKind(store, keys::kRemoved));
  for (const keys::RecordKey& k : removed) {
    auto text = store.Get(k.key, MaxRemovedRecordBytes(options.max_manifest_bytes));
    if (text.status().code() == StatusCode::kNotFound) continue;  // restored: live or leased
    if (!text.ok()) return text.status();
    plan.RecordRead();
    ASSIGN_OR_RETURN(RemovedRecord r, ParseRemovedRecord(*text, k.key));
    if (r.removed_at + options.retention_s <= now) {
      plan.doomed_keys.push_back(k.key);
      plan.purged.push_back(k.ns + "/" + k.name + "/" + k.id);
      continue;
    }
    ASSIGN_OR_RETURN(VolumeManifest m, VerifyManifest(k.key, r.manifest, k.ns, k.name, k.id));
    MarkManifest(m, plan);
  }
  return Status::Ok();
}

}  // namespace

StatusOr<GcResult> Volumes::Gc(const GcOptions& options) {
  std::unique_ptr<Marker> marker;
  if (!options.dry_run) {
    ASSIGN_OR_RETURN(marker, Marker::Acquire(store_, Now(), options_.gc_marker_ttl_s));
  }
  const int64_t now = Now();
  // Chunks first, then leases, versions and retention records: VOLUME.md says why.
  ASSIGN_OR_RETURN(std::vector<std::string> chunks, store_.List(std::string(keys::kChunks)));
  ASSIGN_OR_RETURN(std::vector<std::string> deltas, store_.List(std::string(keys::kXorChunks)));
  chunks.insert(chunks.end(), deltas.begin(), deltas.end());
  Plan plan;
  plan.report = &options.progress;
  plan.progress.chunks_total = chunks.size();
  plan.progress.objects_scanned = chunks.size();
  plan.Report();
  RETURN_IF_ERROR(MarkLeases(store_, now, plan));
  RETURN_IF_ERROR(MarkVersions(store_, options_.max_manifest_bytes, plan));
  RETURN_IF_ERROR(MarkRemoved(store_, now, options_, plan));
  auto clock = [this] { return Now(); };
  ASSIGN_OR_RETURN(GcResult result, Sweep(store_, chunks, plan, clock,
                                          marker ? marker->expires() : 0, options.dry_run));
  if (!options.dry_run) {
    // A write in progress finishes within a push's lease: older temporaries were abandoned.
    ASSIGN_OR_RETURN(result.temporaries_removed,
                     store_.RemoveAbandonedTemporaries(now - options_.lease_ttl_s));
  }
  plan.progress.done = true;
  plan.Report();
  return result;
}

}  // namespace deltakv::deltasync
