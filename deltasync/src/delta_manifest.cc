#include "deltasync/delta_manifest.h"

#include <map>
#include <set>

#include "json_fields.h"
#include "manifest_internal.h"
#include "output_layout.h"

namespace deltakv::deltasync {

namespace jf = json_fields;
using Json = nlohmann::json;

const DeltaObject* DeltaManifest::FindObject(std::string_view name) const {
  for (const DeltaObject& o : objects) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

bool IsSafeObjectName(std::string_view name) {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string FormatChecksum(uint32_t adler) {
  static const char kHex[] = "0123456789abcdef";
  std::string s(8, '0');
  for (int i = 7; i >= 0; --i) {
    s[static_cast<size_t>(i)] = kHex[adler & 15];
    adler >>= 4;
  }
  return s;
}

StatusOr<uint32_t> ParseChecksum(std::string_view text, std::string_view what) {
  if (text.size() != 8) {
    return InvalidArgument(std::string(what) + ": checksum '" + std::string(text) +
                           "' must be 8 hex digits");
  }
  uint32_t v = 0;
  for (char c : text) {
    uint32_t d;
    if (c >= '0' && c <= '9')
      d = static_cast<uint32_t>(c - '0');
    else if (c >= 'a' && c <= 'f')
      d = static_cast<uint32_t>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      d = static_cast<uint32_t>(c - 'A' + 10);
    else
      return InvalidArgument(std::string(what) + ": checksum '" + std::string(text) +
                             "' must be 8 hex digits");
    v = (v << 4) | d;
  }
  return v;
}

std::string DeltaManifestToJson(const DeltaManifest& m) {
  Json j = Json::object();
  j["format"] = kDeltaFormat;
  j["metadata"] = {{"delta_encoding", "xor"},
                   {"compression_format", "zstd"},
                   {"checksum_format", "adler32"},
                   {"version", m.version},
                   {"base_version", m.parent_version}};
  Json objects = Json::array();
  for (const DeltaObject& o : m.objects) {
    Json e = {{"name", o.name}, {"size", o.size}};
    if (!o.sha256.empty()) e["sha256"] = o.sha256;
    objects.push_back(std::move(e));
  }
  j["objects"] = std::move(objects);
  Json tensors = Json::array();
  for (const DeltaTensor& t : m.tensors) {
    Json frames = Json::array();
    for (const DeltaFrame& f : t.frames) {
      Json e = {{"offset", f.offset},
                {"length", f.length},
                {"object", f.object},
                {"object_offset", f.object_offset},
                {"compressed_length", f.compressed_length}};
      if (f.xor_digest) e["xor_digest"] = FormatXorDigest(*f.xor_digest);
      frames.push_back(std::move(e));
    }
    tensors.push_back({{"name", t.name},
                       {"length", t.length},
                       {"parent_adler32", FormatChecksum(t.parent_adler32)},
                       {"adler32", FormatChecksum(t.adler32)},
                       {"frames", std::move(frames)}});
  }
  j["tensors"] = std::move(tensors);
  if (!m.checkpoint_files.empty()) {
    Json files = Json::array();
    for (const DeltaCheckpointFile& f : m.checkpoint_files) {
      files.push_back({{"name", f.name}, {"header", f.header}});
    }
    j["checkpoint"] = {{"files", std::move(files)},
                       {"tensors", ManifestTensorsToJson(m.checkpoint_tensors)}};
  }
  return json_fields::Dump(j, 1) + "\n";
}

namespace {

Status CheckMetadata(const Json& j, DeltaManifest* m) {
  const std::string where = "delta manifest: metadata";
  ASSIGN_OR_RETURN(const Json* md, jf::Object(j, "metadata", "delta manifest"));
  const std::pair<const char*, const char*> required[] = {
      {"delta_encoding", "xor"}, {"compression_format", "zstd"}, {"checksum_format", "adler32"}};
  for (const auto& [key, want] : required) {
    ASSIGN_OR_RETURN(std::string v, jf::String(*md, key, where));
    if (v != want) {
      return InvalidArgument(where + ": " + key + " is '" + v + "'; only '" + want +
                             "' is supported");
    }
  }
  ASSIGN_OR_RETURN(m->version, jf::OptionalString(*md, "version", where, ""));
  ASSIGN_OR_RETURN(m->parent_version, jf::OptionalString(*md, "base_version", where, ""));
  return Status::Ok();
}

Status ParseObjects(const Json& j, DeltaManifest* m) {
  ASSIGN_OR_RETURN(const Json* objects, jf::Array(j, "objects", "delta manifest"));
  std::set<std::string, std::less<>> names;
  for (size_t i = 0; i < objects->size(); ++i) {
    std::string w = "delta manifest: objects[" + std::to_string(i) + "]";
    DeltaObject o;
    ASSIGN_OR_RETURN(o.name, jf::String((*objects)[i], "name", w));
    if (!IsSafeObjectName(o.name))
      return InvalidArgument(w + ": unsafe object name '" + o.name + "'");
    if (!names.insert(o.name).second)
      return InvalidArgument(w + ": duplicate object '" + o.name + "'");
    ASSIGN_OR_RETURN(o.size, jf::Uint((*objects)[i], "size", w));
    ASSIGN_OR_RETURN(o.sha256, jf::OptionalString((*objects)[i], "sha256", w, ""));
    if (!o.sha256.empty()) {
      bool hex = o.sha256.size() == 64;
      for (char c : o.sha256) hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
      if (!hex) return InvalidArgument(w + ": sha256 must be 64 lowercase hex digits");
    }
    m->objects.push_back(std::move(o));
  }
  return Status::Ok();
}

Status ParseFrame(const Json& f, const std::string& w, const DeltaManifest& m, const DeltaTensor& t,
                  DeltaFrame* out) {
  ASSIGN_OR_RETURN(out->offset, jf::Uint(f, "offset", w));
  ASSIGN_OR_RETURN(out->length, jf::Uint(f, "length", w));
  ASSIGN_OR_RETURN(out->object, jf::String(f, "object", w));
  ASSIGN_OR_RETURN(out->object_offset, jf::Uint(f, "object_offset", w));
  ASSIGN_OR_RETURN(out->compressed_length, jf::Uint(f, "compressed_length", w));
  if (out->offset > t.length || out->length > t.length - out->offset) {
    return InvalidArgument(w + ": covers [" + std::to_string(out->offset) + ", +" +
                           std::to_string(out->length) + ") beyond the tensor's " +
                           std::to_string(t.length) + " bytes");
  }
  const DeltaObject* o = m.FindObject(out->object);
  if (o == nullptr) return InvalidArgument(w + ": unknown object '" + out->object + "'");
  if (out->object_offset > o->size || out->compressed_length > o->size - out->object_offset) {
    return InvalidArgument(w + ": compressed bytes [" + std::to_string(out->object_offset) + ", +" +
                           std::to_string(out->compressed_length) + ") lie beyond object '" +
                           o->name + "' of " + std::to_string(o->size) + " bytes");
  }
  if (out->compressed_length == 0) return InvalidArgument(w + ": compressed_length is 0");
  if (f.contains("xor_digest")) {
    ASSIGN_OR_RETURN(std::string digest, jf::String(f, "xor_digest", w));
    ASSIGN_OR_RETURN(out->xor_digest, ParseXorDigest(digest, w + ": xor_digest"));
  }
  return Status::Ok();
}

Status ParseTensors(const Json& j, DeltaManifest* m) {
  ASSIGN_OR_RETURN(const Json* tensors, jf::Array(j, "tensors", "delta manifest"));
  std::set<std::string, std::less<>> names;
  for (size_t i = 0; i < tensors->size(); ++i) {
    const Json& tj = (*tensors)[i];
    std::string w = "delta manifest: tensors[" + std::to_string(i) + "]";
    DeltaTensor t;
    ASSIGN_OR_RETURN(t.name, jf::String(tj, "name", w));
    w = "delta manifest: tensor '" + t.name + "'";
    if (!names.insert(t.name).second) return InvalidArgument(w + ": listed twice");
    ASSIGN_OR_RETURN(t.length, jf::Uint(tj, "length", w));
    ASSIGN_OR_RETURN(std::string pa, jf::String(tj, "parent_adler32", w));
    ASSIGN_OR_RETURN(t.parent_adler32, ParseChecksum(pa, w + ": parent_adler32"));
    ASSIGN_OR_RETURN(std::string na, jf::String(tj, "adler32", w));
    ASSIGN_OR_RETURN(t.adler32, ParseChecksum(na, w + ": adler32"));
    ASSIGN_OR_RETURN(const Json* frames, jf::Array(tj, "frames", w));
    uint64_t covered_to = 0;
    for (size_t k = 0; k < frames->size(); ++k) {
      std::string fw = w + ": frames[" + std::to_string(k) + "]";
      DeltaFrame f;
      RETURN_IF_ERROR(ParseFrame((*frames)[k], fw, *m, t, &f));
      if (k > 0 && f.offset < covered_to) {
        return InvalidArgument(fw + ": starts at " + std::to_string(f.offset) +
                               ", before the previous frame ends at " + std::to_string(covered_to) +
                               " (frames must be sorted and must not overlap)");
      }
      covered_to = f.offset + f.length;
      t.frames.push_back(std::move(f));
    }
    m->tensors.push_back(std::move(t));
  }
  return Status::Ok();
}

Status ParseCheckpointSection(const Json& j, DeltaManifest* m) {
  if (!j.contains("checkpoint")) return Status::Ok();
  const std::string where = "delta manifest: checkpoint";
  ASSIGN_OR_RETURN(const Json* c, jf::Object(j, "checkpoint", "delta manifest"));
  ASSIGN_OR_RETURN(const Json* files, jf::Array(*c, "files", where));
  if (files->empty()) return InvalidArgument(where + ": files is empty");
  std::set<std::string, std::less<>> names;
  for (size_t i = 0; i < files->size(); ++i) {
    std::string w = where + ": files[" + std::to_string(i) + "]";
    DeltaCheckpointFile f;
    ASSIGN_OR_RETURN(f.name, jf::String((*files)[i], "name", w));
    if (!IsSafeObjectName(f.name))
      return InvalidArgument(w + ": unsafe file name '" + f.name + "'");
    if (!names.insert(f.name).second)
      return InvalidArgument(w + ": duplicate file '" + f.name + "'");
    ASSIGN_OR_RETURN(f.header, jf::String((*files)[i], "header", w));
    m->checkpoint_files.push_back(std::move(f));
  }
  ASSIGN_OR_RETURN(const Json* tensors, jf::Array(*c, "tensors", where));
  ASSIGN_OR_RETURN(m->checkpoint_tensors, ParseManifestTensors(*tensors, where));
  // As in a checkpoint manifest: in file order, then by offset, apart.
  std::vector<std::string_view> file_names;
  for (const DeltaCheckpointFile& f : m->checkpoint_files) file_names.push_back(f.name);
  return CheckManifestTensorOrder(m->checkpoint_tensors, file_names, where).status();
}

}  // namespace

StatusOr<DeltaManifest> ParseDeltaManifest(std::string_view json_text) {
  ASSIGN_OR_RETURN(Json j, jf::Parse(json_text, "delta manifest"));
  ASSIGN_OR_RETURN(std::string format, jf::String(j, "format", "delta manifest"));
  if (format != kDeltaFormat) {
    return InvalidArgument("delta manifest: format '" + format + "' is not '" + kDeltaFormat + "'");
  }
  DeltaManifest m;
  RETURN_IF_ERROR(CheckMetadata(j, &m));
  RETURN_IF_ERROR(ParseObjects(j, &m));
  RETURN_IF_ERROR(ParseTensors(j, &m));
  RETURN_IF_ERROR(ParseCheckpointSection(j, &m));
  RETURN_IF_ERROR(CheckCheckpointSection(m));
  return m;
}

}  // namespace deltakv::deltasync
