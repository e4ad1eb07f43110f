// Fuzzes the sidecar's checksum table parser (sidecar/src/sync/checksum_table.h): arbitrary
// text is rejected with InvalidArgument, or parsed into a table whose JSON parses back to the
// same table, with every owned partial sum already reduced below the Adler modulus.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "sync/checksum_table.h"

using namespace deltakv;
using namespace deltakv::sidecar;

namespace {
void Check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto t = ChecksumTable::FromJson(text);
  if (!t.ok()) {
    Check(t.status().code() == StatusCode::kInvalidArgument);
    return 0;
  }
  for (const auto& [name, sums] : t->owned) {
    for (const auto& d : sums) Check(d.s1() < 65521 && d.s2() < 65521);
  }
  auto back = ChecksumTable::FromJson(t->ToJson().dump());
  Check(back.ok());
  Check(back->version == t->version && back->source == t->source &&
        back->diverged == t->diverged && back->checkpoint_verified == t->checkpoint_verified);
  Check(back->ranks == t->ranks && back->adler32 == t->adler32);
  Check(back->owned.size() == t->owned.size());
  for (const auto& [name, sums] : t->owned) {
    const auto& other = back->owned.at(name);
    Check(other.size() == sums.size());
    for (size_t i = 0; i < sums.size(); ++i) {
      Check(other[i].s1() == sums[i].s1() && other[i].s2() == sums[i].s2());
    }
  }
  return 0;
}
