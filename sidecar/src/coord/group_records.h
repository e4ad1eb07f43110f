// The records the nodes of a group write to etcd (docs/MULTINODE.md, "Keys") and the group's
// view of one commit's pauses, with their JSON forms.
//
// Every Parse* function takes the text of an etcd value: DataLoss with a message naming the
// record and the field for text that is not a JSON object, a missing or mistyped required
// field, or a value out of range; optional fields (added after the first release of a record)
// default when absent. Values, no shared state.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace deltakv::sidecar {

// syncs/<key>/decision. Required: "decision" ("commit" | "abort"). Optional: "by", "reason",
// "unix", and in COMMIT records the request decided ("version", "parent", "delta") and the
// common commit point "commit_at_unix_ns" (0 or absent: none).
struct GroupDecision {
  bool commit = false;
  std::string by;      // the node that wrote it
  std::string reason;  // for ABORT
  double unix = 0;     // when it was written (writer's clock, seconds)
  std::string version, parent, delta;
  int64_t commit_at_unix_ns = 0;
  // How this node learnt it (not part of the record): "wrote" (this node's write stood),
  // "peer" (woken by the writer's POST /v1/peer/decided) or "etcd" (its own poll).
  std::string learnt;
};
std::string DecisionToJson(const GroupDecision& d);
StatusOr<GroupDecision> ParseDecision(std::string_view text);

// latest: the group's most recent COMMIT, written in the transaction that writes the decision.
// Required: "key", "version", "parent", "delta" (strings). Optional: "unix".
struct LatestCommit {
  std::string key;  // the sync key ("syncs/<version>@<parent>#<attempt>")
  std::string version, parent, delta;
  double unix = 0;
};
std::string LatestToJson(const LatestCommit& l);
StatusOr<LatestCommit> ParseLatest(std::string_view text);

// syncs/<key>/resumed/<node>: one node's pause for the commit, on that node's lease.
// Required: "node" (string), "pause_start_ns", "resume_ns" (integers > 0, resume >= start),
// "pause_ms" (number >= 0).
struct NodePause {
  std::string node;
  int64_t pause_start_ns = 0;  // CLOCK_REALTIME, unix ns: the first rank paused
  int64_t resume_ns = 0;       // the last rank resumed
  double pause_ms = 0;         // the longest rank pause (engine clock, not wall-clock difference)
};
nlohmann::json NodePauseJson(const NodePause& p);
StatusOr<NodePause> ParseNodePause(std::string_view text);

// The group's view of one commit: the members that published their pause, those that did not
// (within the bounded wait), and the spread of resume times among those that did.
struct GroupPauseView {
  std::vector<NodePause> nodes;      // in member order
  std::vector<std::string> missing;  // members without a record
  // max(resume_ns) - min(resume_ns) over `nodes`, in ms; 0 with fewer than two nodes. Includes
  // the nodes' clock offsets (clocks are assumed synchronized by NTP or PTP).
  double resume_skew_ms() const;
  nlohmann::json ToJson() const;
};
// Builds the view of `members` from the records found (records of non-members are ignored;
// one per node, the first wins).
GroupPauseView MakePauseView(const std::vector<std::string>& members,
                             const std::vector<NodePause>& found);

}  // namespace deltakv::sidecar
