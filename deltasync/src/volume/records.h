// Private: the small JSON records of the volume layout (VOLUME.md, section 2) and the steps
// that several operations share: verified manifest reads, push leases, the gc sweep marker.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "deltasync/volume.h"

namespace deltakv::deltasync {

inline constexpr uint64_t kMaxSmallRecordBytes = 1 << 20;  // tags, info records, the marker
inline constexpr uint64_t kMaxLeaseBytes = 1ull << 30;
// The largest time a record may hold: 9999-12-31T23:59:59Z. Sums of such a time and a
// retention, lease or marker ttl (each below 2^40 s) cannot overflow int64.
inline constexpr int64_t kMaxRecordTime = 253402300799;
// A retention record holds a manifest as a JSON string: escaping at most doubles it.
inline uint64_t MaxRemovedRecordBytes(uint64_t max_manifest_bytes) {
  return 2 * max_manifest_bytes + 1024;
}

struct RemovedRecord {
  std::string manifest;  // the canonical manifest bytes
  int64_t removed_at = 0;
};

struct LeaseRecord {
  std::vector<std::string> chunks;  // 64-hex digests the holder relies on
  int64_t expires = 0;
};

std::string TagRecordJson(const std::string& digest);
StatusOr<std::string> ParseTagRecord(const std::string& text, const std::string& key);

std::string RemovedRecordJson(const RemovedRecord& r);
StatusOr<RemovedRecord> ParseRemovedRecord(const std::string& text, const std::string& key);

std::string LeaseRecordJson(const LeaseRecord& r);
StatusOr<LeaseRecord> ParseLeaseRecord(const std::string& text, const std::string& key);

// `{"created":T}` (info records) and `{"expires":T}` (the gc sweep marker). Every time field
// of every record is an integer from 0 to kMaxRecordTime; InvalidArgument naming the key
// otherwise.
std::string TimeRecordJson(const char* field, int64_t t);
StatusOr<int64_t> ParseTimeRecord(const std::string& text, const char* field,
                                  const std::string& key);

// The gc sweep marker `{"expires":T,"holder":"<id>"}`: `holder` names the gc run that wrote it,
// so a gc whose write was retried after a lost answer can tell its own marker from another's.
// A released marker has `expires` 0 and no holder.
struct MarkerRecord {
  int64_t expires = 0;
  std::string holder;  // 32 lowercase hex digits; empty in a released marker
};
std::string MarkerRecordJson(const MarkerRecord& r);
// InvalidArgument naming the key for a malformed marker (a holder that is not 32 hex digits).
StatusOr<MarkerRecord> ParseMarkerRecord(const std::string& text, const std::string& key);

// 32 random lowercase hex digits: the id of a lease, the holder of a marker.
std::string RandomId();

std::span<const uint8_t> Bytes(const std::string& s);

// Reads the delta object xchunks/sha256/<hex> (VOLUME.md, "Parent-XOR chunks") and checks that
// its bytes hash to `hex`. NotFound if absent; DataLoss naming the key on a mismatch;
// ResourceExhausted if it is larger than a chunk of `chunk_size` bytes can encode to.
StatusOr<std::string> ReadDeltaObject(VolumeStore& store, const std::string& hex,
                                      uint64_t chunk_size);

// Reads versions/<digest>.json of ns/name and returns the parsed manifest. NotFound if absent;
// DataLoss if its sha256 is not `digest`; InvalidArgument (naming the key) if it does not
// parse or names another volume.
StatusOr<VolumeManifest> ReadManifest(VolumeStore& store, const std::string& ns,
                                      const std::string& name, const std::string& digest,
                                      uint64_t max_bytes);
// Checks canonical bytes against a digest and a volume, then parses them (errors as above).
StatusOr<VolumeManifest> VerifyManifest(const std::string& key, const std::string& text,
                                        const std::string& ns, const std::string& name,
                                        const std::string& digest);

// A lease under volumes/<ns>/<name>/pushes/ that gc honours until it expires; deleted when
// the object is destroyed.
class Lease {
 public:
  // Writes the lease, then fails with FailedPrecondition if a gc sweep marker is held (the
  // lease is deleted again): the protocol in VOLUME.md, sections 6 and 7.
  static StatusOr<std::unique_ptr<Lease>> Acquire(VolumeStore& store, const std::string& ns,
                                                  const std::string& name, LeaseRecord record,
                                                  int64_t now);
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease();
  int64_t expires() const { return expires_; }

 private:
  Lease(VolumeStore& store, std::string key, int64_t expires)
      : store_(store), key_(std::move(key)), expires_(expires) {}
  VolumeStore& store_;
  std::string key_;
  int64_t expires_;
};

}  // namespace deltakv::deltasync
