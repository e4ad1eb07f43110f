// Helpers shared by the sparse zstd walker tests: sparse data generators, libzstd frame
// builders and oracles (one-shot and streaming), and a sink that records nonzero bytes.
#pragma once

#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_c_targetCBlockSize
#include <zstd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "deltasync/xor_decoder.h"
#include "deltasync/xor_digest.h"
#include "deltasync/zstd_walker.h"

namespace deltakv::deltasync::walker_test {

using Nonzeros = std::vector<std::pair<uint64_t, uint8_t>>;

// Records every nonzero byte of every run and checks the run contract (increasing,
// non-overlapping positions).
class CollectingSink : public NonzeroSink {
 public:
  // With takes_bytes, a decoder that can delivers the nonzero bytes one by one (OnBytes).
  explicit CollectingSink(bool takes_bytes = false) : takes_bytes_(takes_bytes) {}
  bool TakesBytes() const override { return takes_bytes_; }
  Status OnBytes(const uint64_t* entries, size_t count, uint64_t base) override {
    if (!takes_bytes_) return Internal("OnBytes to a sink that does not take bytes");
    if (count == 0) return Internal("empty OnBytes");
    for (size_t i = 0; i < count; ++i) {
      const uint64_t position = base + (entries[i] >> 8);
      const uint8_t value = static_cast<uint8_t>(entries[i]);
      if (value == 0) return Internal("OnBytes delivered a zero byte");
      if (runs_ > 0 && position < next_) return Internal("bytes out of order or repeated");
      nonzeros_.emplace_back(position, value);
      next_ = position + 1;
      ++runs_;
    }
    return Status::Ok();
  }
  Status OnRun(uint64_t position, std::span<const uint8_t> bytes) override {
    if (bytes.empty()) return Internal("empty run");
    if (runs_ > 0 && position < next_) return Internal("runs out of order or overlapping");
    for (size_t i = 0; i < bytes.size(); ++i) {
      if (bytes[i] != 0) nonzeros_.emplace_back(position + i, bytes[i]);
    }
    next_ = position + bytes.size();
    ++runs_;
    return Status::Ok();
  }
  const Nonzeros& nonzeros() const { return nonzeros_; }
  uint64_t runs() const { return runs_; }

 private:
  bool takes_bytes_;
  Nonzeros nonzeros_;
  uint64_t next_ = 0;
  uint64_t runs_ = 0;  // runs, or bytes through OnBytes
};

inline Nonzeros ScanNonzeros(std::span<const uint8_t> data, uint64_t base = 0) {
  Nonzeros out;
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] != 0) out.emplace_back(base + i, data[i]);
  }
  return out;
}

// Each byte nonzero (1..255) with probability `density`.
inline std::vector<uint8_t> ScatteredSparse(size_t size, double density, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> data(size, 0);
  if (density <= 0) return data;
  std::geometric_distribution<size_t> gap(density);
  std::uniform_int_distribution<int> value(1, 255);
  for (size_t i = gap(rng); i < size; i += 1 + gap(rng)) data[i] = static_cast<uint8_t>(value(rng));
  return data;
}

// Nonzeros confined to a few 4 KiB pages; inside them about half of the bytes change.
inline std::vector<uint8_t> ClusteredSparse(size_t size, double page_fraction, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> data(size, 0);
  std::bernoulli_distribution pick(page_fraction), half(0.5);
  std::uniform_int_distribution<int> value(1, 255);
  for (size_t page = 0; page < size; page += 4096) {
    if (!pick(rng)) continue;
    for (size_t i = page; i < std::min(size, page + 4096); ++i) {
      if (half(rng)) data[i] = static_cast<uint8_t>(value(rng));
    }
  }
  return data;
}

// XOR of bf16 tensors where a fraction of elements changed slightly: nonzeros are mostly the
// low byte (mantissa) of 2-byte elements, with small values.
inline std::vector<uint8_t> Bf16XorLike(size_t size, double changed, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> data(size, 0);
  std::bernoulli_distribution pick(changed), high(0.01);
  std::uniform_int_distribution<int> low(1, 7);
  for (size_t i = 0; i + 1 < size; i += 2) {
    if (!pick(rng)) continue;
    data[i] = static_cast<uint8_t>(low(rng));
    if (high(rng)) data[i + 1] = 0x01;
  }
  return data;
}

inline std::vector<uint8_t> DenseRandom(size_t size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> data(size);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  return data;
}

struct CompressOptions {
  int level = 3;
  bool checksum = false;
  bool content_size = true;
  bool long_distance = false;
  int window_log = 0;             // 0: level default
  size_t target_cblock_size = 0;  // 0: off
  int strategy = 0;               // 0: level default
};

// Compresses with the streaming API so that content_size=false frames can be made.
inline std::vector<uint8_t> Compress(std::span<const uint8_t> data, const CompressOptions& o) {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, o.level);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, o.checksum ? 1 : 0);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, o.content_size ? 1 : 0);
  if (o.long_distance) ZSTD_CCtx_setParameter(cctx, ZSTD_c_enableLongDistanceMatching, 1);
  if (o.window_log) ZSTD_CCtx_setParameter(cctx, ZSTD_c_windowLog, o.window_log);
  if (o.target_cblock_size) {
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_targetCBlockSize, static_cast<int>(o.target_cblock_size));
  }
  if (o.strategy) ZSTD_CCtx_setParameter(cctx, ZSTD_c_strategy, o.strategy);
  std::vector<uint8_t> out(ZSTD_compressBound(data.size()) + 1024);
  size_t n;
  if (o.content_size) {
    n = ZSTD_compress2(cctx, out.data(), out.size(), data.data(), data.size());
  } else {
    // Streaming without a pledged size: no Frame_Content_Size. (A first call with ZSTD_e_end
    // would let libzstd learn the size, so feed with ZSTD_e_continue first.)
    ZSTD_inBuffer in{data.data(), data.size(), 0};
    ZSTD_outBuffer ob{out.data(), out.size(), 0};
    size_t r = 0;
    while (in.pos < in.size && !ZSTD_isError(r)) {
      r = ZSTD_compressStream2(cctx, &ob, &in, ZSTD_e_continue);
    }
    ZSTD_inBuffer none{nullptr, 0, 0};
    do {
      if (ZSTD_isError(r)) break;
      r = ZSTD_compressStream2(cctx, &ob, &none, ZSTD_e_end);
    } while (r != 0 && !ZSTD_isError(r));
    n = ZSTD_isError(r) ? r : ob.pos;
  }
  ZSTD_freeCCtx(cctx);
  if (ZSTD_isError(n)) return {};
  out.resize(n);
  return out;
}

struct OracleResult {
  bool ok = false;
  std::string error;
  std::vector<uint8_t> data;
};

// libzstd one-shot over all frames into a buffer of `capacity` bytes.
inline OracleResult LibzstdOneShot(std::span<const uint8_t> frame, size_t capacity) {
  OracleResult r;
  r.data.resize(capacity);
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  size_t n = ZSTD_decompressDCtx(dctx, r.data.data(), capacity, frame.data(), frame.size());
  ZSTD_freeDCtx(dctx);
  if (ZSTD_isError(n)) {
    r.error = ZSTD_getErrorName(n);
    r.data.clear();
    return r;
  }
  r.ok = true;
  r.data.resize(n);
  return r;
}

// libzstd streaming with a small output buffer; fails if the output exceeds `max_output`.
inline OracleResult LibzstdStreaming(std::span<const uint8_t> frame, size_t max_output) {
  OracleResult r;
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  ZSTD_inBuffer in{frame.data(), frame.size(), 0};
  uint8_t buf[4096];
  size_t last = 0;
  bool failed = false;
  while (true) {
    ZSTD_outBuffer out{buf, sizeof(buf), 0};
    last = ZSTD_decompressStream(dctx, &out, &in);
    if (ZSTD_isError(last)) {
      r.error = ZSTD_getErrorName(last);
      failed = true;
      break;
    }
    r.data.insert(r.data.end(), buf, buf + out.pos);
    if (r.data.size() > max_output) {
      r.error = "output limit";
      failed = true;
      break;
    }
    if (in.pos == in.size && out.pos < out.size) break;
  }
  ZSTD_freeDCtx(dctx);
  if (!failed && last != 0) {
    r.error = "truncated";
    failed = true;
  }
  if (failed) {
    r.data.clear();
    return r;
  }
  r.ok = true;
  return r;
}

struct WalkOutcome {
  Status status;
  WalkStats stats;
  Nonzeros nonzeros;
  std::optional<XorDigest> digest;  // with options.limits.compute_digest
};

// Walks `frame` into a sink taking runs, and again into one taking bytes (NonzeroSink::OnBytes):
// both must see the same nonzero bytes, the same outcome and the same digest; otherwise the
// status is Internal.
inline WalkOutcome Walk(std::span<const uint8_t> frame, const WalkerOptions& options = {}) {
  auto once = [&](bool takes_bytes) {
    CollectingSink sink(takes_bytes);
    SparseZstdWalker walker(sink, options);
    WalkOutcome out;
    out.status = walker.Feed(frame);
    if (out.status.ok()) out.status = walker.Finish();
    out.stats = walker.stats();
    out.nonzeros = sink.nonzeros();
    out.digest = walker.result().digest;
    return out;
  };
  WalkOutcome out = once(false);
  const WalkOutcome bytes = once(true);
  if (bytes.status.code() != out.status.code() || bytes.status.message() != out.status.message() ||
      bytes.digest != out.digest || bytes.stats.nonzero_bytes != out.stats.nonzero_bytes ||
      bytes.stats.decoded_length != out.stats.decoded_length ||
      (out.status.ok() && bytes.nonzeros != out.nonzeros)) {
    out.status = Internal("byte delivery differs from run delivery: " + bytes.status.ToString() +
                          " vs " + out.status.ToString());
  }
  return out;
}

inline std::vector<uint8_t> Concat(std::initializer_list<std::span<const uint8_t>> parts) {
  std::vector<uint8_t> out;
  for (auto p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Differential verdict for arbitrary input: returns "" when the walker agrees with libzstd,
// otherwise a description of the disagreement. libzstd's verdict counts only when its one-shot
// and streaming APIs agree; the walker may refuse what libzstd tolerates only with an error
// that says so, and may accept what libzstd 1.5.4 rejects only with a compat flag.
inline std::string CompareWithLibzstd(std::span<const uint8_t> input, size_t max_output) {
  WalkerOptions options;
  options.limits.max_output = max_output;
  options.limits.compute_digest = true;
  const WalkOutcome walked = Walk(input, options);
  const OracleResult one_shot = LibzstdOneShot(input, max_output);
  const OracleResult streaming = LibzstdStreaming(input, max_output);
  if (one_shot.ok != streaming.ok) return "";
  if (one_shot.ok && one_shot.data != streaming.data) return "";
  if (one_shot.ok) {
    if (!walked.status.ok()) {
      const std::string& m = walked.status.message();
      if (m.find("(libzstd tolerates)") != std::string::npos) return "";
      if (walked.status.code() == StatusCode::kUnimplemented) return "";
      // The window limit is the caller's memory cap (DecodeLimits::max_window_log); libzstd's
      // one-shot API applies none, and its streaming API skips it for a whole frame whose
      // content size fits the output.
      if (walked.status.code() == StatusCode::kResourceExhausted &&
          m.find("window of") != std::string::npos) {
        return "";
      }
      return "libzstd accepts (" + std::to_string(one_shot.data.size()) +
             " bytes) but the walker fails: " + walked.status.ToString();
    }
    if (walked.stats.decoded_length != one_shot.data.size()) {
      return "decoded length " + std::to_string(walked.stats.decoded_length) + " vs libzstd " +
             std::to_string(one_shot.data.size());
    }
    if (walked.nonzeros != ScanNonzeros(one_shot.data)) return "nonzero bytes differ";
    if (walked.digest != ComputeXorDigest(one_shot.data)) return "xor_digest differs";
    return "";
  }
  if (walked.status.ok() && walked.stats.compat_flags == 0) {
    return "libzstd fails (" + one_shot.error + ") but the walker accepts " +
           std::to_string(walked.stats.decoded_length) + " bytes";
  }
  return "";
}

}  // namespace deltakv::deltasync::walker_test
