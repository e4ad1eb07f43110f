// XOR-run sequences: the publisher's parse of a frame's (parent XOR new) bytes into zstd
// sequences, plugged into libzstd as its block-level sequence producer (libzstd then does the
// entropy coding, block layout and checksum, so the frames are ordinary zstd frames).
//
// An XOR delta is mostly zeros with short runs of nonzero bytes. The parse gives each run
// exactly one sequence: its literals are the run and the first zero after it, and its match
// copies the rest of the zero gap from offset 1 (the zero just written). Gaps shorter than
// kXorRunMinZeros stay literals, and the block's last sequence holds the literals after the
// last long gap. libzstd's own match finders split such gaps into several matches (their
// sources must avoid the nonzero byte), about two sequences per nonzero byte at 0.5 % density;
// a walker's cost is per sequence, so these frames walk faster, and they are also smaller on
// such deltas (the offset is nearly always the repeat offset 1). See deltasync/FORMAT.md §2.
//
// Thread-safety: the functions are pure; a CCtx is used by one thread at a time.
#pragma once

#ifndef ZSTD_STATIC_LINKING_ONLY
#define ZSTD_STATIC_LINKING_ONLY  // the sequence producer API
#endif
#include <zstd.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "base/status.h"

namespace deltakv::deltasync {

// A zero gap of at least this many bytes ends a run's sequence: one zero literal, then a match
// of at least ZSTD_MINMATCH_MIN (3) bytes.
inline constexpr size_t kXorRunMinZeros = 4;

// The parse of one block of at most ZSTD_BLOCKSIZE_MAX bytes into `out` (a valid parse as
// ZSTD_sequenceProducer_F defines it: lengths summing to the block, every match at offset 1 of
// at least 3 bytes, the last sequence's match empty). Returns the sequence count (1 or more
// for a nonempty block), or ZSTD_SEQUENCE_PRODUCER_ERROR when `capacity` is too small or the
// block too large (libzstd's capacity, ZSTD_sequenceBound, is always enough).
size_t ParseXorRuns(std::span<const uint8_t> block, ZSTD_Sequence* out, size_t capacity);

// Makes `cctx` parse with ParseXorRuns (after a parameter reset, as the registration does not
// survive one): registers the producer, lets libzstd fall back to its own match finder should
// the parse fail, and turns off long-distance matching, which the producer API refuses.
// Compression level and checksums are set as usual; the level then chooses the entropy
// stage's settings only. Internal on a libzstd error.
Status UseXorRunSequences(ZSTD_CCtx* cctx);

}  // namespace deltakv::deltasync
