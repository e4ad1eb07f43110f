// Private: digest text and the object keys of the volume layout (VOLUME.md, section 2).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace deltakv::deltasync {

inline constexpr std::string_view kDigestPrefix = "sha256:";

// True for exactly 64 lowercase hex digits.
bool IsHexDigest(std::string_view s);
// OK for "sha256:" + 64 lowercase hex; InvalidArgument "<what> '<text>' is not ..." otherwise.
Status ValidateDigestText(std::string_view what, std::string_view text);

namespace keys {

inline std::string Volume(std::string_view ns, std::string_view name) {
  return "volumes/" + std::string(ns) + "/" + std::string(name) + "/";
}
inline std::string Chunk(std::string_view hex) {
  return "chunks/sha256/" + std::string(hex.substr(0, 2)) + "/" + std::string(hex);
}
// A delta object (codec 2), named by the sha256 of its own bytes.
inline std::string XorChunk(std::string_view hex) {
  return "xchunks/sha256/" + std::string(hex.substr(0, 2)) + "/" + std::string(hex);
}
inline constexpr std::string_view kChunks = "chunks/sha256/";
inline constexpr std::string_view kXorChunks = "xchunks/sha256/";
inline constexpr std::string_view kVolumes = "volumes/";
inline constexpr std::string_view kGcMarker = "gc/sweep.json";

// Subdirectories of a volume; each object in one is "<id>.json".
inline constexpr std::string_view kVersions = "versions/";
inline constexpr std::string_view kInfo = "info/";
inline constexpr std::string_view kRemoved = "removed/";
inline constexpr std::string_view kTags = "tags/";
inline constexpr std::string_view kPushes = "pushes/";

inline std::string Record(std::string_view ns, std::string_view name, std::string_view kind,
                          std::string_view id) {
  return Volume(ns, name) + std::string(kind) + std::string(id) + ".json";
}

// A key "volumes/<ns>/<name>/<kind>/<id>.json", split; kind keeps its '/' ("tags/").
struct RecordKey {
  std::string key, ns, name, kind, id;
};
std::optional<RecordKey> SplitRecordKey(const std::string& key);

}  // namespace keys
}  // namespace deltakv::deltasync
