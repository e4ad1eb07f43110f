// XorDecoder: turns a stream of zstd frames holding an XOR delta into the runs of bytes that
// are nonzero, delivered to a NonzeroSink in increasing position order.
//
// This is the one swappable decoding component of delta apply. Implementations:
//   - MakeLibzstdXorDecoder(): libzstd streaming decompression into a small bounded buffer,
//     then a scan for nonzero bytes (memory O(window), time O(decoded size)).
//   - MakeSparseWalkerDecoder() (deltasync/zstd_walker.h): decodes the zstd sequences directly
//     and never materializes zero runs (memory O(window / 8 + nonzeros in the window)).
//
// Contract for every implementation:
//   - Positions are offsets into the concatenated decoded output of all frames in `input`.
//   - An empty input (or one of skippable frames only) holds no frame: OK, with frames and
//     decoded_length 0 and nothing delivered.
//   - Runs are delivered with strictly increasing, non-overlapping positions. A run may contain
//     zero bytes (a decoder may merge nearby nonzeros) but every nonzero byte of the decoded
//     output is in exactly one run.
//   - The span passed to OnRun is valid only during the call.
//   - If the sink returns an error, decoding stops and that error is returned unchanged.
//   - Malformed, truncated or corrupt input: DataLoss, with the byte offset in `input` where it
//     was detected when known. Window or work beyond the limits: ResourceExhausted. Output
//     beyond max_output: ResourceExhausted whose message starts with kOutputLimitMessage
//     (IsOutputLimitError tells it apart), detected before any byte past the limit reaches
//     the sink.
//     Frames that need a dictionary: Unimplemented.
//
// Thread-safety: a decoder object is used by one thread at a time; create one per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"
#include "deltasync/xor_digest.h"

namespace deltakv::deltasync {

inline constexpr std::string_view kOutputLimitMessage = "output limit exceeded";

// True if `s` is the error a decoder returns when the output passes DecodeLimits::max_output.
inline bool IsOutputLimitError(const Status& s) {
  return s.code() == StatusCode::kResourceExhausted &&
         std::string_view(s.message()).starts_with(kOutputLimitMessage);
}

class NonzeroSink {
 public:
  virtual ~NonzeroSink() = default;
  virtual Status OnRun(uint64_t position, std::span<const uint8_t> bytes) = 0;

  // Byte-wise delivery, for sinks that merge runs themselves. A decoder that holds the nonzero
  // bytes one by one (the sparse walker) hands a sink whose TakesBytes() is true each batch of
  // them through OnBytes instead of grouping them into runs for OnRun: `count` entries, entry i
  // packing the byte at position base + (entries[i] >> 8) with value entries[i] & 0xFF (never
  // 0). Positions increase strictly within and across calls, each nonzero byte is delivered
  // once, through OnBytes or OnRun, and an error stops decoding as for OnRun. The array is
  // valid only during the call. Other decoders call OnRun only.
  virtual bool TakesBytes() const { return false; }
  // The default hands each group of adjacent bytes to OnRun.
  virtual Status OnBytes(const uint64_t* entries, size_t count, uint64_t base);
};

struct DecodeLimits {
  // Refuse to produce more than this many decoded bytes in total.
  uint64_t max_output = UINT64_MAX;
  // Refuse frames whose window is larger than 2^max_window_log bytes.
  uint32_t max_window_log = 27;
  // Verify the XXH64 content checksum of frames that carry one.
  bool verify_checksum = true;
  // Compute the xor_digest (deltasync/xor_digest.h) of the whole decoded output into
  // DecodeResult::digest, for decoders whose computes_digest() is true.
  bool compute_digest = false;
};

struct DecodeResult {
  uint64_t decoded_length = 0;  // total decoded bytes across all frames
  uint64_t frames = 0;          // zstd frames decoded (skippable frames not counted)
  uint64_t nonzero_bytes = 0;   // nonzero bytes delivered
  // With DecodeLimits::compute_digest, from a decoder that computes it: the xor_digest of the
  // concatenated decoded output (positions as delivered to the sink).
  std::optional<XorDigest> digest;
};

class XorDecoder {
 public:
  virtual ~XorDecoder() = default;
  virtual std::string_view name() const = 0;
  // True if Decode fills DecodeResult::digest when DecodeLimits::compute_digest is set (the
  // sparse walker, from the nonzero bytes it already holds); otherwise callers digest the runs.
  virtual bool computes_digest() const { return false; }
  // Decodes all frames in `input`. See the contract above.
  virtual StatusOr<DecodeResult> Decode(std::span<const uint8_t> input, const DecodeLimits& limits,
                                        NonzeroSink& sink) = 0;
};

std::unique_ptr<XorDecoder> MakeLibzstdXorDecoder();

// Decodes the compressed bytes of one delta frame entry, which must decode to exactly
// `expected_length` bytes. DataLoss "<where>: decodes to more than its declared N bytes" or
// "<where>: decoded M bytes, expected N" on a length mismatch; other decoder errors prefixed
// with `where`.
// With `expected_digest` (the manifest's xor_digest, deltasync/xor_digest.h) the decoded bytes
// are checked against it, at a cost proportional to the nonzero bytes, and the frames' XXH64
// content checksums are not computed; a mismatch is DataLoss "<where>: decoded bytes have
// xor_digest D, the manifest says E". Without it, frames that carry a content checksum are
// verified as usual. Either way the check ends the call: runs already delivered to `sink`
// before a failure must be discarded by the caller.
StatusOr<DecodeResult> DecodeDeltaFrame(XorDecoder& decoder, std::span<const uint8_t> input,
                                        uint64_t expected_length, uint32_t max_window_log,
                                        NonzeroSink& sink, const std::string& where,
                                        const std::optional<XorDigest>& expected_digest = {});

// Returns the decoder registered under `name`: "walker" (the sparse walker, the default for "")
// or "libzstd".
// InvalidArgument for an unknown name.
StatusOr<std::unique_ptr<XorDecoder>> MakeXorDecoder(std::string_view name);

}  // namespace deltakv::deltasync
