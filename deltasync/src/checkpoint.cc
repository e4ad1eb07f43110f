#include "deltasync/checkpoint.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <set>

#include "base/file_util.h"
#include "base/parallel.h"
#include "base/progress.h"
#include "deltasync/adler32.h"
#include "deltasync/delta_manifest.h"
#include "json_fields.h"
#include "manifest_internal.h"

namespace deltakv::deltasync {

namespace jf = json_fields;
using Json = nlohmann::json;

StatusOr<Checkpoint> Checkpoint::Open(const std::string& dir, MappedFile::Shrink shrink) {
  std::vector<std::string> others;
  ASSIGN_OR_RETURN(std::vector<std::string> names, ListFiles(dir, ".safetensors", &others));
  // A *.safetensors entry that is not a readable regular file (a dangling link, a directory)
  // is a shard missing from the checkpoint, not something to skip.
  if (!others.empty()) {
    const std::string& name = others.front();
    std::error_code st;
    if (!std::filesystem::exists(std::filesystem::path(dir) / name, st)) {
      return IoError("checkpoint '" + dir + "': '" + name + "' cannot be read (a dangling link?)");
    }
    return InvalidArgument("checkpoint '" + dir + "': '" + name + "' is not a regular file");
  }
  if (names.empty()) {
    return InvalidArgument("checkpoint '" + dir + "' holds no .safetensors files");
  }
  for (const std::string& name : names) {
    // The manifests name files by these names; readers refuse any other (FORMAT.md).
    if (!IsSafeObjectName(name)) {
      return InvalidArgument("checkpoint '" + dir + "': unsafe file name '" + name +
                             "' (names are 1-255 characters from [A-Za-z0-9._-])");
    }
  }
  Checkpoint c;
  c.dir_ = dir;
  c.names_ = names;
  c.files_.reserve(names.size());
  for (const std::string& name : names) {
    auto f = SafetensorsFile::Open(dir + "/" + name, kDefaultMaxHeaderBytes, shrink);
    if (!f.ok()) return f.status();
    c.files_.push_back(std::move(f).value());
  }
  for (size_t i = 0; i < c.files_.size(); ++i) {
    for (const TensorInfo& t : c.files_[i].header().tensors) {
      auto [it, inserted] = c.index_.emplace(t.name, TensorRef{i, &t});
      if (!inserted) {
        return InvalidArgument("checkpoint '" + dir + "': tensor '" + t.name + "' appears in '" +
                               names[it->second.file] + "' and in '" + names[i] + "'");
      }
    }
  }
  return c;
}

const TensorRef* Checkpoint::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &it->second;
}

Status Checkpoint::CheckUnchanged() const {
  for (const SafetensorsFile& f : files_) RETURN_IF_ERROR(f.CheckUnchanged());
  return Status::Ok();
}

uint64_t Checkpoint::total_tensor_bytes() const {
  uint64_t total = 0;
  for (const auto& f : files_) total += f.header().data_size;
  return total;
}

StatusOr<CheckpointManifest> ComputeCheckpointManifest(const Checkpoint& ckpt,
                                                       const std::string& version, unsigned threads,
                                                       bool progress) {
  CheckpointManifest m;
  RETURN_IF_ERROR(json_fields::CheckUtf8("version", version));
  m.version = version;
  std::vector<std::pair<size_t, const TensorInfo*>> order;
  for (size_t i = 0; i < ckpt.files().size(); ++i) {
    const SafetensorsFile& f = ckpt.files()[i];
    RETURN_IF_ERROR(json_fields::CheckUtf8("file name", ckpt.file_names()[i]));
    m.files.push_back({ckpt.file_names()[i], f.file_size(), f.header().raw.size()});
    for (const TensorInfo& t : f.header().tensors) {
      RETURN_IF_ERROR(json_fields::CheckUtf8("tensor name", t.name));
      order.emplace_back(i, &t);
    }
  }
  m.tensors.resize(order.size());
  Progress prog("manifest", ckpt.total_tensor_bytes(), progress);
  Status read = ParallelFor(order.size(), threads, [&](size_t k) {
    const auto& [fi, t] = order[k];
    const SafetensorsFile& f = ckpt.files()[fi];
    ManifestTensor& mt = m.tensors[k];
    mt.name = t->name;
    mt.dtype = t->dtype;
    mt.shape = t->shape;
    mt.file = ckpt.file_names()[fi];
    mt.begin = f.header().data_offset() + t->begin;
    mt.end = f.header().data_offset() + t->end;
    std::span<const uint8_t> bytes = f.TensorBytes(*t);
    constexpr size_t kChunk = 16u << 20;
    uint32_t a = kAdlerInitial;
    for (size_t off = 0; off < bytes.size(); off += kChunk) {
      size_t n = std::min(kChunk, bytes.size() - off);
      a = Adler32(bytes.subspan(off, n), a);
      prog.Add(n);
    }
    mt.adler32 = a;
    return Status::Ok();
  });
  prog.Finish();
  RETURN_IF_ERROR(ckpt.CheckUnchanged());
  RETURN_IF_ERROR(read);
  return m;
}

namespace {

Json ShapeJson(const std::vector<uint64_t>& shape) {
  Json s = Json::array();
  for (uint64_t d : shape) s.push_back(d);
  return s;
}

}  // namespace

std::string CheckpointManifestToJson(const CheckpointManifest& m) {
  Json j = Json::object();
  j["format"] = kCheckpointFormat;
  j["version"] = m.version;
  j["checksum_format"] = "adler32";
  Json files = Json::array();
  for (const ManifestFile& f : m.files) {
    files.push_back({{"name", f.name}, {"size", f.size}, {"header_size", f.header_size}});
  }
  j["files"] = std::move(files);
  j["tensors"] = ManifestTensorsToJson(m.tensors);
  return json_fields::Dump(j, 2) + "\n";
}

Json ManifestTensorsToJson(const std::vector<ManifestTensor>& tensors) {
  Json out = Json::array();
  for (const ManifestTensor& t : tensors) {
    out.push_back({{"name", t.name},
                   {"dtype", std::string(DTypeName(t.dtype))},
                   {"shape", ShapeJson(t.shape)},
                   {"file", t.file},
                   {"byte_range", Json::array({t.begin, t.end})},
                   {"adler32", FormatChecksum(t.adler32)}});
  }
  return out;
}

StatusOr<CheckpointManifest> ParseCheckpointManifest(std::string_view json_text) {
  ASSIGN_OR_RETURN(Json j, jf::Parse(json_text, "checkpoint manifest"));
  const std::string where = "checkpoint manifest";
  ASSIGN_OR_RETURN(std::string format, jf::String(j, "format", where));
  if (format != kCheckpointFormat) {
    return InvalidArgument(where + ": format '" + format + "' is not '" + kCheckpointFormat + "'");
  }
  ASSIGN_OR_RETURN(std::string checksum,
                   jf::OptionalString(j, "checksum_format", where, "adler32"));
  if (checksum != "adler32") {
    return InvalidArgument(where + ": checksum_format '" + checksum + "' is not 'adler32'");
  }
  CheckpointManifest m;
  ASSIGN_OR_RETURN(m.version, jf::OptionalString(j, "version", where, ""));
  ASSIGN_OR_RETURN(const Json* files, jf::Array(j, "files", where));
  std::set<std::string, std::less<>> file_names;
  for (size_t i = 0; i < files->size(); ++i) {
    const Json& f = (*files)[i];
    std::string fw = where + ": files[" + std::to_string(i) + "]";
    ManifestFile mf;
    ASSIGN_OR_RETURN(mf.name, jf::String(f, "name", fw));
    if (!IsSafeObjectName(mf.name))
      return InvalidArgument(fw + ": unsafe file name '" + mf.name + "'");
    if (!file_names.insert(mf.name).second) {
      return InvalidArgument(fw + ": duplicate file '" + mf.name + "'");
    }
    ASSIGN_OR_RETURN(mf.size, jf::Uint(f, "size", fw));
    ASSIGN_OR_RETURN(mf.header_size, jf::Uint(f, "header_size", fw));
    if (mf.header_size > mf.size || mf.size - mf.header_size < 8) {
      return InvalidArgument(fw + ": header_size " + std::to_string(mf.header_size) +
                             " does not fit a file of " + std::to_string(mf.size) + " bytes");
    }
    m.files.push_back(std::move(mf));
  }
  ASSIGN_OR_RETURN(const Json* tensors, jf::Array(j, "tensors", where));
  ASSIGN_OR_RETURN(m.tensors, ParseManifestTensors(*tensors, where));
  std::vector<std::string_view> names;
  for (const ManifestFile& f : m.files) names.push_back(f.name);
  ASSIGN_OR_RETURN(std::vector<size_t> file_of, CheckManifestTensorOrder(m.tensors, names, where));
  // Each inside its file's data section.
  for (size_t k = 0; k < m.tensors.size(); ++k) {
    const ManifestTensor& t = m.tensors[k];
    const std::string tw = where + ": tensor '" + t.name + "'";
    const ManifestFile& f = m.files[file_of[k]];
    if (t.end > f.size) {
      return InvalidArgument(tw + " byte_range ends at " + std::to_string(t.end) +
                             ", beyond file '" + f.name + "' of " + std::to_string(f.size) +
                             " bytes");
    }
    if (t.begin < 8 + f.header_size) {
      return InvalidArgument(tw + " byte_range begins at " + std::to_string(t.begin) +
                             ", inside the header of file '" + f.name + "' (data starts at " +
                             std::to_string(8 + f.header_size) + ")");
    }
  }
  return m;
}

StatusOr<std::vector<size_t>> CheckManifestTensorOrder(const std::vector<ManifestTensor>& tensors,
                                                       const std::vector<std::string_view>& files,
                                                       std::string_view where) {
  std::map<std::string_view, size_t> index;
  for (size_t i = 0; i < files.size(); ++i) index.emplace(files[i], i);
  std::vector<size_t> file_of;
  file_of.reserve(tensors.size());
  size_t last_file = 0;
  uint64_t last_end = 0;
  for (const ManifestTensor& t : tensors) {
    const std::string tw = std::string(where) + ": tensor '" + t.name + "'";
    auto it = index.find(t.file);
    if (it == index.end()) return InvalidArgument(tw + " names unknown file '" + t.file + "'");
    if (it->second < last_file || (it->second == last_file && t.begin < last_end)) {
      return InvalidArgument(tw + " is out of order or overlaps the tensor before it "
                             "(tensors are listed in file order, then by offset)");
    }
    if (it->second != last_file) last_end = 0;
    last_file = it->second;
    last_end = t.end;
    file_of.push_back(it->second);
  }
  return file_of;
}

// Shared by the checkpoint manifest and the delta manifest's "checkpoint" section.
StatusOr<std::vector<ManifestTensor>> ParseManifestTensors(const Json& arr,
                                                           std::string_view where) {
  std::vector<ManifestTensor> out;
  std::map<std::string, size_t, std::less<>> seen;
  for (size_t i = 0; i < arr.size(); ++i) {
    const Json& t = arr[i];
    std::string tw = std::string(where) + ": tensors[" + std::to_string(i) + "]";
    ManifestTensor mt;
    ASSIGN_OR_RETURN(mt.name, jf::String(t, "name", tw));
    tw += " '" + mt.name + "'";
    if (!seen.emplace(mt.name, i).second) return InvalidArgument(tw + ": duplicate tensor name");
    ASSIGN_OR_RETURN(std::string dtype, jf::String(t, "dtype", tw));
    auto dt = ParseDType(dtype);
    if (!dt) return InvalidArgument(tw + ": unknown dtype '" + dtype + "'");
    mt.dtype = *dt;
    ASSIGN_OR_RETURN(const Json* shape, jf::Array(t, "shape", tw));
    for (const Json& d : *shape) {
      if (!d.is_number_unsigned())
        return InvalidArgument(tw + ": shape entries must be integers >= 0");
      mt.shape.push_back(d.get<uint64_t>());
    }
    ASSIGN_OR_RETURN(mt.file, jf::String(t, "file", tw));
    ASSIGN_OR_RETURN(const Json* range, jf::Array(t, "byte_range", tw));
    if (range->size() != 2 || !(*range)[0].is_number_unsigned() ||
        !(*range)[1].is_number_unsigned()) {
      return InvalidArgument(tw + ": byte_range must be [begin, end]");
    }
    mt.begin = (*range)[0].get<uint64_t>();
    mt.end = (*range)[1].get<uint64_t>();
    if (mt.begin > mt.end) return InvalidArgument(tw + ": byte_range begin > end");
    // Its bytes: dtype size x elements, as the safetensors header says (FORMAT.md 1.1).
    uint64_t bytes = DTypeSize(mt.dtype);
    for (uint64_t d : mt.shape) {
      if (d != 0 && bytes > UINT64_MAX / d) {
        return InvalidArgument(tw + ": shape overflows 64 bits");
      }
      bytes *= d;
    }
    if (bytes != mt.end - mt.begin) {
      return InvalidArgument(tw + ": byte_range holds " + std::to_string(mt.end - mt.begin) +
                             " bytes, its dtype and shape " + std::to_string(bytes));
    }
    ASSIGN_OR_RETURN(std::string sum, jf::String(t, "adler32", tw));
    ASSIGN_OR_RETURN(mt.adler32, ParseChecksum(sum, tw + ": adler32"));
    out.push_back(std::move(mt));
  }
  return out;
}

std::string CheckpointVersionId(const std::string& dir) {
  // "." and "step-100/" name their directories; so does "latest", a link, by its own name.
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(dir, ec);
  if (ec) p = dir;
  p = p.lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

}  // namespace deltakv::deltasync
