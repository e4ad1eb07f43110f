#include "volume/strict_json.h"

#include <algorithm>
#include <exception>
#include <set>
#include <vector>

namespace deltakv::deltasync {
namespace {

constexpr int kMaxDepth = 8;

struct Rejected : std::exception {
  explicit Rejected(std::string m) : message(std::move(m)) {}
  std::string message;
};

}  // namespace

StatusOr<Json> ParseStrictJson(std::string_view text, std::string_view what) {
  const std::string w(what);
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return InvalidArgument(w + ": NUL byte at offset " + std::to_string(nul));
  }
  std::vector<std::set<std::string, std::less<>>> open;
  Json::parser_callback_t callback = [&open](int depth, Json::parse_event_t event,
                                             Json& parsed) -> bool {
    using E = Json::parse_event_t;
    if ((event == E::object_start || event == E::array_start) && depth >= kMaxDepth) {
      throw Rejected("JSON nested more than " + std::to_string(kMaxDepth) + " levels deep");
    }
    if (event == E::object_start) open.emplace_back();
    if (event == E::object_end) open.pop_back();
    if (event == E::key && !open.back().insert(parsed.get<std::string>()).second) {
      throw Rejected("duplicate key '" + parsed.get<std::string>() + "'");
    }
    return true;
  };
  try {
    Json j = Json::parse(text.begin(), text.end(), callback);
    if (!j.is_object()) return InvalidArgument(w + ": top level must be an object");
    return j;
  } catch (const Rejected& e) {
    return InvalidArgument(w + ": " + e.message);
  } catch (const std::exception& e) {
    return InvalidArgument(w + ": invalid JSON: " + e.what());
  }
}

Status CheckFields(const Json& obj, std::initializer_list<std::string_view> required,
                   std::initializer_list<std::string_view> optional, std::string_view where) {
  const std::string w(where);
  if (!obj.is_object()) return InvalidArgument(w + ": must be an object");
  for (std::string_view key : required) {
    if (!obj.contains(key))
      return InvalidArgument(w + ": field '" + std::string(key) + "' missing");
  }
  for (const auto& item : obj.items()) {
    const std::string& key = item.key();
    const auto known = [&key](std::string_view k) { return k == key; };
    if (std::none_of(required.begin(), required.end(), known) &&
        std::none_of(optional.begin(), optional.end(), known)) {
      return InvalidArgument(w + ": unknown field '" + key + "'");
    }
  }
  return Status::Ok();
}

std::string JsonString(std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      out += "\\u00";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace deltakv::deltasync
