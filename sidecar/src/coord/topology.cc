#include "coord/topology.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/file_util.h"

namespace deltakv::sidecar {

namespace {
constexpr const char* kFormat = "deltakv.topology/1";

StatusOr<uint32_t> Degree(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return InvalidArgument(std::string("topology: '") + key + "' is missing");
  if (!it->is_number_unsigned() || it->get<uint64_t>() == 0 ||
      it->get<uint64_t>() > kTopologyMaxWorld) {
    return InvalidArgument(std::string("topology: '") + key + "' must be an integer 1.." +
                           std::to_string(kTopologyMaxWorld));
  }
  return static_cast<uint32_t>(it->get<uint64_t>());
}
}  // namespace

const std::vector<uint32_t>& Topology::RanksOf(const std::string& node) const {
  static const std::vector<uint32_t> kNone;
  auto it = nodes.find(node);
  return it == nodes.end() ? kNone : it->second;
}

StatusOr<Topology> ParseTopology(std::string_view text, const std::vector<std::string>& members) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("topology: not a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (key != "format" && key != "world" && key != "tp" && key != "pp" && key != "nodes") {
      return InvalidArgument("topology: unknown key '" + key + "'");
    }
  }
  auto format = j.find("format");
  if (format == j.end() || !format->is_string() || format->get<std::string>() != kFormat) {
    return InvalidArgument(std::string("topology: 'format' must be \"") + kFormat + "\"");
  }
  Topology t;
  ASSIGN_OR_RETURN(t.world, Degree(j, "world"));
  ASSIGN_OR_RETURN(t.tp, Degree(j, "tp"));
  ASSIGN_OR_RETURN(t.pp, Degree(j, "pp"));
  if (uint64_t{t.tp} * t.pp != t.world) {
    return InvalidArgument("topology: tp " + std::to_string(t.tp) + " * pp " +
                           std::to_string(t.pp) + " is not the world " + std::to_string(t.world));
  }
  auto nodes = j.find("nodes");
  if (nodes == j.end() || !nodes->is_object() || nodes->empty()) {
    return InvalidArgument("topology: 'nodes' must be an object of node name -> ranks");
  }
  std::vector<std::string> served_by(t.world);
  for (const auto& [node, ranks] : nodes->items()) {
    if (std::find(members.begin(), members.end(), node) == members.end()) {
      return InvalidArgument("topology: node '" + node + "' is not among the group's members");
    }
    if (!ranks.is_array() || ranks.empty()) {
      return InvalidArgument("topology: node '" + node + "' must list at least one rank");
    }
    std::vector<uint32_t>& mine = t.nodes[node];
    for (const nlohmann::json& r : ranks) {
      if (!r.is_number_unsigned() || r.get<uint64_t>() >= t.world) {
        return InvalidArgument("topology: node '" + node + "': rank " + r.dump() +
                               " is outside the world 0.." + std::to_string(t.world - 1));
      }
      const uint32_t rank = static_cast<uint32_t>(r.get<uint64_t>());
      if (!mine.empty() && rank <= mine.back()) {
        return InvalidArgument("topology: node '" + node +
                               "': ranks must be listed in increasing "
                               "order without repeats (" +
                               std::to_string(rank) + " after " + std::to_string(mine.back()) +
                               ")");
      }
      // A node's engine serves consecutive global ranks (first_global_rank onwards).
      if (!mine.empty() && rank != mine.back() + 1) {
        return InvalidArgument("topology: node '" + node +
                               "': ranks must be consecutive, as its "
                               "engine serves global ranks first_global_rank.. in a row (" +
                               std::to_string(rank) + " after " + std::to_string(mine.back()) +
                               ")");
      }
      if (!served_by[rank].empty()) {
        return InvalidArgument("topology: rank " + std::to_string(rank) +
                               " is served by two nodes, '" + served_by[rank] + "' and '" + node +
                               "'");
      }
      served_by[rank] = node;
      mine.push_back(rank);
    }
  }
  for (uint32_t r = 0; r < t.world; ++r) {
    if (served_by[r].empty()) {
      return InvalidArgument("topology: rank " + std::to_string(r) + " of " +
                             std::to_string(t.world) + " is served by no node");
    }
  }
  for (const std::string& m : members) {
    if (t.nodes.count(m) == 0) {
      return InvalidArgument("topology: member '" + m + "' has no entry in 'nodes'");
    }
  }
  return t;
}

StatusOr<Topology> LoadTopology(const std::string& path, const std::vector<std::string>& members) {
  auto text = ReadFileToString(path, 1 << 20);
  if (!text.ok()) return text.status().WithPrefix("topology '" + path + "'");
  auto t = ParseTopology(*text, members);
  if (!t.ok()) return t.status().WithPrefix("'" + path + "'");
  return t;
}

}  // namespace deltakv::sidecar
