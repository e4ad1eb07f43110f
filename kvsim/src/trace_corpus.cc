// LoadCorpus: a trace file or a directory of them, each file's format told by its content.
#include <sys/stat.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "kvsim/trace.h"

namespace deltakv::kvsim {
namespace {

// Appends the traces of one file.
Status LoadFile(const std::string& path, const TraceLimits& limits, Corpus* out) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, limits.max_file_bytes + 1));
  if (text.size() > limits.max_file_bytes) {
    return InvalidArgument(path + ": larger than " + std::to_string(limits.max_file_bytes) +
                           " bytes");
  }
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return InvalidArgument(path + ": empty file");
  // A Mooncake row has input_length at the top level; a Weka trace has requests.
  size_t eol = text.find('\n', first);
  std::string_view head(text.data() + first,
                        (eol == std::string::npos ? text.size() : eol) - first);
  bool mooncake = false;
  {
    auto j = nlohmann::json::parse(head.begin(), head.end(), nullptr, false);
    mooncake = j.is_object() && (j.contains("input_length") || j.contains("timestamp")) &&
               !j.contains("requests");
    if (!mooncake && j.is_object() && j.contains("requests")) {
      // One Weka trace per line.
      size_t pos = 0;
      uint32_t line = 0;
      while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        std::string_view row(text.data() + pos, end - pos);
        pos = end + 1;
        ++line;
        if (row.find_first_not_of(" \t\r") == std::string_view::npos) continue;
        ASSIGN_OR_RETURN(Trace t, ParseWekaTrace(row, path, limits, line));
        out->traces.push_back(std::move(t));
      }
      return Status::Ok();
    }
  }
  if (mooncake) {
    ASSIGN_OR_RETURN(Trace t, ParseMooncakeTrace(text, path, limits));
    out->traces.push_back(std::move(t));
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(Trace t, ParseWekaTrace(text, path, limits, 1));
  out->traces.push_back(std::move(t));
  return Status::Ok();
}

}  // namespace

StatusOr<Corpus> LoadCorpus(const std::string& path, const TraceLimits& limits) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return NotFound("no trace file or directory '" + path + "'");
  Corpus c;
  if (S_ISDIR(st.st_mode)) {
    ASSIGN_OR_RETURN(std::vector<std::string> json, ListFiles(path, ".json"));
    ASSIGN_OR_RETURN(std::vector<std::string> jsonl, ListFiles(path, ".jsonl"));
    json.insert(json.end(), jsonl.begin(), jsonl.end());
    std::sort(json.begin(), json.end());
    if (json.empty()) return InvalidArgument("'" + path + "' holds no .json or .jsonl trace files");
    for (const std::string& name : json) {
      const std::string full = name.find('/') == std::string::npos ? path + "/" + name : name;
      RETURN_IF_ERROR(LoadFile(full, limits, &c));
    }
  } else {
    RETURN_IF_ERROR(LoadFile(path, limits, &c));
  }
  return c;
}

}  // namespace deltakv::kvsim
