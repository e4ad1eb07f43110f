// Volumes: resolve, show, list, tags, remove and restore.
#include <algorithm>
#include <chrono>
#include <map>
#include <utility>

#include "deltasync/volume.h"
#include "volume/names.h"
#include "volume/records.h"

namespace deltakv::deltasync {
namespace {

constexpr int kTagMoveAttempts = 16;

int64_t SystemNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Adds a retention record to its volume's listing unless the version is live again.
Status AddRemoved(VolumeStore& store, const VolumesOptions& options, const keys::RecordKey& k,
                  VolumeListing& listing) {
  if (std::binary_search(listing.versions.begin(), listing.versions.end(), k.id)) {
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(std::string text,
                   store.Get(k.key, MaxRemovedRecordBytes(options.max_manifest_bytes)));
  ASSIGN_OR_RETURN(RemovedRecord r, ParseRemovedRecord(text, k.key));
  listing.removed.push_back({k.id, r.removed_at, r.removed_at + options.retention_s});
  return Status::Ok();
}

}  // namespace

Volumes::Volumes(VolumeStore& store, VolumesOptions options)
    : store_(store), options_(std::move(options)) {
  if (!options_.clock) options_.clock = SystemNow;
}

int64_t Volumes::Now() const { return options_.clock(); }

StatusOr<std::string> Volumes::Resolve(const VolumeRef& ref) {
  RETURN_IF_ERROR(ParseVolumeRef(ref.ToString()).status());
  if (ref.is_digest()) return ref.digest;
  ASSIGN_OR_RETURN(TagInfo tag, GetTag(ref.ns, ref.name, ref.tag));
  return tag.digest;
}

StatusOr<TagInfo> Volumes::GetTag(std::string_view ns, std::string_view name,
                                  std::string_view tag) {
  RETURN_IF_ERROR(ValidateVolumeTag(tag));
  const std::string key = keys::Record(ns, name, keys::kTags, tag);
  auto obj = store_.GetVersioned(key, kMaxSmallRecordBytes);
  if (obj.status().code() == StatusCode::kNotFound) {
    return NotFound("tag " + std::string(ns) + "/" + std::string(name) + ":" + std::string(tag) +
                    " does not exist");
  }
  if (!obj.ok()) return obj.status();
  ASSIGN_OR_RETURN(std::string digest, ParseTagRecord(obj->data, key));
  return TagInfo{std::string(tag), digest, obj->generation};
}

StatusOr<VolumeVersion> Volumes::Show(const VolumeRef& ref) {
  RETURN_IF_ERROR(ParseVolumeRef(ref.ToString()).status());
  TagInfo tag{"", ref.digest, ""};
  if (!ref.is_digest()) {
    ASSIGN_OR_RETURN(tag, GetTag(ref.ns, ref.name, ref.tag));
  }
  const std::string& digest = tag.digest;
  VolumeVersion v{{ref.ns, ref.name, digest, ""}, {}, std::nullopt, tag.generation};
  auto m = ReadManifest(store_, ref.ns, ref.name, digest, options_.max_manifest_bytes);
  if (m.status().code() == StatusCode::kNotFound) {
    const std::string key = keys::Record(ref.ns, ref.name, keys::kRemoved, digest);
    auto text = store_.Get(key, MaxRemovedRecordBytes(options_.max_manifest_bytes));
    if (!text.ok()) return NotFound("version " + v.ref.ToString() + " does not exist");
    ASSIGN_OR_RETURN(RemovedRecord r, ParseRemovedRecord(*text, key));
    return NotFound("version " + v.ref.ToString() + " was removed at " +
                    std::to_string(r.removed_at) + "; restorable until " +
                    std::to_string(r.removed_at + options_.retention_s));
  }
  if (!m.ok()) return m.status();
  v.manifest = std::move(m).value();
  const std::string info_key = keys::Record(ref.ns, ref.name, keys::kInfo, digest);
  auto info = store_.Get(info_key, kMaxSmallRecordBytes);
  if (info.status().code() == StatusCode::kNotFound) return v;  // its push died before it
  if (!info.ok()) return info.status();
  ASSIGN_OR_RETURN(v.created, ParseTimeRecord(*info, "created", info_key));
  return v;
}

StatusOr<std::vector<VolumeListing>> Volumes::List(std::string_view ns) {
  if (!ns.empty()) RETURN_IF_ERROR(ValidateVolumeName("namespace", ns));
  const std::string prefix =
      std::string(keys::kVolumes) + (ns.empty() ? "" : std::string(ns) + "/");
  ASSIGN_OR_RETURN(std::vector<std::string> all, store_.List(prefix));
  std::map<std::pair<std::string, std::string>, VolumeListing> out;
  std::vector<keys::RecordKey> removed;
  for (const std::string& key : all) {
    const std::optional<keys::RecordKey> k = keys::SplitRecordKey(key);
    if (!k) continue;
    VolumeListing& l = out[{k->ns, k->name}];
    l.ns = k->ns;
    l.name = k->name;
    if (k->kind == keys::kVersions) l.versions.push_back(k->id);
    if (k->kind == keys::kRemoved) removed.push_back(*k);
    if (k->kind == keys::kTags) {
      ASSIGN_OR_RETURN(TagInfo t, GetTag(k->ns, k->name, k->id));
      l.tags.push_back(std::move(t));
    }
  }
  for (const keys::RecordKey& k : removed) {
    RETURN_IF_ERROR(AddRemoved(store_, options_, k, out[{k.ns, k.name}]));
  }
  std::vector<VolumeListing> listings;
  for (auto& [id, l] : out) {
    if (!l.versions.empty() || !l.removed.empty() || !l.tags.empty()) listings.push_back(l);
  }
  return listings;
}

StatusOr<TagInfo> Volumes::Tag(const VolumeRef& ref, std::string_view tag,
                               std::optional<std::string> expected_generation) {
  RETURN_IF_ERROR(ValidateVolumeTag(tag));
  ASSIGN_OR_RETURN(std::string digest, Resolve(ref));
  const VolumeRef target{ref.ns, ref.name, digest, ""};
  ASSIGN_OR_RETURN(bool live,
                   store_.Exists(keys::Record(ref.ns, ref.name, keys::kVersions, digest)));
  if (!live) return NotFound("tag: version " + target.ToString() + " does not exist");
  const std::string key = keys::Record(ref.ns, ref.name, keys::kTags, tag);
  const std::string record = TagRecordJson(digest);
  for (int attempt = 0;; ++attempt) {
    std::string expected;
    if (expected_generation) {
      expected = *expected_generation;
    } else {
      auto current = GetTag(ref.ns, ref.name, tag);
      if (!current.ok() && current.status().code() != StatusCode::kNotFound)
        return current.status();
      if (current.ok()) expected = current->generation;
    }
    auto generation = store_.PutIfGeneration(key, Bytes(record), expected);
    if (generation.ok()) return TagInfo{std::string(tag), digest, *generation};
    const bool lost_race = generation.status().code() == StatusCode::kFailedPrecondition;
    if (expected_generation || !lost_race || attempt + 1 == kTagMoveAttempts) {
      return generation.status().WithPrefix("tag " + std::string(tag));
    }
  }
}

StatusOr<RemoveResult> Volumes::Remove(const VolumeRef& ref) {
  ASSIGN_OR_RETURN(std::string digest, Resolve(ref));
  const std::string key = keys::Record(ref.ns, ref.name, keys::kVersions, digest);
  auto text = store_.Get(key, options_.max_manifest_bytes);
  if (text.status().code() == StatusCode::kNotFound) {
    return NotFound("remove: version " + VolumeRef{ref.ns, ref.name, digest, ""}.ToString() +
                    " is not live");
  }
  if (!text.ok()) return text.status();
  RETURN_IF_ERROR(VerifyManifest(key, *text, ref.ns, ref.name, digest).status());
  const RemovedRecord record{*text, Now()};
  RETURN_IF_ERROR(store_.Put(keys::Record(ref.ns, ref.name, keys::kRemoved, digest),
                             Bytes(RemovedRecordJson(record))));
  RETURN_IF_ERROR(store_.Delete(key));
  RemoveResult result{{digest, record.removed_at, record.removed_at + options_.retention_s}, {}};
  const std::string tags_prefix = keys::Volume(ref.ns, ref.name) + std::string(keys::kTags);
  ASSIGN_OR_RETURN(std::vector<std::string> tag_keys, store_.List(tags_prefix));
  for (const std::string& k : tag_keys) {
    const std::optional<keys::RecordKey> rk = keys::SplitRecordKey(k);
    if (!rk) continue;
    ASSIGN_OR_RETURN(TagInfo t, GetTag(ref.ns, ref.name, rk->id));
    if (t.digest == digest) result.tags.push_back(t.tag);
  }
  return result;
}

Status Volumes::Restore(const VolumeRef& ref) {
  ASSIGN_OR_RETURN(std::string digest, Resolve(ref));
  const std::string where = "restore " + VolumeRef{ref.ns, ref.name, digest, ""}.ToString();
  const std::string key = keys::Record(ref.ns, ref.name, keys::kRemoved, digest);
  auto text = store_.Get(key, MaxRemovedRecordBytes(options_.max_manifest_bytes));
  if (text.status().code() == StatusCode::kNotFound) {
    return NotFound(where + ": no retention record (never removed, or purged by gc)");
  }
  if (!text.ok()) return text.status();
  ASSIGN_OR_RETURN(RemovedRecord record, ParseRemovedRecord(*text, key));
  const int64_t until = record.removed_at + options_.retention_s;
  if (Now() >= until) {
    return FailedPrecondition(where + ": removed at " + std::to_string(record.removed_at) +
                              "; the retention window ended at " + std::to_string(until));
  }
  ASSIGN_OR_RETURN(VolumeManifest m,
                   VerifyManifest(key, record.manifest, ref.ns, ref.name, digest));
  LeaseRecord lease_record{{}, Now() + options_.lease_ttl_s};
  for (const VolumeFile& f : m.files) {
    for (const VolumeChunk& c : f.chunks) lease_record.chunks.push_back(c.digest);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Lease> lease,
                   Lease::Acquire(store_, ref.ns, ref.name, std::move(lease_record), Now()));
  RETURN_IF_ERROR(SealManifest(ref.ns, ref.name, digest, record.manifest));
  return store_.Delete(key);
}

Status Volumes::SealManifest(const std::string& ns, const std::string& name,
                             const std::string& digest, const std::string& text) {
  // The creation record first: the version record seals, so a push that fails (a full store,
  // say) has sealed nothing, and a sealed version always has its record.
  Status st = store_.PutIfAbsent(keys::Record(ns, name, keys::kInfo, digest),
                                 Bytes(TimeRecordJson("created", Now())));
  if (!st.ok() && st.code() != StatusCode::kFailedPrecondition) return st;
  st = store_.PutIfAbsent(keys::Record(ns, name, keys::kVersions, digest), Bytes(text));
  return st.code() == StatusCode::kFailedPrecondition ? Status::Ok() : st;
}

}  // namespace deltakv::deltasync
