// Field readers shared by the trace parsers: each check names the file, the line and the
// field path in its error ("trace.json:1: trace.requests[3].in: expected ...").
#pragma once

#include <cstdint>
#include <map>
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

// Where the records of a Weka trace object start, for error messages and TraceRequest::line:
// outer[i] is the line of requests[i], inner[i][k] that of requests[i].requests[k], and
// key_line[name] that of the top-level key `name`. Lines count from `first_line`; a record the
// scan did not see gets `first_line`. REQUIRES: `text` is valid JSON.
struct RecordLines {
  std::vector<uint32_t> outer;
  std::vector<std::vector<uint32_t>> inner;
  std::map<std::string, uint32_t> key_line;
  uint32_t first_line = 1;
  uint32_t Outer(size_t i) const { return i < outer.size() && outer[i] ? outer[i] : first_line; }
  uint32_t Inner(size_t i, size_t k) const;
  uint32_t Key(const std::string& name) const;
};
RecordLines LocateWekaRecords(std::string_view text, uint32_t first_line);

class JsonField {
 public:
  JsonField(std::string_view file, uint32_t line) : file_(file), line_(line) {}
  uint32_t line() const { return line_; }
  const std::string& file() const { return file_; }

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
  // `hash_ids`: an array of integers >= 0 (empty when absent), one per block of `block_size`
  // tokens of a prompt of `input_tokens` (the field `in_key`): at most ceil(input_tokens /
  // block_size) of them, the last block possibly partial. The count is checked before the ids
  // are read.
  Status HashIds(const nlohmann::json& j, const std::string& where, uint64_t input_tokens,
                 const char* in_key, uint32_t block_size, std::vector<uint64_t>* out) const;
  Status StringList(const nlohmann::json& j, const std::string& where) const;

 private:
  std::string file_;
  uint32_t line_;
};

}  // namespace deltakv::kvsim
