// Fuzzes the trace parsers (kvsim/trace.h) and the theoretical hit rate: any input either
// parses (a Weka trace then writes and re-parses to the same text; every hit count is within
// its total) or is rejected with InvalidArgument.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kvsim/theoretical_hit.h"
#include "kvsim/trace.h"

using namespace deltakv;
using namespace deltakv::kvsim;

namespace {
void CheckHits(const Trace& t) {
  Corpus c;
  c.traces.push_back(t);
  const TheoreticalHit h = ComputeTheoreticalHit(c);
  if (h.total.hit_tokens > h.total.input_tokens || h.total.hit_blocks > h.total.total_blocks) {
    std::abort();
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  TraceLimits limits;
  limits.max_file_bytes = 1 << 20;
  limits.max_requests = 4096;
  auto w = ParseWekaTrace(text, "fuzz.json", limits);
  if (w.ok()) {
    const std::string once = WriteWekaTrace(*w);
    auto again = ParseWekaTrace(once, "again.json", limits);
    if (!again.ok() || WriteWekaTrace(*again) != once) std::abort();
    CheckHits(*w);
  } else if (w.status().code() != StatusCode::kInvalidArgument) {
    std::abort();
  }
  auto m = ParseMooncakeTrace(text, "fuzz.jsonl", limits);
  if (m.ok()) {
    CheckHits(*m);
  } else if (m.status().code() != StatusCode::kInvalidArgument) {
    std::abort();
  }
  return 0;
}
