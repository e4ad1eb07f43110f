// Fuzzes the Hugging Face config.json parser (kvsim/model.h) and the capacity planner on what
// it returns: any input either parses into a model whose KV bytes, parameters and plan are
// computed without crashing, or is rejected with InvalidArgument.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kvsim/capacity.h"
#include "kvsim/model.h"

using namespace deltakv;
using namespace deltakv::kvsim;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto m = ParseHfConfig(text, "fuzz.json");
  if (!m.ok()) {
    if (m.status().code() != StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  if (m->kv_layers > m->layers) std::abort();
  for (KvDtype d : {KvDtype::kBf16, KvDtype::kFp8, KvDtype::kFp8DsMla, KvDtype::kFp32}) {
    (void)KvBytesPerToken(*m, d);
  }
  CapacityInputs in;
  in.model = *m;
  in.node = *NodePreset("h200x8");
  auto p = PlanCapacity(in);
  if (!p.ok() && p.status().code() != StatusCode::kInvalidArgument) std::abort();
  return 0;
}
