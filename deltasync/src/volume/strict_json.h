// Private: JSON parsing for volume objects that refuses duplicate keys, NUL bytes, deep nesting
// and fields outside a known set, with errors that name the object.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "base/status.h"
#include "json_fields.h"

namespace deltakv::deltasync {

using json_fields::Json;

// Parses `text` as a JSON object. InvalidArgument "<what>: ..." for invalid JSON, a raw NUL
// byte, a duplicate key in any object, nesting deeper than 8, or a top level that is no object.
StatusOr<Json> ParseStrictJson(std::string_view text, std::string_view what);

// OK if `obj` is an object with every field of `required` and no field outside `required` and
// `optional`; InvalidArgument "<where>: field 'x' missing" / "unknown field 'x'" otherwise.
Status CheckFields(const Json& obj, std::initializer_list<std::string_view> required,
                   std::initializer_list<std::string_view> optional, std::string_view where);

// Returns a JSON string literal: `s` in quotes with '"' and '\' escaped, control characters as
// \u00XX. The canonical manifest only holds strings without control characters.
std::string JsonString(std::string_view s);

}  // namespace deltakv::deltasync
