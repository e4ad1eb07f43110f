// libFuzzer target: ParseSafetensorsHeader on arbitrary bytes taken as a whole file.
//
// Beyond "no crash, no sanitizer report", it checks what an accepted header promises: tensors
// sorted and exactly covering the data section, byte sizes matching dtype x shape, and that
// writing the parsed header back out (BuildSafetensorsHeader) and parsing that gives the same
// tensors and metadata. A rejected input must be InvalidArgument with a message.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "deltasync/safetensors.h"

namespace {

using deltakv::StatusCode;
using deltakv::StatusOr;
using namespace deltakv::deltasync;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "safetensors_fuzz: %s\n", what);
  std::abort();
}

constexpr uint64_t kMaxHeader = 1 << 20;

void CheckAccepted(const SafetensorsHeader& h, std::span<const uint8_t> file) {
  if (h.data_offset() + h.data_size != file.size()) Fail("data section size");
  uint64_t covered = 0;
  for (const TensorInfo& t : h.tensors) {
    if (t.begin != covered || t.end < t.begin) Fail("tensors do not tile the data section");
    covered = t.end;
    uint64_t numel = 1;
    for (uint64_t d : t.shape) numel *= d;  // validated: no overflow, or a zero dimension
    bool zero_dim = false;
    for (uint64_t d : t.shape) zero_dim |= d == 0;
    if (zero_dim) numel = 0;
    if (numel * DTypeSize(t.dtype) != t.size()) Fail("size != dtype x shape");
  }
  if (covered != h.data_size) Fail("tensors do not cover the data section");

  // Write the header back out and parse it again.
  std::vector<TensorToWrite> tensors;
  for (const TensorInfo& t : h.tensors) {
    tensors.push_back(
        {t.name, t.dtype, t.shape, file.subspan(h.data_offset() + t.begin, t.size())});
  }
  StatusOr<std::string> rebuilt = BuildSafetensorsHeader(tensors, h.metadata);
  if (!rebuilt.ok()) Fail(("rebuild failed: " + rebuilt.status().ToString()).c_str());
  std::string image(8, '\0');
  for (int i = 0; i < 8; ++i) image[i] = static_cast<char>(uint64_t{rebuilt->size()} >> (8 * i));
  image += *rebuilt;
  image.append(reinterpret_cast<const char*>(file.data() + h.data_offset()), h.data_size);
  StatusOr<SafetensorsHeader> again = ParseSafetensorsHeader(
      {reinterpret_cast<const uint8_t*>(image.data()), image.size()}, image.size(), ~uint64_t{0});
  if (!again.ok()) Fail(("reparse failed: " + again.status().ToString()).c_str());
  if (again->metadata != h.metadata) Fail("metadata changed in the round trip");
  if (again->tensors.size() != h.tensors.size()) Fail("tensor count changed");
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const TensorInfo& x = h.tensors[i];
    const TensorInfo& y = again->tensors[i];
    if (x.name != y.name || x.dtype != y.dtype || x.shape != y.shape || x.begin != y.begin ||
        x.end != y.end) {
      Fail("tensor changed in the round trip");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> file(data, size);
  StatusOr<SafetensorsHeader> header = ParseSafetensorsHeader(file, size, kMaxHeader);
  if (!header.ok()) {
    if (header.status().code() != StatusCode::kInvalidArgument)
      Fail("error is not InvalidArgument");
    if (header.status().message().empty()) Fail("error without a message");
    return 0;
  }
  CheckAccepted(*header, file);
  return 0;
}
