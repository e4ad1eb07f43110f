#include "deltasync/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "base/file_util.h"

namespace deltakv::deltasync {
namespace {

using Json = nlohmann::json;

// A valid header nests three deep (header object, tensor entry, shape array); deeper input is
// refused early so hostile nesting costs no more than this.
constexpr int kMaxJsonDepth = 8;

std::string Quote(std::string_view s) {
  std::string q = "'";
  q += s;
  q += "'";
  return q;
}

std::string ShapeString(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string OffsetsString(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// A half-open byte range.
std::string RangeString(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

// A JSON value for an error message, shortened if long.
std::string Describe(const Json& v) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  constexpr size_t kMax = 40;
  if (s.size() > kMax) s = s.substr(0, kMax) + "...";
  return s + " (" + v.type_name() + ")";
}

// Returns prod(shape) in *numel, or false if it does not fit in 64 bits. A zero dimension makes
// the count zero whatever the other dimensions are; [] is a scalar with one element.
bool ElementCount(const std::vector<uint64_t>& shape, uint64_t* numel) {
  if (std::find(shape.begin(), shape.end(), uint64_t{0}) != shape.end()) {
    *numel = 0;
    return true;
  }
  uint64_t n = 1;
  for (uint64_t dim : shape) {
    if (__builtin_mul_overflow(n, dim, &n)) return false;
  }
  *numel = n;
  return true;
}

// Returns dtype size x element count, with the error message naming `what` on overflow.
StatusOr<uint64_t> ByteSize(std::string_view what, DType dtype,
                            const std::vector<uint64_t>& shape) {
  uint64_t numel = 0;
  uint64_t bytes = 0;
  if (!ElementCount(shape, &numel) || __builtin_mul_overflow(numel, DTypeSize(dtype), &bytes)) {
    return InvalidArgument(std::string(what) + ": dtype " + std::string(DTypeName(dtype)) +
                           " x shape " + ShapeString(shape) + " overflows 64 bits");
  }
  return bytes;
}

// Builds the JSON value of a header from the parser's SAX events, refusing duplicate keys in
// any object and nesting beyond kMaxJsonDepth. Each event costs O(log n) in the size of the
// object it adds to (nlohmann's callback parser, which could do the same checks, scans the
// enclosing object at the end of every nested one: O(n^2) for a header of n tensors).
class HeaderJsonBuilder {
 public:
  // The parsed value, once Json::sax_parse returned true.
  Json& root() { return root_; }
  // Why parsing stopped, once Json::sax_parse returned false.
  const Status& error() const { return error_; }

  bool null() { return Add(nullptr); }
  bool boolean(bool v) { return Add(v); }
  bool number_integer(Json::number_integer_t v) { return Add(v); }
  bool number_unsigned(Json::number_unsigned_t v) { return Add(v); }
  bool number_float(Json::number_float_t v, const Json::string_t& /*text*/) { return Add(v); }
  bool string(Json::string_t& v) { return Add(std::move(v)); }
  bool binary(Json::binary_t& v) { return Add(Json::binary(std::move(v))); }
  bool start_object(size_t /*elements*/) { return Open(Json::object()); }
  bool start_array(size_t /*elements*/) { return Open(Json::array()); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }

  bool key(Json::string_t& key) {
    // The number of containers open around the key: 1 for the header object itself.
    const size_t depth = open_.size();
    if (depth == 1) tensor_name_ = key;
    if (open_.back()->contains(key)) {
      if (depth == 1) return Reject("duplicate tensor name " + Quote(key));
      return Reject("duplicate key " + Quote(key) +
                    (tensor_name_.empty() ? "" : " inside " + Quote(tensor_name_)));
    }
    key_ = std::move(key);
    return true;
  }

  bool parse_error(size_t /*position*/, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& e) {
    error_ = InvalidArgument(std::string("header is not valid JSON: ") + e.what());
    return false;
  }

 private:
  bool Reject(const std::string& why) {
    error_ = InvalidArgument("header JSON: " + why);
    return false;
  }

  // Places `v` in the innermost open container (under the last key, in an object), or makes it
  // the root; returns where it went.
  Json* Place(Json&& v) {
    if (open_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Json& parent = *open_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    return &parent.get_ref<Json::object_t&>().emplace(std::move(key_), std::move(v)).first->second;
  }

  template <class V>
  bool Add(V&& v) {
    Place(Json(std::forward<V>(v)));
    return true;
  }

  bool Open(Json&& container) {
    if (open_.size() >= static_cast<size_t>(kMaxJsonDepth)) {
      return Reject("JSON nested more than " + std::to_string(kMaxJsonDepth) + " levels deep");
    }
    open_.push_back(Place(std::move(container)));
    return true;
  }

  bool Close() {
    open_.pop_back();
    return true;
  }

  Json root_;
  std::vector<Json*> open_;  // the containers being filled, outermost first
  std::string key_;          // the key of the next value placed in an object
  std::string tensor_name_;  // the last key of the top-level object
  Status error_;
};

// Parses JSON text, refusing NUL bytes, duplicate keys in any object and nesting beyond
// kMaxJsonDepth.
StatusOr<Json> ParseHeaderJson(std::string_view text) {
  // nlohmann's lexer takes a NUL byte for the end of input and would ignore what follows it;
  // JSON text never contains a raw NUL, so refuse one anywhere.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return InvalidArgument("header is not valid JSON: NUL byte at header offset " +
                           std::to_string(nul));
  }
  HeaderJsonBuilder builder;
  try {
    if (!Json::sax_parse(text.begin(), text.end(), &builder)) return builder.error();
  } catch (const Json::exception& e) {
    return InvalidArgument(std::string("header is not valid JSON: ") + e.what());
  } catch (const std::exception& e) {  // allocation failure and the like
    return InvalidArgument(std::string("header could not be parsed: ") + e.what());
  }
  return std::move(builder.root());
}

// Reads a non-negative integer element of an array field.
StatusOr<uint64_t> UnsignedElement(const Json& array, size_t i, const std::string& where) {
  const Json& v = array[i];
  if (!v.is_number_unsigned()) {
    return InvalidArgument(where + "[" + std::to_string(i) + "] = " + Describe(v) +
                           " is not a non-negative integer");
  }
  return v.get<uint64_t>();
}

StatusOr<const Json*> Field(const Json& entry, const char* key, const std::string& where) {
  auto it = entry.find(key);
  if (it == entry.end()) return InvalidArgument(where + ": missing field " + Quote(key));
  return &*it;
}

StatusOr<TensorInfo> ParseTensorEntry(const std::string& name, const Json& entry,
                                      uint64_t data_size) {
  const std::string where = "tensor " + Quote(name);
  if (!entry.is_object()) {
    return InvalidArgument(where + ": entry must be an object, got " + Describe(entry));
  }
  TensorInfo t;
  t.name = name;

  ASSIGN_OR_RETURN(const Json* dtype, Field(entry, "dtype", where));
  if (!dtype->is_string()) {
    return InvalidArgument(where + ": dtype must be a string, got " + Describe(*dtype));
  }
  const std::string& dtype_name = dtype->get_ref<const std::string&>();
  std::optional<DType> parsed_dtype = ParseDType(dtype_name);
  if (!parsed_dtype) return InvalidArgument(where + ": unknown dtype " + Quote(dtype_name));
  t.dtype = *parsed_dtype;

  ASSIGN_OR_RETURN(const Json* shape, Field(entry, "shape", where));
  if (!shape->is_array()) {
    return InvalidArgument(where + ": shape must be an array, got " + Describe(*shape));
  }
  t.shape.reserve(shape->size());
  for (size_t i = 0; i < shape->size(); ++i) {
    ASSIGN_OR_RETURN(uint64_t dim, UnsignedElement(*shape, i, where + ": shape"));
    t.shape.push_back(dim);
  }

  ASSIGN_OR_RETURN(const Json* offsets, Field(entry, "data_offsets", where));
  if (!offsets->is_array() || offsets->size() != 2) {
    return InvalidArgument(where + ": data_offsets must be an array [begin, end], got " +
                           Describe(*offsets));
  }
  ASSIGN_OR_RETURN(t.begin, UnsignedElement(*offsets, 0, where + ": data_offsets"));
  ASSIGN_OR_RETURN(t.end, UnsignedElement(*offsets, 1, where + ": data_offsets"));
  if (t.begin > t.end) {
    return InvalidArgument(where + ": data_offsets " + OffsetsString(t.begin, t.end) +
                           " begin > end");
  }
  if (t.end > data_size) {
    return InvalidArgument(where + ": data_offsets " + OffsetsString(t.begin, t.end) +
                           " end beyond the data section of " + std::to_string(data_size) +
                           " bytes");
  }
  ASSIGN_OR_RETURN(uint64_t bytes, ByteSize(where, t.dtype, t.shape));
  if (bytes != t.size()) {
    return InvalidArgument(where + ": dtype " + std::string(DTypeName(t.dtype)) + " x shape " +
                           ShapeString(t.shape) + " = " + std::to_string(bytes) +
                           " bytes but data_offsets span " + std::to_string(t.size()));
  }
  return t;
}

Status ParseMetadata(const Json& value, std::map<std::string, std::string>* metadata) {
  if (value.is_null()) return Status::Ok();  // the reference implementation reads null as none
  if (!value.is_object()) {
    return InvalidArgument("'__metadata__' must be an object of strings, got " + Describe(value));
  }
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string()) {
      return InvalidArgument("'__metadata__' key " + Quote(key) + ": value must be a string, got " +
                             Describe(v));
    }
    metadata->emplace(key, v.get<std::string>());
  }
  return Status::Ok();
}

// REQUIRES: tensors sorted by (begin, end); every end <= data_size.
Status CheckExactCover(const std::vector<TensorInfo>& tensors, uint64_t data_size) {
  uint64_t covered = 0;  // tensors so far cover exactly [0, covered)
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : tensors) {
    if (t.begin < covered) {
      return InvalidArgument("tensor " + Quote(t.name) + ": data_offsets " +
                             OffsetsString(t.begin, t.end) + " overlap tensor " +
                             Quote(prev->name) + " at " + OffsetsString(prev->begin, prev->end));
    }
    if (t.begin > covered) {
      return InvalidArgument("data section bytes " + RangeString(covered, t.begin) +
                             " before tensor " + Quote(t.name) + " are not covered by any tensor");
    }
    covered = t.end;
    prev = &t;
  }
  if (covered != data_size) {
    return InvalidArgument("data section is " + std::to_string(data_size) +
                           " bytes but tensors cover only " + std::to_string(covered) + " (bytes " +
                           RangeString(covered, data_size) + " are not covered by any tensor)");
  }
  return Status::Ok();
}

uint64_t LoadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

const TensorInfo* SafetensorsHeader::Find(std::string_view name) const {
  for (const TensorInfo& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::span<const uint8_t> prefix,
                                                   uint64_t file_size, uint64_t max_header_bytes) {
  if (file_size < 8) {
    return InvalidArgument("file is " + std::to_string(file_size) +
                           " bytes, too short for the 8-byte header length");
  }
  if (prefix.size() > file_size) {
    return InvalidArgument("prefix of " + std::to_string(prefix.size()) +
                           " bytes is longer than the file size " + std::to_string(file_size));
  }
  if (prefix.size() < 8) {
    return InvalidArgument("prefix holds " + std::to_string(prefix.size()) +
                           " bytes, less than the 8-byte header length");
  }
  const uint64_t n = LoadLe64(prefix.data());
  if (n > max_header_bytes) {
    return InvalidArgument("header length " + std::to_string(n) + " exceeds the limit of " +
                           std::to_string(max_header_bytes) + " bytes");
  }
  if (n > file_size - 8) {
    return InvalidArgument("header length " + std::to_string(n) + " is larger than the " +
                           std::to_string(file_size - 8) +
                           " bytes that follow it in the file (truncated file?)");
  }
  if (prefix.size() - 8 < n) {
    return InvalidArgument("prefix holds " + std::to_string(prefix.size()) +
                           " bytes but the header ends at byte " + std::to_string(8 + n));
  }

  SafetensorsHeader header;
  header.raw.assign(reinterpret_cast<const char*>(prefix.data() + 8), static_cast<size_t>(n));
  header.data_size = file_size - 8 - n;

  ASSIGN_OR_RETURN(Json root, ParseHeaderJson(header.raw));
  if (!root.is_object()) {
    return InvalidArgument("header JSON must be an object, got " + Describe(root));
  }
  // As upstream: JSON text without a byte-order mark (which the JSON parser would skip).
  if (header.raw.starts_with("\xEF\xBB\xBF")) {
    return InvalidArgument("header starts with a byte-order mark");
  }
  header.tensors.reserve(root.size());
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      RETURN_IF_ERROR(ParseMetadata(entry, &header.metadata));
      continue;
    }
    ASSIGN_OR_RETURN(TensorInfo t, ParseTensorEntry(name, entry, header.data_size));
    header.tensors.push_back(std::move(t));
  }
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const TensorInfo& x, const TensorInfo& y) {
              return std::tie(x.begin, x.end, x.name) < std::tie(y.begin, y.end, y.name);
            });
  RETURN_IF_ERROR(CheckExactCover(header.tensors, header.data_size));
  return header;
}

StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path, uint64_t max_header_bytes,
                                                MappedFile::Shrink shrink) {
  ASSIGN_OR_RETURN(MappedFile map, MappedFile::OpenReadOnly(path, shrink));
  StatusOr<SafetensorsHeader> header =
      ParseSafetensorsHeader(map.bytes(), map.size(), max_header_bytes);
  if (!header.ok()) {
    // A header cut short by a file that shrank is not malformed.
    if (shrink == MappedFile::Shrink::kReadZeros) RETURN_IF_ERROR(map.CheckUnchanged());
    return header.status().WithPrefix(Quote(path));
  }
  SafetensorsFile file;
  file.path_ = path;
  file.map_ = std::move(map);
  file.header_ = std::move(header).value();
  return file;
}

std::span<const uint8_t> SafetensorsFile::TensorBytes(const TensorInfo& t) const {
  return map_.bytes().subspan(header_.data_offset() + t.begin, t.size());
}

StatusOr<std::string> BuildSafetensorsHeader(const std::vector<TensorToWrite>& tensors,
                                             const std::map<std::string, std::string>& metadata) {
  std::vector<TensorDecl> decls;
  decls.reserve(tensors.size());
  for (const TensorToWrite& t : tensors) {
    const std::string where = "tensor " + Quote(t.name);
    if (DTypeSize(t.dtype) == 0) return InvalidArgument(where + ": invalid dtype value");
    ASSIGN_OR_RETURN(uint64_t bytes, ByteSize(where, t.dtype, t.shape));
    if (bytes != t.data.size()) {
      return InvalidArgument(where + ": dtype " + std::string(DTypeName(t.dtype)) + " x shape " +
                             ShapeString(t.shape) + " = " + std::to_string(bytes) +
                             " bytes but data holds " + std::to_string(t.data.size()));
    }
    decls.push_back({t.name, t.dtype, t.shape});
  }
  return BuildSafetensorsLayoutHeader(decls, metadata);
}

StatusOr<std::string> BuildSafetensorsLayoutHeader(
    const std::vector<TensorDecl>& tensors, const std::map<std::string, std::string>& metadata) {
  using OrderedJson = nlohmann::ordered_json;
  OrderedJson root = OrderedJson::object();
  if (!metadata.empty()) {
    OrderedJson meta = OrderedJson::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    root["__metadata__"] = std::move(meta);
  }
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const TensorDecl& t : tensors) {
    const std::string where = "tensor " + Quote(t.name);
    if (t.name == "__metadata__") {
      return InvalidArgument(where + ": the name is reserved for the metadata map");
    }
    if (!names.insert(t.name).second) return InvalidArgument(where + ": name repeats");
    if (DTypeSize(t.dtype) == 0) return InvalidArgument(where + ": invalid dtype value");
    ASSIGN_OR_RETURN(uint64_t bytes, ByteSize(where, t.dtype, t.shape));
    if (bytes > UINT64_MAX - offset) {
      return InvalidArgument(where + ": the data section's size overflows 64 bits");
    }
    OrderedJson entry = OrderedJson::object();
    entry["dtype"] = std::string(DTypeName(t.dtype));
    entry["shape"] = t.shape;
    entry["data_offsets"] = {offset, offset + bytes};
    root[t.name] = std::move(entry);
    offset += bytes;
  }
  std::string text;
  try {
    text = root.dump();
  } catch (const OrderedJson::exception& e) {
    return InvalidArgument(std::string("a tensor name or metadata string is not valid UTF-8: ") +
                           e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

namespace {

Status WriteAllTo(int fd, std::span<const uint8_t> data, const std::string& path) {
  const uint8_t* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(left, size_t{1} << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return IoError(ErrnoMessage("write", path, w < 0 ? errno : EIO));
    p += w;
    left -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

}  // namespace

Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  ASSIGN_OR_RETURN(std::string header, BuildSafetensorsHeader(tensors, metadata));
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));

  // Streams the pieces to "<path>.tmp.<pid>" (as WriteFileAtomic does for one buffer), so the
  // tensors are never copied into one buffer, then renames over `path`.
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError(ErrnoMessage("create", tmp, errno));
  Status s = WriteAllTo(fd, length, tmp);
  if (s.ok()) {
    s = WriteAllTo(fd, {reinterpret_cast<const uint8_t*>(header.data()), header.size()}, tmp);
  }
  for (size_t i = 0; s.ok() && i < tensors.size(); ++i) s = WriteAllTo(fd, tensors[i].data, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = IoError(ErrnoMessage("fsync", tmp, errno));
  if (::close(fd) != 0 && s.ok()) s = IoError(ErrnoMessage("close", tmp, errno));
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = IoError(RenameErrorMessage(tmp, path, errno));
  }
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

}  // namespace deltakv::deltasync
