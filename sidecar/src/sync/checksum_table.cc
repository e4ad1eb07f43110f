#include "sync/checksum_table.h"

#include <algorithm>
#include <filesystem>

#include "base/file_util.h"
#include "deltasync/delta_manifest.h"

namespace deltakv::sidecar {

namespace {
constexpr const char* kFileName = "checksums.json";
constexpr const char* kFormat = "deltakv.checksum-table/1";
}  // namespace

std::vector<TableRank> ChecksumTable::RanksOf(const std::vector<shm::RankInfo>& ranks) {
  std::vector<TableRank> out;
  for (const shm::RankInfo& r : ranks) out.push_back({r.rank, r.pid, r.epoch, r.state_word});
  std::sort(out.begin(), out.end(),
            [](const TableRank& a, const TableRank& b) { return a.rank < b.rank; });
  return out;
}

bool ChecksumTable::CurrentFor(const std::vector<shm::RankInfo>& attached) const {
  return !empty() && RanksOf(attached) == ranks;
}

nlohmann::json ChecksumTable::ToJson() const {
  nlohmann::json ranks_json = nlohmann::json::array();
  for (const TableRank& r : ranks) {
    ranks_json.push_back(
        {{"rank", r.rank}, {"pid", r.pid}, {"epoch", r.epoch}, {"state_word", r.state_word}});
  }
  nlohmann::json tensors = nlohmann::json::object();
  for (const auto& [name, adler] : adler32) tensors[name] = deltasync::FormatChecksum(adler);
  nlohmann::json owned_json = nlohmann::json::object();
  for (const auto& [name, sums] : owned) {
    nlohmann::json per_rank = nlohmann::json::array();
    for (const deltasync::AdlerDelta& d : sums) per_rank.push_back({d.s1(), d.s2()});
    owned_json[name] = per_rank;
  }
  nlohmann::json j = {{"format", kFormat},
          {"version", version},
          {"source", source},
          {"checkpoint_verified", checkpoint_verified},
          {"updated_unix", updated_unix},
          {"diverged", diverged},
          {"ranks", ranks_json},
          {"adler32", tensors},
          {"owned", owned_json}};
  if (slice_world != 0) {
    j["slice"] = {{"first", slice_first}, {"count", slice_count}, {"world", slice_world}};
  }
  return j;
}

StatusOr<ChecksumTable> ChecksumTable::FromJson(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("checksum table: not a JSON object");
  auto format = j.find("format");
  if (format == j.end() || !format->is_string() || format->get<std::string>() != kFormat) {
    return InvalidArgument("checksum table: format is not '" + std::string(kFormat) + "'");
  }
  try {
    ChecksumTable t;
    t.version = j.at("version").get<std::string>();
    t.source = j.at("source").get<std::string>();
    t.checkpoint_verified = j.at("checkpoint_verified").get<bool>();
    t.updated_unix = j.at("updated_unix").get<double>();
    t.diverged = j.at("diverged").get<std::string>();
    for (const auto& r : j.at("ranks")) {
      t.ranks.push_back({r.at("rank").get<uint32_t>(), r.at("pid").get<uint32_t>(),
                         r.at("epoch").get<uint64_t>(), r.at("state_word").get<uint64_t>()});
    }
    for (const auto& [name, v] : j.at("adler32").items()) {
      const std::string hex = v.get<std::string>();
      size_t used = 0;
      unsigned long value = hex.size() == 8 ? std::stoul(hex, &used, 16) : 0;
      if (hex.size() != 8 || used != 8) {
        return InvalidArgument("checksum table: tensor '" + name + "': '" + hex +
                               "' is not 8 hex digits");
      }
      t.adler32[name] = static_cast<uint32_t>(value);
    }
    if (j.contains("slice")) {
      const nlohmann::json& sl = j.at("slice");
      t.slice_first = sl.at("first").get<uint32_t>();
      t.slice_count = sl.at("count").get<uint32_t>();
      t.slice_world = sl.at("world").get<uint32_t>();
      if (t.slice_world == 0 || t.slice_count == 0 || t.slice_first >= t.slice_world ||
          t.slice_count > t.slice_world - t.slice_first) {
        return InvalidArgument("checksum table: slice is not ranks [first, first + count) of "
                               "world");
      }
    }
    if (j.contains("owned")) {
      for (const auto& [name, per_rank] : j.at("owned").items()) {
        std::vector<deltasync::AdlerDelta>& sums = t.owned[name];
        for (const auto& pair : per_rank) {
          const uint32_t s1 = pair.at(0).get<uint32_t>(), s2 = pair.at(1).get<uint32_t>();
          if (pair.size() != 2 || s1 >= 65521 || s2 >= 65521) {
            return InvalidArgument("checksum table: tensor '" + name +
                                   "': owned sums must be pairs below 65521");
          }
          sums.push_back(deltasync::AdlerDelta::FromSums(s1, s2));
        }
      }
    }
    return t;
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("checksum table: ") + e.what());
  }
}

StatusOr<ChecksumTable> ChecksumTable::Load(const std::string& dir) {
  const std::string path = dir + "/" + kFileName;
  if (!std::filesystem::exists(path)) return NotFound("no " + path);
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, 1ull << 30));
  auto t = FromJson(text);
  if (!t.ok()) return t.status().WithPrefix(path);
  return t;
}

Status ChecksumTable::Save(const std::string& dir) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  return WriteFileAtomic(dir + "/" + kFileName, ToJson().dump(2) + "\n");
}

}  // namespace deltakv::sidecar
