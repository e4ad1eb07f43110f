#include "deltasync/xor_decoder.h"

namespace deltakv::deltasync {

StatusOr<std::unique_ptr<XorDecoder>> MakeXorDecoder(std::string_view name) {
  if (name.empty() || name == "libzstd") return MakeLibzstdXorDecoder();
  return InvalidArgument("unknown decoder '" + std::string(name) + "' (known: libzstd)");
}

}  // namespace deltakv::deltasync
