// XorDecoder over libzstd's streaming API: decompress into a bounded buffer, scan for nonzero
// runs. Memory O(window + buffer); time O(decoded bytes). The reference the sparse walker is
// measured against, and a fallback.
#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_d_forceIgnoreChecksum
#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "deltasync/xor_decoder.h"
#include "nonzero_scan.h"

namespace deltakv::deltasync {
namespace {

struct DctxDeleter {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

class LibzstdXorDecoder final : public XorDecoder {
 public:
  std::string_view name() const override { return "libzstd"; }

  StatusOr<DecodeResult> Decode(std::span<const uint8_t> input, const DecodeLimits& limits,
                                NonzeroSink& sink) override {
    if (!dctx_) {
      dctx_.reset(ZSTD_createDCtx());
      if (!dctx_) return Internal("ZSTD_createDCtx failed");
    }
    ZSTD_DCtx_reset(dctx_.get(), ZSTD_reset_session_and_parameters);
    // The limit is checked on each frame's header below (libzstd's own check is skipped on its
    // one-pass path, and the parameter only takes 10..31); the parameter only lets libzstd
    // decode what that check admits.
    const uint32_t max_log = std::min<uint32_t>(limits.max_window_log, 63);
    const size_t set = ZSTD_DCtx_setParameter(
        dctx_.get(), ZSTD_d_windowLogMax,
        static_cast<int>(std::clamp<uint32_t>(max_log, ZSTD_WINDOWLOG_MIN, ZSTD_WINDOWLOG_MAX)));
    if (ZSTD_isError(set)) return Internal(std::string("zstd: ") + ZSTD_getErrorName(set));
    if (!limits.verify_checksum) {
      ZSTD_DCtx_setParameter(dctx_.get(), ZSTD_d_forceIgnoreChecksum, ZSTD_d_ignoreChecksum);
    }
    buffer_.resize(ZSTD_DStreamOutSize() * 8);
    DecodeResult result;
    // An empty input holds no frame (libzstd would wait for one and report it truncated).
    if (input.empty()) return result;
    ZSTD_inBuffer in{input.data(), input.size(), 0};
    size_t last_ret = 0;
    bool frame_start = true;  // in.pos is where a frame begins
    bool skippable = false;   // the frame being decoded is a skippable frame (not counted)
    // One loop both consumes the input and drains output still buffered in the context.
    for (;;) {
      if (frame_start && in.pos < in.size) {
        frame_start = false;
        ZSTD_frameHeader header;
        // A header that does not parse or is cut short is reported by ZSTD_decompressStream.
        if (ZSTD_getFrameHeader(&header, input.data() + in.pos, in.size - in.pos) == 0) {
          skippable = header.frameType == ZSTD_skippableFrame;
          if (!skippable && header.windowSize > (uint64_t{1} << max_log)) {
            return ResourceExhausted("zstd frame at input offset " + std::to_string(in.pos) +
                                     ": window of " + std::to_string(header.windowSize) +
                                     " bytes above the limit 2^" + std::to_string(max_log));
          }
        }
      }
      ZSTD_outBuffer out{buffer_.data(), buffer_.size(), 0};
      const size_t before = in.pos;
      const size_t ret = ZSTD_decompressStream(dctx_.get(), &out, &in);
      if (ZSTD_isError(ret)) {
        ZSTD_ErrorCode code = ZSTD_getErrorCode(ret);
        std::string msg = "zstd frame data at input offset " + std::to_string(before) + ": " +
                          ZSTD_getErrorName(ret);
        if (code == ZSTD_error_frameParameter_windowTooLarge) return ResourceExhausted(msg);
        if (code == ZSTD_error_dictionary_wrong) {
          return Unimplemented(msg + " (frames that need a dictionary are not supported)");
        }
        return DataLoss(msg);
      }
      if (out.pos > limits.max_output - result.decoded_length) {
        return ResourceExhausted(std::string(kOutputLimitMessage) + ": more than " +
                                 std::to_string(limits.max_output) + " bytes decoded");
      }
      RETURN_IF_ERROR(ScanNonzeroRuns(std::span<const uint8_t>(buffer_.data(), out.pos),
                                      result.decoded_length, sink, &result.nonzero_bytes));
      result.decoded_length += out.pos;
      if (ret == 0) {
        if (!skippable) ++result.frames;
        frame_start = true;
        skippable = false;
      }
      last_ret = ret;
      if (in.pos == in.size && (ret == 0 || out.pos == 0)) break;  // input used, output drained
      if (in.pos == before && out.pos == 0) break;                 // no progress possible
    }
    if (last_ret != 0) {
      return DataLoss("zstd frame truncated: input ended " + std::to_string(input.size()) +
                      " bytes in, inside a frame");
    }
    return result;
  }

 private:
  std::unique_ptr<ZSTD_DCtx, DctxDeleter> dctx_;
  std::vector<uint8_t> buffer_;
};

}  // namespace

std::unique_ptr<XorDecoder> MakeLibzstdXorDecoder() {
  return std::make_unique<LibzstdXorDecoder>();
}

}  // namespace deltakv::deltasync
