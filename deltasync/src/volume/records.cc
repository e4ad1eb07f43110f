#include "volume/records.h"

#include <random>

#include "volume/names.h"
#include "volume/strict_json.h"

namespace deltakv::deltasync {
namespace {

StatusOr<int64_t> TimeField(const Json& j, const char* field, const std::string& where) {
  ASSIGN_OR_RETURN(const Json* v, json_fields::Member(j, field, where));
  // Unsigned or signed, nlohmann keeps the exact value of any integer up to 64 bits.
  if (!v->is_number_integer() || (v->is_number_unsigned() && v->get<uint64_t>() > kMaxRecordTime) ||
      (!v->is_number_unsigned() && (v->get<int64_t>() < 0 || v->get<int64_t>() > kMaxRecordTime))) {
    return InvalidArgument(where + ": field '" + field + "' must be an integer from 0 to " +
                           std::to_string(kMaxRecordTime) + " (unix seconds)");
  }
  return v->get<int64_t>();
}

bool IsRandomId(const std::string& s) {
  return s.size() == 32 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

}  // namespace

std::string RandomId() {
  std::random_device rd;
  static const char kHex[] = "0123456789abcdef";
  std::string id;
  for (int i = 0; i < 4; ++i) {
    uint32_t word = rd();
    for (int k = 0; k < 8; ++k, word >>= 4) id += kHex[word & 15];
  }
  return id;
}

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string TagRecordJson(const std::string& digest) {
  return Json{{"digest", std::string(kDigestPrefix) + digest}}.dump();
}

StatusOr<std::string> ParseTagRecord(const std::string& text, const std::string& key) {
  const std::string where = "tag record '" + key + "'";
  ASSIGN_OR_RETURN(Json j, ParseStrictJson(text, where));
  RETURN_IF_ERROR(CheckFields(j, {"digest"}, {}, where));
  ASSIGN_OR_RETURN(std::string digest, json_fields::String(j, "digest", where));
  RETURN_IF_ERROR(ValidateDigestText("digest", digest).WithPrefix(where));
  return digest.substr(kDigestPrefix.size());
}

std::string RemovedRecordJson(const RemovedRecord& r) {
  return Json{{"manifest", r.manifest}, {"removed_at", r.removed_at}}.dump();
}

StatusOr<RemovedRecord> ParseRemovedRecord(const std::string& text, const std::string& key) {
  const std::string where = "retention record '" + key + "'";
  ASSIGN_OR_RETURN(Json j, ParseStrictJson(text, where));
  RETURN_IF_ERROR(CheckFields(j, {"manifest", "removed_at"}, {}, where));
  RemovedRecord r;
  ASSIGN_OR_RETURN(r.manifest, json_fields::String(j, "manifest", where));
  ASSIGN_OR_RETURN(r.removed_at, TimeField(j, "removed_at", where));
  return r;
}

std::string LeaseRecordJson(const LeaseRecord& r) {
  Json chunks = Json::array();
  for (const std::string& c : r.chunks) chunks.push_back(std::string(kDigestPrefix) + c);
  return Json{{"chunks", chunks}, {"expires", r.expires}}.dump();
}

StatusOr<LeaseRecord> ParseLeaseRecord(const std::string& text, const std::string& key) {
  const std::string where = "push lease '" + key + "'";
  ASSIGN_OR_RETURN(Json j, ParseStrictJson(text, where));
  RETURN_IF_ERROR(CheckFields(j, {"chunks", "expires"}, {}, where));
  LeaseRecord r;
  ASSIGN_OR_RETURN(r.expires, TimeField(j, "expires", where));
  ASSIGN_OR_RETURN(const Json* chunks, json_fields::Array(j, "chunks", where));
  for (const Json& c : *chunks) {
    if (!c.is_string()) return InvalidArgument(where + ": chunks must be strings");
    const std::string digest = c.get<std::string>();
    RETURN_IF_ERROR(ValidateDigestText("chunk", digest).WithPrefix(where));
    r.chunks.push_back(digest.substr(kDigestPrefix.size()));
  }
  return r;
}

std::string TimeRecordJson(const char* field, int64_t t) { return Json{{field, t}}.dump(); }

StatusOr<int64_t> ParseTimeRecord(const std::string& text, const char* field,
                                  const std::string& key) {
  const std::string where = "record '" + key + "'";
  ASSIGN_OR_RETURN(Json j, ParseStrictJson(text, where));
  RETURN_IF_ERROR(CheckFields(j, {field}, {}, where));
  return TimeField(j, field, where);
}

std::string MarkerRecordJson(const MarkerRecord& r) {
  Json j{{"expires", r.expires}};
  if (!r.holder.empty()) j["holder"] = r.holder;
  return j.dump();
}

StatusOr<MarkerRecord> ParseMarkerRecord(const std::string& text, const std::string& key) {
  const std::string where = "gc sweep marker '" + key + "'";
  ASSIGN_OR_RETURN(Json j, ParseStrictJson(text, where));
  RETURN_IF_ERROR(CheckFields(j, {"expires"}, {"holder"}, where));
  MarkerRecord r;
  ASSIGN_OR_RETURN(r.expires, TimeField(j, "expires", where));
  if (j.contains("holder")) {
    ASSIGN_OR_RETURN(r.holder, json_fields::String(j, "holder", where));
    if (!IsRandomId(r.holder)) {
      return InvalidArgument(where + ": field 'holder' must be 32 lowercase hex digits");
    }
  }
  return r;
}

std::optional<keys::RecordKey> keys::SplitRecordKey(const std::string& key) {
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t slash = key.find('/', start);
    parts.push_back(key.substr(start, slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  if (parts.size() != 5 || parts[0] + "/" != kVolumes || !parts[4].ends_with(".json")) {
    return std::nullopt;
  }
  return RecordKey{key, parts[1], parts[2], parts[3] + "/",
                   parts[4].substr(0, parts[4].size() - 5)};
}

StatusOr<VolumeManifest> VerifyManifest(const std::string& key, const std::string& text,
                                        const std::string& ns, const std::string& name,
                                        const std::string& digest) {
  const std::string actual = ManifestDigest(text);
  if (actual != digest) {
    return DataLoss("manifest '" + key + "': sha256 of its bytes is " + actual +
                    ", not the digest it is stored under");
  }
  auto m = ParseVolumeManifest(text);
  if (!m.ok()) return m.status().WithPrefix("'" + key + "'");
  if (m->ns != ns || m->name != name) {
    return InvalidArgument("manifest '" + key + "' names volume " + m->ns + "/" + m->name);
  }
  return m;
}

StatusOr<VolumeManifest> ReadManifest(VolumeStore& store, const std::string& ns,
                                      const std::string& name, const std::string& digest,
                                      uint64_t max_bytes) {
  const std::string key = keys::Record(ns, name, keys::kVersions, digest);
  ASSIGN_OR_RETURN(std::string text, store.Get(key, max_bytes));
  return VerifyManifest(key, text, ns, name, digest);
}

StatusOr<std::unique_ptr<Lease>> Lease::Acquire(VolumeStore& store, const std::string& ns,
                                                const std::string& name, LeaseRecord record,
                                                int64_t now) {
  const std::string key = keys::Record(ns, name, keys::kPushes, RandomId());
  const std::string text = LeaseRecordJson(record);
  if (Status written = store.PutIfAbsent(key, Bytes(text)); !written.ok()) {
    // The id is random, so a lease under it can only be this write: one whose answer was lost
    // took effect although its retry failed (VOLUME.md, section 2.1). Otherwise the write may
    // still have landed: it is deleted, so no orphan pins chunks until it expires.
    auto back = store.Get(key, kMaxLeaseBytes);
    if (!back.ok() || *back != text) {
      if (!back.ok() && back.status().code() != StatusCode::kNotFound) (void)store.Delete(key);
      return written;
    }
  }
  std::unique_ptr<Lease> lease(new Lease(store, key, record.expires));
  auto marker = store.GetVersioned(std::string(keys::kGcMarker), kMaxSmallRecordBytes);
  if (marker.status().code() == StatusCode::kNotFound) return lease;
  if (!marker.ok()) return marker.status();
  ASSIGN_OR_RETURN(MarkerRecord held,
                   ParseMarkerRecord(marker->data, std::string(keys::kGcMarker)));
  if (held.expires <= now) return lease;  // left behind by a gc that did not finish
  return FailedPrecondition("a gc sweep holds '" + std::string(keys::kGcMarker) + "' until " +
                            std::to_string(held.expires) + "; retry when it has finished");
}

Lease::~Lease() { (void)store_.Delete(key_); }

}  // namespace deltakv::deltasync
