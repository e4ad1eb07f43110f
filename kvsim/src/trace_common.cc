// Shared definitions of the trace model (kvsim/trace.h).
#include "kvsim/trace.h"

namespace deltakv::kvsim {

std::string_view TraceFormatName(TraceFormat format) {
  return format == TraceFormat::kWeka ? "weka" : "mooncake";
}

uint64_t Corpus::requests() const {
  uint64_t n = 0;
  for (const Trace& t : traces)
    for (const Conversation& c : t.conversations) n += c.turns.size();
  return n;
}

}  // namespace deltakv::kvsim
