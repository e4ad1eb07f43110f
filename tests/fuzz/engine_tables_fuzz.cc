// Fuzzes the engine tensor table parser (deltasync/engine_tensors.h) and, through it, the layout
// descriptor parser (TensorLayout::FromJson): arbitrary text is rejected with InvalidArgument
// or parsed into a table that survives a JSON round trip, and whose layouts map canonical bytes
// only to local bytes inside each rank's tensor, consistently with CanonicalToLocal.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "deltasync/engine_tensors.h"
#include "deltasync/layout.h"

using namespace deltakv;
using namespace deltakv::deltasync;

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

void CheckRun(const TensorLayout& l, uint64_t offset, uint64_t length) {
  Status s = l.ForEachPiece(offset, length, [&](const LayoutPiece& p) {
    Check(p.rank < l.world());
    Check(p.length > 0 && p.canonical_offset >= offset &&
          p.canonical_offset + p.length <= offset + length);
    Check(p.local_offset + p.length <= l.LocalBytes(p.rank).total);
    Check(l.CanonicalToLocal(p.rank, p.canonical_offset) == p.local_offset);
    Check(l.LocalToCanonical(p.rank, p.local_offset) == p.canonical_offset);
  });
  Check(s.ok());
}

void CheckLayout(const TensorLayout& l) {
  auto back = TensorLayout::FromJson(l.ToJson());
  Check(back.ok() && back->spec() == l.spec());
  const uint64_t n = l.canonical_bytes();
  if (n == 0) return;
  CheckRun(l, 0, std::min<uint64_t>(n, 1 << 12));
  CheckRun(l, n / 2, std::min<uint64_t>(n - n / 2, 3));
  CheckRun(l, n - 1, 1);
  Check(!l.ForEachPiece(n, 1, [](const LayoutPiece&) {}).ok());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto t = ParseEngineTensorTable(text);
  if (!t.ok()) {
    Check(t.status().code() == StatusCode::kInvalidArgument);
    // The layout parser alone, on the same text.
    auto l = TensorLayout::FromJson(text);
    if (l.ok()) CheckLayout(*l);
    return 0;
  }
  auto again = ParseEngineTensorTable(EngineTensorTableToJson(*t));
  Check(again.ok() && again->rank == t->rank && again->world_size == t->world_size &&
        again->version == t->version && again->tensors.size() == t->tensors.size());
  for (size_t i = 0; i < t->tensors.size(); ++i) {
    const EngineTensor& e = t->tensors[i];
    Check(again->tensors[i].name == e.name && again->tensors[i].local_bytes == e.local_bytes &&
          again->tensors[i].layout.spec() == e.layout.spec());
    CheckLayout(e.layout);
  }
  return 0;
}
