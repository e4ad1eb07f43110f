#include "xor_sequences.h"

#include <string>

#include "base/le_bytes.h"

namespace deltakv::deltasync {

size_t ParseXorRuns(std::span<const uint8_t> block, ZSTD_Sequence* out, size_t capacity) {
  const uint8_t* const p = block.data();
  const size_t size = block.size();
  if (size > ZSTD_BLOCKSIZE_MAX) return ZSTD_SEQUENCE_PRODUCER_ERROR;
  if (size == 0) return 0;
  size_t count = 0;
  size_t literals_from = 0;  // the literals not yet in a sequence start here
  size_t i = 0;
  while (i < size) {
    while (i < size && p[i] != 0) ++i;  // a run of nonzero bytes (short in a sparse delta)
    if (i == size) break;
    const size_t zero = i;  // the gap after it: whole zero words first
    while (i + 8 <= size && LoadLE64(p + i) == 0) i += 8;
    while (i < size && p[i] == 0) ++i;
    if (i - zero < kXorRunMinZeros) continue;  // a short gap stays in the literals
    if (count + 1 >= capacity) return ZSTD_SEQUENCE_PRODUCER_ERROR;  // room for the last one
    out[count++] = ZSTD_Sequence{/*offset=*/1, static_cast<unsigned>(zero + 1 - literals_from),
                                 static_cast<unsigned>(i - zero - 1), /*rep=*/0};
    literals_from = i;
  }
  if (count >= capacity) return ZSTD_SEQUENCE_PRODUCER_ERROR;
  // The block's last literals (possibly none), in a sequence with no match.
  out[count++] = ZSTD_Sequence{0, static_cast<unsigned>(size - literals_from), 0, 0};
  return count;
}

namespace {

size_t Produce(void* /*state*/, ZSTD_Sequence* out, size_t capacity, const void* src, size_t size,
               const void* /*dict*/, size_t /*dict_size*/, int /*level*/, size_t /*window*/) {
  return ParseXorRuns(std::span<const uint8_t>(static_cast<const uint8_t*>(src), size), out,
                      capacity);
}

Status ZstdParam(ZSTD_CCtx* cctx, ZSTD_cParameter param, int value, const char* name) {
  const size_t r = ZSTD_CCtx_setParameter(cctx, param, value);
  if (ZSTD_isError(r)) {
    return Internal(std::string("zstd: setting ") + name + " failed: " + ZSTD_getErrorName(r));
  }
  return Status::Ok();
}

}  // namespace

Status UseXorRunSequences(ZSTD_CCtx* cctx) {
  ZSTD_registerSequenceProducer(cctx, nullptr, Produce);
  RETURN_IF_ERROR(
      ZstdParam(cctx, ZSTD_c_enableSeqProducerFallback, 1, "the sequence producer fallback"));
  return ZstdParam(cctx, ZSTD_c_enableLongDistanceMatching, ZSTD_ps_disable,
                   "long-distance matching");
}

}  // namespace deltakv::deltasync
