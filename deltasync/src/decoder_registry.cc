#include "deltasync/xor_decoder.h"
#include "deltasync/zstd_walker.h"

namespace deltakv::deltasync {

StatusOr<std::unique_ptr<XorDecoder>> MakeXorDecoder(std::string_view name) {
  // The sparse walker is the default: its memory does not depend on the decoded size.
  if (name.empty() || name == "walker" || name == "sparse-walker") return MakeSparseWalkerDecoder();
  if (name == "libzstd") return MakeLibzstdXorDecoder();
  return InvalidArgument("unknown decoder '" + std::string(name) + "' (known: walker, libzstd)");
}

}  // namespace deltakv::deltasync
