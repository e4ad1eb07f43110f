// The canonical volume manifest (VOLUME.md, "Manifest"): serialization, parsing, path rules.
#include <set>

#include "deltasync/volume.h"
#include "sha256.h"
#include "volume/names.h"
#include "volume/strict_json.h"

namespace deltakv::deltasync {
namespace {

constexpr size_t kMaxPathBytes = 4096;
constexpr size_t kMaxComponentBytes = 255;
constexpr uint64_t kMaxChunkBytes = 1ull << 30;

// Returns the length of the UTF-8 sequence at s[i], or 0 if it is not valid (overlong forms,
// surrogates and code points above U+10FFFF are invalid).
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto b = [&s](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  const size_t len = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
  if (len == 0) return 0;
  uint32_t cp = c & (0x7f >> len);
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3f);
  }
  static constexpr uint32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMinForLength[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

Status CheckPathBytes(std::string_view path, const std::string& where) {
  for (size_t i = 0; i < path.size();) {
    const auto c = static_cast<unsigned char>(path[i]);
    if (c < 0x20 || c == 0x7f) {
      return InvalidArgument(where + ": control character at byte " + std::to_string(i));
    }
    const size_t len = Utf8SequenceLength(path, i);
    if (len == 0) return InvalidArgument(where + ": invalid UTF-8 at byte " + std::to_string(i));
    i += len;
  }
  return Status::Ok();
}

std::string ModeText(uint32_t mode) { return mode == 0755 ? "0755" : "0644"; }

StatusOr<uint32_t> ParseMode(const Json& file, const std::string& where) {
  const auto it = file.find("mode");
  if (it != file.end() && *it == "0644") return 0644u;
  if (it != file.end() && *it == "0755") return 0755u;
  return InvalidArgument(where + ": mode must be the string \"0644\" or \"0755\"");
}

std::string DigestJson(const std::string& hex) {
  return JsonString(std::string(kDigestPrefix) + hex);
}

std::string ChunkJson(const VolumeChunk& c) {
  std::string out = "{\"digest\":" + DigestJson(c.digest) + ",\"offset\":" +
                    std::to_string(c.offset) + ",\"size\":" + std::to_string(c.size);
  if (!c.xor_chain.empty()) {
    out += ",\"xor\":[";
    for (size_t i = 0; i < c.xor_chain.size(); ++i) {
      out += std::string(i ? "," : "") + "{\"base\":" + DigestJson(c.xor_chain[i].base) +
             ",\"delta\":" + DigestJson(c.xor_chain[i].delta) + "}";
    }
    out += "]";
  }
  return out + "}";
}

std::string FileJson(const VolumeFile& f) {
  std::string out = "{\"chunks\":[";
  for (size_t i = 0; i < f.chunks.size(); ++i) out += (i ? "," : "") + ChunkJson(f.chunks[i]);
  return out + "],\"mode\":" + JsonString(ModeText(f.mode)) + ",\"path\":" + JsonString(f.path) +
         ",\"sha256\":" + JsonString(f.sha256) + ",\"size\":" + std::to_string(f.size) + "}";
}

std::string CanonicalBytes(const VolumeManifest& m) {
  std::string out = "{\"files\":[";
  for (size_t i = 0; i < m.files.size(); ++i) out += (i ? "," : "") + FileJson(m.files[i]);
  out += "],\"format\":" + JsonString(kVolumeFormat) + ",\"name\":" + JsonString(m.name) +
         ",\"ns\":" + JsonString(m.ns);
  if (!m.parent.empty()) out += ",\"parent\":" + JsonString(std::string(kDigestPrefix) + m.parent);
  return out + "}";
}

StatusOr<std::string> DigestField(const Json& obj, const char* key, const std::string& where) {
  ASSIGN_OR_RETURN(std::string text, json_fields::String(obj, key, where));
  RETURN_IF_ERROR(ValidateDigestText(std::string("field '") + key + "'", text).WithPrefix(where));
  return text.substr(kDigestPrefix.size());
}

// The chain must be 1..kMaxXorChain links whose bases differ from the chunk and each other
// (a chain that loops could never be resolved).
Status ParseXorChain(const Json& list, const std::string& where, VolumeChunk& c) {
  if (!list.is_array() || list.empty() || list.size() > kMaxXorChain) {
    return InvalidArgument(where + ": xor must be an array of 1.." +
                           std::to_string(kMaxXorChain) + " links");
  }
  std::set<std::string> seen = {c.digest};
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string lw = where + ": xor link " + std::to_string(i);
    RETURN_IF_ERROR(CheckFields(list[i], {"base", "delta"}, {}, lw));
    XorLink link;
    ASSIGN_OR_RETURN(link.base, DigestField(list[i], "base", lw));
    ASSIGN_OR_RETURN(link.delta, DigestField(list[i], "delta", lw));
    if (!seen.insert(link.base).second) {
      return InvalidArgument(lw + ": base " + link.base +
                             " is the chunk itself or an earlier base (the chain loops)");
    }
    c.xor_chain.push_back(std::move(link));
  }
  return Status::Ok();
}

StatusOr<VolumeChunk> ParseChunk(const Json& j, const std::string& where) {
  RETURN_IF_ERROR(CheckFields(j, {"digest", "offset", "size"}, {"xor"}, where));
  VolumeChunk c;
  ASSIGN_OR_RETURN(c.digest, DigestField(j, "digest", where));
  ASSIGN_OR_RETURN(c.offset, json_fields::Uint(j, "offset", where));
  ASSIGN_OR_RETURN(c.size, json_fields::Uint(j, "size", where));
  if (c.size == 0 || c.size > kMaxChunkBytes) {
    return InvalidArgument(where + ": size " + std::to_string(c.size) + " is not in 1.." +
                           std::to_string(kMaxChunkBytes));
  }
  if (const auto it = j.find("xor"); it != j.end()) {
    RETURN_IF_ERROR(ParseXorChain(*it, where, c));
  }
  return c;
}

// Chunks must cover [0, size) back to back, in order.
Status ParseChunks(const Json& list, const std::string& where, VolumeFile& f) {
  uint64_t next = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string cw = where + ": chunk " + std::to_string(i);
    ASSIGN_OR_RETURN(VolumeChunk c, ParseChunk(list[i], cw));
    if (c.offset != next) {
      return InvalidArgument(cw + ": offset " + std::to_string(c.offset) + ", expected " +
                             std::to_string(next) + (c.offset < next ? " (overlap)" : " (gap)"));
    }
    if (c.size > f.size - next) {
      return InvalidArgument(cw + ": ends at " + std::to_string(next + c.size) +
                             ", past the file size " + std::to_string(f.size));
    }
    next += c.size;
    f.chunks.push_back(std::move(c));
  }
  if (next != f.size) {
    return InvalidArgument(where + ": chunks cover " + std::to_string(next) + " bytes, file size " +
                           std::to_string(f.size));
  }
  return Status::Ok();
}

StatusOr<VolumeFile> ParseFile(const Json& j, const std::string& where) {
  RETURN_IF_ERROR(CheckFields(j, {"chunks", "mode", "path", "sha256", "size"}, {}, where));
  VolumeFile f;
  ASSIGN_OR_RETURN(f.path, json_fields::String(j, "path", where));
  RETURN_IF_ERROR(ValidateVolumePath(f.path).WithPrefix(where));
  const std::string fw = where + " '" + f.path + "'";
  ASSIGN_OR_RETURN(f.mode, ParseMode(j, fw));
  ASSIGN_OR_RETURN(f.sha256, json_fields::String(j, "sha256", fw));
  if (!IsHexDigest(f.sha256)) return InvalidArgument(fw + ": sha256 is not 64 lowercase hex");
  ASSIGN_OR_RETURN(f.size, json_fields::Uint(j, "size", fw));
  ASSIGN_OR_RETURN(const Json* chunks, json_fields::Array(j, "chunks", fw));
  RETURN_IF_ERROR(ParseChunks(*chunks, fw, f));
  return f;
}

// Paths strictly ascending by bytes, and no file is also a directory of another.
Status CheckFileSet(const std::vector<VolumeFile>& files) {
  std::set<std::string_view> paths;
  for (size_t i = 0; i < files.size(); ++i) {
    if (i > 0 && !(files[i - 1].path < files[i].path)) {
      return InvalidArgument("manifest: file '" + files[i].path + "' is a duplicate or out of " +
                             "order (files must be sorted by path bytes)");
    }
    paths.insert(files[i].path);
  }
  for (const VolumeFile& f : files) {
    for (size_t slash = f.path.find('/'); slash != std::string::npos;
         slash = f.path.find('/', slash + 1)) {
      if (paths.count(std::string_view(f.path).substr(0, slash))) {
        return InvalidArgument("manifest: '" + f.path.substr(0, slash) +
                               "' is both a file and the directory of '" + f.path + "'");
      }
    }
  }
  return Status::Ok();
}

StatusOr<VolumeManifest> ParseFields(const Json& j) {
  RETURN_IF_ERROR(CheckFields(j, {"files", "format", "name", "ns"}, {"parent"}, "manifest"));
  ASSIGN_OR_RETURN(std::string format, json_fields::String(j, "format", "manifest"));
  if (format != kVolumeFormat) {
    return InvalidArgument("manifest: format '" + format + "' is not '" +
                           std::string(kVolumeFormat) + "'");
  }
  VolumeManifest m;
  ASSIGN_OR_RETURN(m.ns, json_fields::String(j, "ns", "manifest"));
  ASSIGN_OR_RETURN(m.name, json_fields::String(j, "name", "manifest"));
  RETURN_IF_ERROR(ValidateVolumeName("namespace", m.ns).WithPrefix("manifest"));
  RETURN_IF_ERROR(ValidateVolumeName("name", m.name).WithPrefix("manifest"));
  if (j.contains("parent")) {
    ASSIGN_OR_RETURN(m.parent, DigestField(j, "parent", "manifest"));
  }
  ASSIGN_OR_RETURN(const Json* files, json_fields::Array(j, "files", "manifest"));
  for (size_t i = 0; i < files->size(); ++i) {
    ASSIGN_OR_RETURN(VolumeFile f, ParseFile((*files)[i], "manifest: file " + std::to_string(i)));
    m.files.push_back(std::move(f));
  }
  RETURN_IF_ERROR(CheckFileSet(m.files));
  return m;
}

}  // namespace

Status ValidateVolumePath(std::string_view path) {
  const std::string where = "path '" + std::string(path) + "'";
  if (path.empty()) return InvalidArgument("path is empty");
  if (path.size() > kMaxPathBytes) {
    return InvalidArgument(where + " is longer than " + std::to_string(kMaxPathBytes) + " bytes");
  }
  RETURN_IF_ERROR(CheckPathBytes(path, where));
  if (path.front() == '/') return InvalidArgument(where + " is absolute");
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find('/', start), path.size());
    const std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") {
      return InvalidArgument(where + " has an empty, '.' or '..' component");
    }
    if (part.size() > kMaxComponentBytes) {
      return InvalidArgument(where + " has a component longer than " +
                             std::to_string(kMaxComponentBytes) + " bytes");
    }
    start = end + 1;
  }
  return Status::Ok();
}

StatusOr<std::string> SerializeVolumeManifest(const VolumeManifest& m) {
  std::string text = CanonicalBytes(m);
  RETURN_IF_ERROR(ParseVolumeManifest(text).status());
  return text;
}

std::string ManifestDigest(std::string_view canonical) {
  return Sha256Hex({reinterpret_cast<const uint8_t*>(canonical.data()), canonical.size()});
}

StatusOr<VolumeManifest> ParseVolumeManifest(std::string_view text) {
  ASSIGN_OR_RETURN(Json j, ParseStrictJson(text, "manifest"));
  ASSIGN_OR_RETURN(VolumeManifest m, ParseFields(j));
  const std::string canonical = CanonicalBytes(m);
  if (canonical != text) {
    size_t i = 0;
    while (i < canonical.size() && i < text.size() && canonical[i] == text[i]) ++i;
    return InvalidArgument("manifest: not in canonical form (first difference at byte " +
                           std::to_string(i) + ")");
  }
  return m;
}

}  // namespace deltakv::deltasync
