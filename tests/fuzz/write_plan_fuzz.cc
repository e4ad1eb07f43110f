// Fuzzes the write plan reader: arbitrary bytes are rejected or walked without reading
// outside the buffer, and every record it yields lies inside its tensor and the buffer.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "deltasync/write_plan.h"

using namespace deltakv;
using namespace deltakv::deltasync;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint64_t> words(size / 8 + 1);
  std::memcpy(words.data(), data, size);
  std::span<uint8_t> buf(reinterpret_cast<uint8_t*>(words.data()), size);
  auto r = WritePlanReader::Open(buf);
  if (!r.ok()) {
    if (r.status().code() != StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  Status s = r->ForEach([&](const PlanRecord& rec, std::span<uint8_t> bytes) {
    const PlanTensor& t = r->tensors()[rec.tensor];
    if (rec.canonical_offset + rec.length > t.canonical_length) std::abort();
    if (bytes.data() < buf.data() || bytes.data() + bytes.size() > buf.data() + buf.size()) {
      std::abort();
    }
    for (uint8_t& b : bytes) b ^= 0xff;  // writable, as a rank stages in place
    return Status::Ok();
  });
  if (!s.ok()) std::abort();  // Open validated every record
  return 0;
}
