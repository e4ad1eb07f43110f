// Private helpers for reading manifest JSON with exact, named errors and no exceptions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

namespace deltakv::deltasync::json_fields {

using Json = nlohmann::json;

// Parses text; InvalidArgument "<what>: invalid JSON ..." on a syntax error.
StatusOr<Json> Parse(std::string_view text, std::string_view what);

// Each getter returns InvalidArgument "<where>: field '<key>' missing" or "... must be a ...".
StatusOr<const Json*> Member(const Json& obj, const char* key, std::string_view where);
StatusOr<std::string> String(const Json& obj, const char* key, std::string_view where);
StatusOr<uint64_t> Uint(const Json& obj, const char* key, std::string_view where);
StatusOr<const Json*> Array(const Json& obj, const char* key, std::string_view where);
StatusOr<const Json*> Object(const Json& obj, const char* key, std::string_view where);
// OK if `text` is valid UTF-8 (base/utf8.h); InvalidArgument "<what> '<text, non-ASCII bytes
// as \xNN>' is not valid UTF-8" otherwise: every name written into a manifest is checked so, as
// JSON cannot hold it.
Status CheckUtf8(std::string_view what, std::string_view text);
// Dumps `j` (indent as Json::dump) without throwing: strings that are not UTF-8 (none, where
// CheckUtf8 ran) become U+FFFD.
std::string Dump(const Json& j, int indent = -1);
// Like String but returns `fallback` when the key is absent.
StatusOr<std::string> OptionalString(const Json& obj, const char* key, std::string_view where,
                                     std::string fallback);

}  // namespace deltakv::deltasync::json_fields
