// Fuzzes the parsers of what the sidecar reads from peers and servers: the group's etcd records
// (decision, latest commit, node pause), the topology file, and the S3 XML answers. Any input
// is either accepted or refused with a Status; nothing crashes, and what a record parser
// accepts it writes back to a form that parses to the same value.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "coord/group_records.h"
#include "coord/topology.h"
#include "store/s3_xml.h"

using namespace deltakv;
using namespace deltakv::sidecar;

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto d = ParseDecision(text); d.ok()) {
    auto again = ParseDecision(DecisionToJson(*d));
    // An ABORT record carries no request; a COMMIT keeps it.
    Check(again.ok() && again->commit == d->commit &&
          (!d->commit || (again->version == d->version && again->delta == d->delta &&
                          again->commit_at_unix_ns == d->commit_at_unix_ns)));
  }
  if (auto l = ParseLatest(text); l.ok()) {
    auto again = ParseLatest(LatestToJson(*l));
    Check(again.ok() && again->key == l->key && again->version == l->version);
  }
  if (auto p = ParseNodePause(text); p.ok()) {
    auto again = ParseNodePause(NodePauseJson(*p).dump());
    Check(again.ok() && again->node == p->node && again->resume_ns == p->resume_ns);
  }
  (void)ParseTopology(text, {"a", "b", "node-a", "node-b"});
  for (const std::string& key : XmlElements(text, "Key")) Check(key.size() <= size);
  (void)XmlElement(text, "Code");
  (void)XmlEscape(text);
  return 0;
}
