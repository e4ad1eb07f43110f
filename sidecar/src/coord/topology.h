// Topology: how one model's global ranks are spread over the nodes of a multi-node group,
// described once in a JSON file that every node's sidecar reads (docs/MULTINODE.md,
// "Topology"):
//
//   {"format": "deltakv.topology/1", "world": 8, "tp": 8, "pp": 1,
//    "nodes": {"node-a": [0, 1, 2, 3], "node-b": [4, 5, 6, 7]}}
//
// world = tp * pp; every global rank 0..world-1 is served by exactly one node; the nodes are
// exactly the group's members. A node's ranks are consecutive, listed in increasing order; a rank r
// is tensor-parallel rank r % tp of pipeline stage r / tp.
//
// Values; no shared state.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace deltakv::sidecar {

inline constexpr uint32_t kTopologyMaxWorld = 65536;

struct Topology {
  uint32_t world = 1;
  uint32_t tp = 1;
  uint32_t pp = 1;
  std::map<std::string, std::vector<uint32_t>> nodes;  // node -> its global ranks, ascending

  // The ranks `node` serves; empty if it is not in the topology.
  const std::vector<uint32_t>& RanksOf(const std::string& node) const;
};

// Parses and validates a topology against the group's members. InvalidArgument naming what is
// wrong for: text that is not a JSON object, an unknown or missing key, a wrong format id,
// world/tp/pp of 0, above kTopologyMaxWorld or with tp * pp != world, a node that is not a
// member, a member without a node entry, a node with no ranks, a rank >= world, ranks not in
// increasing order or not consecutive, a rank served by two nodes (overlap) or by none (gap).
StatusOr<Topology> ParseTopology(std::string_view text, const std::vector<std::string>& members);

// Reads `path` (at most 1 MiB) and parses it; errors are prefixed with the path.
StatusOr<Topology> LoadTopology(const std::string& path, const std::vector<std::string>& members);

}  // namespace deltakv::sidecar
