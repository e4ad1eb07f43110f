// The libzstd XOR decoder against a dense reference: every nonzero byte delivered once, in
// order, for sparse and dense inputs, single and concatenated frames; errors for bad input.
#include <gtest/gtest.h>
#include <zstd.h>

#include <random>
#include <string>
#include <vector>

#include "deltasync/xor_decoder.h"

namespace deltakv::deltasync {
namespace {

class DenseSink : public NonzeroSink {
 public:
  explicit DenseSink(size_t n) : out(n, 0) {}
  Status OnRun(uint64_t pos, std::span<const uint8_t> bytes) override {
    if (pos < next) return Internal("runs out of order");
    if (pos + bytes.size() > out.size()) return Internal("run past the end");
    for (size_t i = 0; i < bytes.size(); ++i) out[pos + i] = bytes[i];
    next = pos + bytes.size();
    ++runs;
    return Status::Ok();
  }
  std::vector<uint8_t> out;
  uint64_t next = 0;
  uint64_t runs = 0;
};

std::vector<uint8_t> Sparse(size_t n, double density, uint32_t seed) {
  std::mt19937 rng(seed);
  std::bernoulli_distribution pick(density);
  std::vector<uint8_t> v(n, 0);
  for (auto& b : v) {
    if (pick(rng)) b = static_cast<uint8_t>(1 + rng() % 255);
  }
  return v;
}

std::vector<uint8_t> Compress(const std::vector<uint8_t>& v, int level) {
  std::vector<uint8_t> out(ZSTD_compressBound(v.size()));
  size_t n = ZSTD_compress(out.data(), out.size(), v.data(), v.size(), level);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

TEST(LibzstdXorDecoder, MatchesDenseDecompressionAcrossDensities) {
  auto dec = MakeLibzstdXorDecoder();
  for (double density : {0.0, 0.0001, 0.01, 0.1, 1.0}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{4095}, size_t{1} << 20, (size_t{3} << 20) + 7}) {
      auto v = Sparse(n, density, static_cast<uint32_t>(n + density * 1000));
      auto frame = Compress(v, 3);
      DenseSink sink(n);
      auto r = dec->Decode(frame, DecodeLimits{}, sink);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(r->decoded_length, n);
      EXPECT_EQ(r->frames, 1u);
      uint64_t nz = 0;
      for (uint8_t b : v) nz += b != 0;
      EXPECT_EQ(r->nonzero_bytes, nz);
      EXPECT_EQ(sink.out, v) << "density " << density << " n " << n;
    }
  }
}

TEST(LibzstdXorDecoder, ConcatenatedFrames) {
  auto a = Sparse(100000, 0.01, 1), b = Sparse(50000, 0.5, 2);
  auto fa = Compress(a, 1), fb = Compress(b, 19);
  fa.insert(fa.end(), fb.begin(), fb.end());
  DenseSink sink(a.size() + b.size());
  auto r = MakeLibzstdXorDecoder()->Decode(fa, DecodeLimits{}, sink);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->frames, 2u);
  a.insert(a.end(), b.begin(), b.end());
  EXPECT_EQ(sink.out, a);
}

TEST(LibzstdXorDecoder, TruncatedFrameIsDataLoss) {
  auto frame = Compress(Sparse(200000, 0.05, 3), 3);
  frame.resize(frame.size() - 3);
  DenseSink sink(200000);
  auto r = MakeLibzstdXorDecoder()->Decode(frame, DecodeLimits{}, sink);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
}

TEST(LibzstdXorDecoder, GarbageIsDataLoss) {
  std::vector<uint8_t> junk = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  DenseSink sink(100);
  auto r = MakeLibzstdXorDecoder()->Decode(junk, DecodeLimits{}, sink);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
}

TEST(LibzstdXorDecoder, OutputLimitIsReportedBeforeTheSinkSeesTooMuch) {
  auto frame = Compress(Sparse(1 << 20, 0.5, 4), 1);
  DenseSink sink(1 << 20);
  DecodeLimits limits;
  limits.max_output = 1000;
  auto r = MakeLibzstdXorDecoder()->Decode(frame, limits, sink);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(IsOutputLimitError(r.status())) << r.status().ToString();
  EXPECT_LE(sink.next, 1000u);
}

TEST(LibzstdXorDecoder, SinkErrorsPropagateUnchanged) {
  struct FailingSink : NonzeroSink {
    Status OnRun(uint64_t, std::span<const uint8_t>) override { return NotFound("stop here"); }
  } sink;
  auto frame = Compress(Sparse(1000, 0.5, 5), 1);
  auto r = MakeLibzstdXorDecoder()->Decode(frame, DecodeLimits{}, sink);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "stop here");
}

TEST(LibzstdXorDecoder, WindowCap) {
  std::vector<uint8_t> v = Sparse(4 << 20, 0.001, 6);
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog, 22);
  ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 0);
  std::vector<uint8_t> out(ZSTD_compressBound(v.size()));
  size_t n = ZSTD_compress2(c, out.data(), out.size(), v.data(), v.size());
  ZSTD_freeCCtx(c);
  out.resize(n);
  DenseSink sink(v.size());
  DecodeLimits limits;
  limits.max_window_log = 20;
  auto r = MakeLibzstdXorDecoder()->Decode(out, limits, sink);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
}

// The window limit holds for every frame, whatever path libzstd takes: a small frame with a
// content size (decoded in one pass, where libzstd itself does not check the window), limits
// below 2^10 and above 2^31 (outside the range libzstd's parameter takes).
TEST(LibzstdXorDecoder, WindowLimitHoldsOnEveryPath) {
  std::vector<uint8_t> v = Sparse(200000, 0.01, 8);
  auto frame = Compress(v, 3);  // content size set; a window of about the input's size
  for (uint32_t log : {9u, 16u}) {
    DenseSink sink(v.size());
    DecodeLimits limits;
    limits.max_window_log = log;
    auto r = MakeLibzstdXorDecoder()->Decode(frame, limits, sink);
    ASSERT_FALSE(r.ok()) << log;
    EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
    EXPECT_NE(r.status().message().find("above the limit 2^" + std::to_string(log)),
              std::string::npos)
        << r.status().ToString();
    EXPECT_EQ(sink.runs, 0u);
  }
  for (uint32_t log : {27u, 40u, 64u}) {
    DenseSink sink(v.size());
    DecodeLimits limits;
    limits.max_window_log = log;
    auto r = MakeLibzstdXorDecoder()->Decode(frame, limits, sink);
    ASSERT_TRUE(r.ok()) << log << ": " << r.status().ToString();
    EXPECT_TRUE(sink.out == v);
  }
}

// Skippable frames are skipped and not counted, as by the walker.
TEST(LibzstdXorDecoder, SkippableFramesAreNotCounted) {
  std::vector<uint8_t> v = Sparse(5000, 0.05, 9);
  auto frame = Compress(v, 1);
  const uint8_t skippable[] = {0x5A, 0x2A, 0x4D, 0x18, 3, 0, 0, 0, 1, 2, 3};
  std::vector<uint8_t> input(skippable, skippable + sizeof(skippable));
  input.insert(input.end(), frame.begin(), frame.end());
  input.insert(input.end(), skippable, skippable + sizeof(skippable));
  DenseSink sink(v.size());
  auto r = MakeLibzstdXorDecoder()->Decode(input, DecodeLimits{}, sink);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->frames, 1u);
  EXPECT_EQ(r->decoded_length, v.size());
  EXPECT_TRUE(sink.out == v);
  DenseSink none(0);
  auto only = MakeLibzstdXorDecoder()->Decode(
      std::span<const uint8_t>(skippable, sizeof(skippable)), DecodeLimits{}, none);
  ASSERT_TRUE(only.ok()) << only.status().ToString();
  EXPECT_EQ(only->frames, 0u);
}

// An empty input holds no frame: both decoders agree.
TEST(DecoderRegistry, EmptyInputHoldsNoFrame) {
  for (const char* name : {"libzstd", "walker"}) {
    auto decoder = MakeXorDecoder(name);
    ASSERT_TRUE(decoder.ok()) << name;
    DenseSink sink(0);
    auto r = (*decoder)->Decode(std::span<const uint8_t>(), DecodeLimits{}, sink);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().ToString();
    EXPECT_EQ(r->frames, 0u) << name;
    EXPECT_EQ(r->decoded_length, 0u) << name;
  }
}

TEST(DecoderRegistry, KnownAndUnknownNames) {
  EXPECT_TRUE(MakeXorDecoder("").ok());
  EXPECT_TRUE(MakeXorDecoder("libzstd").ok());
  auto r = MakeXorDecoder("magic");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace deltakv::deltasync
