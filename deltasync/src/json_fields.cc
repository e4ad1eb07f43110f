#include "json_fields.h"

#include <cstdio>

#include "base/utf8.h"

namespace deltakv::deltasync::json_fields {

Status CheckUtf8(std::string_view what, std::string_view text) {
  if (IsValidUtf8(text)) return Status::Ok();
  std::string shown;
  for (char c : text) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b < 0x7F) {
      shown += c;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", b);
      shown += hex;
    }
  }
  return InvalidArgument(std::string(what) + " '" + shown +
                         "' is not valid UTF-8 (manifests are JSON)");
}

std::string Dump(const Json& j, int indent) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

StatusOr<Json> Parse(std::string_view text, std::string_view what) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument(std::string(what) + ": invalid JSON");
  if (!j.is_object()) return InvalidArgument(std::string(what) + ": top level must be an object");
  return j;
}

StatusOr<const Json*> Member(const Json& obj, const char* key, std::string_view where) {
  if (!obj.is_object()) return InvalidArgument(std::string(where) + ": must be an object");
  auto it = obj.find(key);
  if (it == obj.end()) {
    return InvalidArgument(std::string(where) + ": field '" + key + "' missing");
  }
  return &*it;
}

StatusOr<std::string> String(const Json& obj, const char* key, std::string_view where) {
  ASSIGN_OR_RETURN(const Json* v, Member(obj, key, where));
  if (!v->is_string()) {
    return InvalidArgument(std::string(where) + ": field '" + key + "' must be a string");
  }
  return v->get<std::string>();
}

StatusOr<std::string> OptionalString(const Json& obj, const char* key, std::string_view where,
                                     std::string fallback) {
  if (!obj.is_object() || !obj.contains(key)) return fallback;
  return String(obj, key, where);
}

StatusOr<uint64_t> Uint(const Json& obj, const char* key, std::string_view where) {
  ASSIGN_OR_RETURN(const Json* v, Member(obj, key, where));
  if (!v->is_number_unsigned()) {
    return InvalidArgument(std::string(where) + ": field '" + key +
                           "' must be a non-negative integer");
  }
  return v->get<uint64_t>();
}

StatusOr<const Json*> Array(const Json& obj, const char* key, std::string_view where) {
  ASSIGN_OR_RETURN(const Json* v, Member(obj, key, where));
  if (!v->is_array()) {
    return InvalidArgument(std::string(where) + ": field '" + key + "' must be an array");
  }
  return v;
}

StatusOr<const Json*> Object(const Json& obj, const char* key, std::string_view where) {
  ASSIGN_OR_RETURN(const Json* v, Member(obj, key, where));
  if (!v->is_object()) {
    return InvalidArgument(std::string(where) + ": field '" + key + "' must be an object");
  }
  return v;
}

}  // namespace deltakv::deltasync::json_fields
