#include "trace_json.h"

#include <cmath>

namespace deltakv::kvsim {

StatusOr<nlohmann::json> ParseJsonText(std::string_view text, std::string_view file,
                                       uint32_t first_line) {
  // "FILE:LINE:COLUMN" of the byte at `pos`.
  auto where = [&](size_t pos) {
    pos = std::min(pos, text.size());
    uint32_t line = first_line, col = 1;
    for (size_t i = 0; i < pos; ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return std::string(file) + ":" + std::to_string(line) + ":" + std::to_string(col);
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based.
    std::string what = e.what();
    const size_t p = what.find("parse error");
    if (p != std::string::npos) what = what.substr(p);
    return InvalidArgument(where(e.byte > 0 ? e.byte - 1 : 0) + ": malformed JSON: " + what);
  } catch (const nlohmann::json::exception& e) {
    // A number too large to represent ("number overflow parsing '1e999'") comes without a
    // position: it is the first number token spelled that way.
    const std::string what = e.what();
    const size_t open = what.find('\'');
    const size_t close = open == std::string::npos ? open : what.find('\'', open + 1);
    if (close != std::string::npos && close > open + 1) {
      const std::string token = what.substr(open + 1, close - open - 1);
      auto number_char = [](char c) {
        return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
      };
      for (size_t at = text.find(token); at != std::string_view::npos;
           at = text.find(token, at + 1)) {
        const size_t end = at + token.size();
        if ((at == 0 || !number_char(text[at - 1])) &&
            (end == text.size() || !number_char(text[end]))) {
          return InvalidArgument(where(at) + ": malformed JSON: " + what);
        }
      }
    }
    return InvalidArgument(std::string(file) + ":" + std::to_string(first_line) +
                           ": malformed JSON: " + what);
  }
}

uint32_t RecordLines::Inner(size_t i, size_t k) const {
  if (i < inner.size() && k < inner[i].size() && inner[i][k]) return inner[i][k];
  return Outer(i);
}

uint32_t RecordLines::Key(const std::string& name) const {
  auto it = key_line.find(name);
  return it == key_line.end() ? first_line : it->second;
}

RecordLines LocateWekaRecords(std::string_view text, uint32_t first_line) {
  // A scan of the token structure: a stack of open containers, each object with its current
  // key and each array with the index of its current element (the commas seen so far).
  struct Frame {
    bool object;
    bool expect_key;
    std::string key;
    size_t index;
  };
  std::vector<Frame> st;
  RecordLines out;
  out.first_line = first_line;
  uint32_t line = first_line;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
    } else if (c == '"') {
      std::string s;
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\') ++i;  // an escape: the next byte is never the closing quote
        if (i < text.size()) s.push_back(text[i]);
      }
      if (!st.empty() && st.back().object && st.back().expect_key) {
        st.back().key = std::move(s);
        st.back().expect_key = false;
        if (st.size() == 1) out.key_line.emplace(st.back().key, line);
      }
    } else if (c == '{' || c == '[') {
      // requests[i] sits at [root object, array]; requests[i].requests[k] at [root object,
      // array, object, array], each array under the key "requests".
      if (c == '{' && st.size() == 2 && st[0].key == "requests" && !st[1].object) {
        const size_t idx = st[1].index;
        if (out.outer.size() <= idx) out.outer.resize(idx + 1, 0);
        out.outer[idx] = line;
      } else if (c == '{' && st.size() == 4 && st[0].key == "requests" && !st[1].object &&
                 st[2].key == "requests" && !st[3].object) {
        const size_t idx = st[1].index;
        if (out.inner.size() <= idx) out.inner.resize(idx + 1);
        std::vector<uint32_t>& v = out.inner[idx];
        if (v.size() <= st[3].index) v.resize(st[3].index + 1, 0);
        v[st[3].index] = line;
      }
      st.push_back(Frame{c == '{', c == '{', std::string(), 0});
    } else if (c == '}' || c == ']') {
      if (!st.empty()) st.pop_back();
    } else if (c == ',' && !st.empty()) {
      if (st.back().object) {
        st.back().expect_key = true;
      } else {
        ++st.back().index;
      }
    }
  }
  return out;
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

StatusOr<double> JsonField::Time(const nlohmann::json& j, const std::string& where, const char* key,
                                 bool required) const {
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
  if (!v.is_number_integer() ||
      (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0)) {
    return Error(where + "." + key, "expected an integer >= 0, got " + v.dump());
  }
  const uint64_t n = v.get<uint64_t>();
  if (n > max)
    return Error(where + "." + key, v.dump() + " is over the limit " + std::to_string(max));
  return n;
}

Status JsonField::HashIds(const nlohmann::json& j, const std::string& where, uint64_t input_tokens,
                          const char* in_key, uint32_t block_size,
                          std::vector<uint64_t>* out) const {
  out->clear();
  if (!j.contains("hash_ids")) return Status::Ok();
  const nlohmann::json& v = j["hash_ids"];
  if (!v.is_array()) return Error(where + ".hash_ids", "expected an array of integers");
  const uint64_t blocks = input_tokens / block_size + (input_tokens % block_size != 0);
  if (v.size() > blocks) {
    return Error(where + ".hash_ids", std::to_string(v.size()) + " ids for " + in_key + " " +
                                          std::to_string(input_tokens) + " (at most " +
                                          std::to_string(blocks) + " blocks of " +
                                          std::to_string(block_size) + " tokens)");
  }
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
