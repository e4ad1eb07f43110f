// Field readers shared by the trace parsers: each check names the file, the line and the
// field path in its error ("trace.json:1: trace.requests[3].in: expected ...").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace deltakv::kvsim {

// Parses JSON text; a syntax error becomes InvalidArgument "file:line:column: ...", with
// lines counted from `first_line`.
StatusOr<nlohmann::json> ParseJsonText(std::string_view text, std::string_view file,
                                       uint32_t first_line);

class JsonField {
 public:
  JsonField(std::string_view file, uint32_t line) : file_(file), line_(line) {}
  uint32_t line() const { return line_; }

  Status Error(const std::string& path, const std::string& what) const;
  // `j` must be an object whose keys are all in `allowed`.
  Status CheckObject(const nlohmann::json& j, const std::string& where,
                     const std::set<std::string>& allowed) const;
  // A finite number >= 0; -1 when absent (or null) and not required.
  StatusOr<double> Time(const nlohmann::json& j, const std::string& where, const char* key,
                        bool required) const;
  // An integer in [0, max]; 0 when absent and not required.
  StatusOr<uint64_t> Count(const nlohmann::json& j, const std::string& where, const char* key,
                           bool required, uint64_t max) const;
  // `hash_ids`: an array of integers >= 0 (empty when absent).
  Status HashIds(const nlohmann::json& j, const std::string& where,
                 std::vector<uint64_t>* out) const;
  Status StringList(const nlohmann::json& j, const std::string& where) const;

 private:
  std::string file_;
  uint32_t line_;
};

}  // namespace deltakv::kvsim
