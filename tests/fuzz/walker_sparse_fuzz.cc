// Structured differential fuzzer for the walker's fast paths: the input is a recipe for a
// mostly-zero buffer (runs of zeros, short and long nonzero runs, repeats of earlier content),
// which libzstd compresses at a level, window and checksum flag the input also picks. Every
// frame is therefore valid and deep: long zero matches (the bitmap summary), repeated nonzero
// sources (match copies), long literal runs, content checksums (the sparse XXH64 path). The
// walker must deliver exactly the nonzero bytes of the buffer, and, with one byte of the frame
// flipped, must agree with libzstd's verdict (CompareWithLibzstd). The production check
// (DecodeDeltaFrame with the buffer's xor_digest instead of XXH64) must accept the valid frame
// with both decoders, and a flipped frame it accepts must decode to exactly the buffer. One
// knob bit has the frame parsed into sequences as the publisher does by default (one per run
// of nonzero bytes, deltasync/src/xor_sequences.h), with libzstd validating the parse: a parse
// it refuses aborts. Another has the literals stored raw.
#include <zstd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "deltasync/walker_test_util.h"
#include "deltasync/xor_decoder.h"
#include "deltasync/xor_digest.h"
#include "xor_sequences.h"  // the publisher's sequence parse (and zstd.h's producer API)

namespace {

struct Recipe {
  const uint8_t* p;
  size_t n;
  uint8_t Next() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
};

std::vector<uint8_t> BuildBuffer(Recipe& r, size_t limit) {
  std::vector<uint8_t> out;
  while (r.n > 0 && out.size() < limit) {
    const uint8_t op = r.Next();
    switch (op & 3) {
      case 0: {  // a zero run, up to ~1 MiB
        const size_t len = (size_t{r.Next()} << ((op >> 2) & 15)) + 1;
        out.resize(std::min(limit, out.size() + len), 0);
        break;
      }
      case 1: {  // a short nonzero run from the recipe
        const size_t len = 1 + (op >> 2) % 20;
        for (size_t i = 0; i < len && out.size() < limit; ++i) out.push_back(r.Next() | 1);
        break;
      }
      case 2: {  // a long run of mixed bytes (long literals)
        const size_t len = 17 + r.Next() * 4;
        const uint8_t seed = r.Next();
        for (size_t i = 0; i < len && out.size() < limit; ++i) {
          out.push_back(static_cast<uint8_t>((i * 37 + seed) % 7 == 0 ? 0 : i * seed + 1));
        }
        break;
      }
      default: {  // a repeat of earlier content (a match with nonzero source)
        if (out.empty()) break;
        const size_t back = 1 + ((size_t{r.Next()} << 8 | r.Next()) % out.size());
        const size_t len = 1 + r.Next() * ((op >> 2) + 1);
        const size_t from = out.size() - back;
        for (size_t i = 0; i < len && out.size() < limit; ++i) out.push_back(out[from + i]);
        break;
      }
    }
  }
  return out;
}

using deltakv::deltasync::ComputeXorDigest;
using deltakv::deltasync::XorDigest;

// DecodeDeltaFrame with `digest` through both decoders: a valid frame must pass, and any frame
// that passes must have decoded to exactly the nonzeros of `buffer`.
bool DigestCheckAgrees(const std::vector<uint8_t>& frame, const std::vector<uint8_t>& buffer,
                       const XorDigest& digest, bool valid) {
  using namespace deltakv::deltasync;
  const walker_test::Nonzeros want = walker_test::ScanNonzeros(buffer);
  for (const char* name : {"walker", "libzstd"}) {
    auto decoder = MakeXorDecoder(name);
    if (!decoder.ok()) return false;
    walker_test::CollectingSink sink;
    auto r = DecodeDeltaFrame(**decoder, frame, buffer.size(), 31, sink, "frame", digest);
    if (valid && !r.ok()) {
      std::fprintf(stderr, "%s refused a valid frame with its digest: %s\n", name,
                   r.status().ToString().c_str());
      return false;
    }
    if (r.ok() && sink.nonzeros() != want) {
      std::fprintf(stderr, "%s accepted a frame whose content differs from its digest\n", name);
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  Recipe r{data, size};
  const uint8_t knobs = r.Next();
  const int levels[8] = {-3, 1, 2, 3, 5, 9, 15, 19};
  const int level = levels[knobs & 7];
  const bool checksum = (knobs & 8) != 0;
  const bool xor_runs = (knobs & 16) != 0;
  // Raw literals are read in place, where the walker loads short runs as whole words up to the
  // block's end.
  const bool raw_literals = (knobs & 32) != 0;
  const int window_log = 10 + (r.Next() % 13);  // 1 KiB .. 4 MiB
  const uint8_t flip = r.Next();
  const std::vector<uint8_t> buffer = BuildBuffer(r, 4u << 20);

  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, checksum ? 1 : 0);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_windowLog, window_log);
  if (raw_literals) ZSTD_CCtx_setParameter(cctx, ZSTD_c_literalCompressionMode, ZSTD_ps_disable);
  if (xor_runs) {
    if (!deltakv::deltasync::UseXorRunSequences(cctx).ok()) std::abort();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_enableSeqProducerFallback, 0);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_validateSequences, 1);
  }
  std::vector<uint8_t> frame(ZSTD_compressBound(buffer.size()));
  const size_t n =
      ZSTD_compress2(cctx, frame.data(), frame.size(), buffer.data(), buffer.size());
  ZSTD_freeCCtx(cctx);
  if (ZSTD_isError(n)) {
    if (!xor_runs) return 0;
    std::fprintf(stderr, "libzstd refused the XOR-run parse: %s\n", ZSTD_getErrorName(n));
    std::abort();
  }
  frame.resize(n);

  using deltakv::deltasync::walker_test::CompareWithLibzstd;
  const std::string verdict = CompareWithLibzstd(frame, 8u << 20);
  if (!verdict.empty()) {
    std::fprintf(stderr, "walker/libzstd mismatch on a valid frame: %s\n", verdict.c_str());
    std::abort();
  }
  const XorDigest digest = ComputeXorDigest(buffer);
  if (!DigestCheckAgrees(frame, buffer, digest, /*valid=*/true)) std::abort();
  if (flip != 0 && frame.size() > 8) {
    frame[(size_t{flip} * 2654435761u) % frame.size()] ^= static_cast<uint8_t>(1u << (flip & 7));
    const std::string corrupt = CompareWithLibzstd(frame, 8u << 20);
    if (!corrupt.empty()) {
      std::fprintf(stderr, "walker/libzstd mismatch on a flipped frame: %s\n", corrupt.c_str());
      std::abort();
    }
    if (!DigestCheckAgrees(frame, buffer, digest, /*valid=*/false)) std::abort();
  }
  return 0;
}
