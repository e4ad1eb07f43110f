#include "trace_json.h"

#include <cmath>

namespace deltakv::kvsim {

StatusOr<nlohmann::json> ParseJsonText(std::string_view text, std::string_view file,
                                       uint32_t first_line) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based; find its line and column.
    const size_t pos = std::min<size_t>(e.byte > 0 ? e.byte - 1 : 0, text.size());
    uint32_t line = first_line, col = 1;
    for (size_t i = 0; i < pos; ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    std::string what = e.what();
    const size_t p = what.find("parse error");
    if (p != std::string::npos) what = what.substr(p);
    return InvalidArgument(std::string(file) + ":" + std::to_string(line) + ":" +
                           std::to_string(col) + ": malformed JSON: " + what);
  } catch (const nlohmann::json::exception& e) {  // e.g. a number too large to represent
    return InvalidArgument(std::string(file) + ":" + std::to_string(first_line) +
                           ": malformed JSON: " + e.what());
  }
}

Status JsonField::Error(const std::string& path, const std::string& what) const {
  return InvalidArgument(file_ + ":" + std::to_string(line_) + ": " + path + ": " + what);
}

Status JsonField::CheckObject(const nlohmann::json& j, const std::string& where,
                              const std::set<std::string>& allowed) const {
  if (!j.is_object()) return Error(where, "expected an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (allowed.count(it.key()) == 0) return Error(where, "unknown field '" + it.key() + "'");
  }
  return Status::Ok();
}

StatusOr<double> JsonField::Time(const nlohmann::json& j, const std::string& where,
                                 const char* key, bool required) const {
  if (!j.contains(key) || j[key].is_null()) {
    if (required) return Error(where + "." + key, "missing");
    return -1.0;
  }
  const nlohmann::json& v = j[key];
  if (!v.is_number()) return Error(where + "." + key, "expected a number");
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < 0) {
    return Error(where + "." + key, "expected a finite number >= 0, got " + v.dump());
  }
  return d;
}

StatusOr<uint64_t> JsonField::Count(const nlohmann::json& j, const std::string& where,
                                    const char* key, bool required, uint64_t max) const {
  if (!j.contains(key)) {
    if (required) return Error(where + "." + key, "missing");
    return uint64_t{0};
  }
  const nlohmann::json& v = j[key];
  if (!v.is_number_integer() || (v.is_number_integer() && !v.is_number_unsigned() &&
                                 v.get<int64_t>() < 0)) {
    return Error(where + "." + key, "expected an integer >= 0, got " + v.dump());
  }
  const uint64_t n = v.get<uint64_t>();
  if (n > max) return Error(where + "." + key, v.dump() + " is over the limit " + std::to_string(max));
  return n;
}

Status JsonField::HashIds(const nlohmann::json& j, const std::string& where,
                          std::vector<uint64_t>* out) const {
  out->clear();
  if (!j.contains("hash_ids")) return Status::Ok();
  const nlohmann::json& v = j["hash_ids"];
  if (!v.is_array()) return Error(where + ".hash_ids", "expected an array of integers");
  out->reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const nlohmann::json& x = v[i];
    if (!x.is_number_integer() || (!x.is_number_unsigned() && x.get<int64_t>() < 0)) {
      return Error(where + ".hash_ids[" + std::to_string(i) + "]",
                   "expected an integer >= 0, got " + x.dump());
    }
    out->push_back(x.get<uint64_t>());
  }
  return Status::Ok();
}

Status JsonField::StringList(const nlohmann::json& j, const std::string& where) const {
  if (!j.is_array()) return Error(where, "expected an array of strings");
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_string()) return Error(where + "[" + std::to_string(i) + "]", "expected a string");
  }
  return Status::Ok();
}

}  // namespace deltakv::kvsim
