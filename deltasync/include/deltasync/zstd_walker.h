// Sparse zstd walker: decodes standard zstd frames (RFC 8878) holding a mostly-zero XOR delta
// and reports only the nonzero bytes of the decoded stream, without ever materializing it.
//
// The walker keeps no history buffer. Everything it knows about earlier output is a
// position-sorted index of the nonzero bytes inside the current frame's window, with a coarse
// page index, so a match is resolved by looking up the nonzeros of its source range (a match
// whose source holds none costs one lookup). Work is proportional to the compressed size plus
// the number of sequences plus the number of nonzero bytes produced; zero runs cost nothing
// except when the content checksum is verified, where XXH64 advances over zero stripes in
// registers (about one multiply per 8 logical bytes, no memory traffic). Memory is bounded by
// the window's page count plus the nonzeros inside the window plus one compressed block.
//
// Accepted input: any sequence of zstd frames and skippable frames, fed in arbitrary chunks.
// Frames that carry a dictionary id are refused (Unimplemented); legacy (v0.x) frames too.
// The walker is stricter than libzstd 1.5.x on a few spec violations that libzstd tolerates
// (offset beyond the window, offset 0 from a repeat code, an over-read or not fully consumed
// sequence bitstream, Huffman streams that do not end exactly, blocks above
// Block_Maximum_Size, reserved bits); those errors say "(libzstd tolerates)".
//
// Ownership: the walker borrows the NonzeroSink, which must outlive it. Spans passed to the
// sink are valid only during the call.
//
// Failure: the first error (corrupt input, a cap, or a sink error) is sticky. Every later call
// returns it again and nothing more is delivered. Runs delivered before the error stay
// delivered; callers that need all-or-nothing must buffer or discard them.
//
// Thread-safety: a walker is used by one thread at a time. Distinct walkers are independent.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "base/status.h"
#include "deltasync/xor_decoder.h"

namespace deltakv::deltasync {

struct WalkerOptions {
  DecodeLimits limits;
  // Caps the work units spent (one per sequence, literal byte, nonzero byte produced and block).
  // Exceeding it gives ResourceExhausted. Bounds CPU on hostile input independently of output.
  uint64_t max_work = UINT64_MAX;
  // Nonzero bytes separated by at most this many zero bytes are delivered in one run (the zeros
  // included). 0 delivers maximal runs of nonzero bytes only. Either way a run is cut every
  // 64 KiB (a longer stretch comes as several runs).
  // Not used for a sink that takes bytes (NonzeroSink::TakesBytes), which gets every nonzero
  // byte on its own.
  uint32_t merge_gap = 0;
  // For measuring the entropy-decoding stage alone (walker_bench): every frame, block, literals
  // section and sequence is parsed, decoded and checked as usual (the same errors, on the same
  // input), but no sequence is executed and no byte is looked at: the position advances over
  // literals, matches and Raw/RLE blocks as if they were zeros. Nothing is delivered
  // (nonzero_bytes and runs stay 0), and content checksums are not checked (counted in
  // checksums_skipped). decoded_length, frames, blocks and sequences are those of a full walk.
  bool decode_only = false;
};

// Constructs seen that RFC 8878 allows but libzstd 1.5.4 rejects (for differential testing).
enum WalkCompatFlag : uint32_t {
  kCompatZeroSequencesLongForm = 1u << 0,  // Number_of_Sequences == 0 written in 2 or 3 bytes
};

struct WalkStats {
  uint64_t decoded_length = 0;      // decoded bytes, all frames
  uint64_t frames = 0;              // zstd frames completed (skippable frames not counted)
  uint64_t skippable_frames = 0;    // skippable frames skipped
  uint64_t blocks = 0;              // blocks decoded, of which:
  uint64_t raw_blocks = 0;          //   Raw_Block
  uint64_t rle_blocks = 0;          //   RLE_Block
  uint64_t sequences = 0;           // sequences executed
  uint64_t nonzero_bytes = 0;       // nonzero bytes delivered
  uint64_t runs = 0;                // OnRun calls made (OnBytes calls, to a sink taking bytes)
  uint64_t checksums_verified = 0;  // frames whose content checksum was checked and matched
  uint64_t checksums_skipped = 0;   // frames with a checksum not checked (verify_checksum off,
                                    // or decode_only)
  uint64_t work = 0;                // work units spent (see WalkerOptions::max_work)
  uint32_t compat_flags = 0;        // WalkCompatFlag bits
  uint64_t input_bytes = 0;         // bytes consumed by Feed
};

class SparseZstdWalker {
 public:
  explicit SparseZstdWalker(NonzeroSink& sink, const WalkerOptions& options = {});
  ~SparseZstdWalker();
  SparseZstdWalker(const SparseZstdWalker&) = delete;
  SparseZstdWalker& operator=(const SparseZstdWalker&) = delete;

  // Starts a new walk of another input, delivering to `sink` (which must outlive the walk), as a
  // new walker would, but keeping the memory of earlier walks: a walker reused across many
  // frames allocates nothing per frame. Clears a sticky error.
  void Restart(NonzeroSink& sink, const WalkerOptions& options = {});

  // Consumes the next `chunk` of the input (any size, including 0). Decodes every unit (frame
  // header, block, checksum) that is complete; buffers at most one incomplete block.
  // Returns OK, or the sticky error (DataLoss with the input offset, ResourceExhausted,
  // Unimplemented, or the sink's error unchanged).
  Status Feed(std::span<const uint8_t> chunk);

  // Declares the end of input: fails with DataLoss if a frame is incomplete, otherwise delivers
  // the last pending run. REQUIRES: called once, after the last Feed.
  Status Finish();

  const WalkStats& stats() const;
  // decoded_length, frames and nonzero_bytes of stats(); with options.limits.compute_digest,
  // the xor_digest of everything delivered since the walker was made or restarted.
  DecodeResult result() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// One-shot convenience: Feed(input) then Finish(). Returns the stats or the first error.
StatusOr<WalkStats> WalkZstd(std::span<const uint8_t> input, const WalkerOptions& options,
                             NonzeroSink& sink);

// The walker as an XorDecoder (name "sparse-walker"); merge_gap 0, max_work unlimited.
std::unique_ptr<XorDecoder> MakeSparseWalkerDecoder();

}  // namespace deltakv::deltasync
