#include "deltasync/adler32.h"

#include <algorithm>
#include <array>
#include <cassert>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DELTAKV_ADLER_X86 1
#endif

namespace deltakv::deltasync {
namespace {

constexpr uint32_t kMod = kAdlerModulus;

// The largest n for which n bytes of 0xFF, starting from a = b = kMod - 1, keep b below 2^32:
// 255 n (n + 1) / 2 + (n + 1)(kMod - 1) <= 2^32 - 1.
constexpr size_t kScalarChunk = 5552;
static_assert(255ull * kScalarChunk * (kScalarChunk + 1) / 2 + (kScalarChunk + 1) * (kMod - 1) <=
              0xFFFFFFFFull);

// Every kernel takes a and b reduced to [0, kMod), consumes all n bytes and leaves them
// reduced again.
using Kernel = void (*)(uint32_t& a, uint32_t& b, const uint8_t* p, size_t n);

void UpdateScalar(uint32_t& a, uint32_t& b, const uint8_t* p, size_t n) {
  while (n > 0) {
    size_t chunk = std::min(n, kScalarChunk);
    n -= chunk;
    uint32_t sa = a;
    uint32_t sb = b;
    for (; chunk >= 8; chunk -= 8, p += 8) {
      sa += p[0];
      sb += sa;
      sa += p[1];
      sb += sa;
      sa += p[2];
      sb += sa;
      sa += p[3];
      sb += sa;
      sa += p[4];
      sb += sa;
      sa += p[5];
      sb += sa;
      sa += p[6];
      sb += sa;
      sa += p[7];
      sb += sa;
    }
    for (; chunk > 0; --chunk) {
      sa += *p++;
      sb += sa;
    }
    a = sa % kMod;
    b = sb % kMod;
  }
}

#ifdef DELTAKV_ADLER_X86

// The vector kernels split the input into blocks of W bytes c_0..c_{W-1} and use, for a block
// processed with running sums (a, b):
//   a += sum c_k        b += W * a_before + sum (W - k) c_k
// Per chunk of T blocks they accumulate, in vector lanes, the block byte sums (vs1), the sum
// over blocks of the byte sums of all earlier blocks (vs1_acc: b gets W * vs1_acc) and the
// weighted sums (vs2), then fold the lanes into 64-bit scalars and reduce once per chunk.
// Lane bounds per chunk of kVectorChunk bytes: vs1 and vs1_acc are 64-bit lanes (no concern);
// each vs2 lane gains at most 2 * 255 * (64 + 63) per 64 bytes, so < 2^31 over 32 KiB.
constexpr size_t kVectorChunk = 32 * 1024;

constexpr std::array<int8_t, 64> MakeWeights() {
  std::array<int8_t, 64> w{};
  for (size_t k = 0; k < w.size(); ++k) w[k] = static_cast<int8_t>(64 - k);
  return w;
}
// Weights 64, 63, ..., 1. The last 32 are 32..1, the last 16 are 16..1.
alignas(64) constexpr std::array<int8_t, 64> kWeights = MakeWeights();

__attribute__((target("ssse3"))) uint64_t SumU64x2(__m128i v) {
  alignas(16) uint64_t lanes[2];
  _mm_store_si128(reinterpret_cast<__m128i*>(lanes), v);
  return lanes[0] + lanes[1];
}

__attribute__((target("ssse3"))) uint64_t SumU32x4(__m128i v) {
  alignas(16) uint32_t lanes[4];
  _mm_store_si128(reinterpret_cast<__m128i*>(lanes), v);
  return uint64_t{lanes[0]} + lanes[1] + lanes[2] + lanes[3];
}

// Blocks of 32 bytes as two 16-byte vectors with weights 32..17 and 16..1.
__attribute__((target("ssse3"))) void UpdateSsse3(uint32_t& a, uint32_t& b, const uint8_t* p,
                                                  size_t n) {
  constexpr size_t kBlock = 32;
  const __m128i w_hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&kWeights[32]));
  const __m128i w_lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&kWeights[48]));
  const __m128i ones = _mm_set1_epi16(1);
  const __m128i zero = _mm_setzero_si128();
  while (n >= kBlock) {
    const size_t blocks = std::min(n, kVectorChunk) / kBlock;
    n -= blocks * kBlock;
    __m128i vs1 = zero;
    __m128i vs1_acc = zero;
    __m128i vs2 = zero;
    for (size_t i = 0; i < blocks; ++i, p += kBlock) {
      const __m128i c0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      const __m128i c1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16));
      vs1_acc = _mm_add_epi64(vs1_acc, vs1);
      vs1 = _mm_add_epi64(vs1, _mm_add_epi64(_mm_sad_epu8(c0, zero), _mm_sad_epu8(c1, zero)));
      vs2 = _mm_add_epi32(vs2, _mm_madd_epi16(_mm_maddubs_epi16(c0, w_hi), ones));
      vs2 = _mm_add_epi32(vs2, _mm_madd_epi16(_mm_maddubs_epi16(c1, w_lo), ones));
    }
    const uint64_t sa = a + SumU64x2(vs1);
    const uint64_t sb = b + uint64_t{a} * blocks * kBlock + kBlock * SumU64x2(vs1_acc) +
                        SumU32x4(vs2);
    a = static_cast<uint32_t>(sa % kMod);
    b = static_cast<uint32_t>(sb % kMod);
  }
  UpdateScalar(a, b, p, n);
}

__attribute__((target("avx2"))) uint64_t SumU64x4(__m256i v) {
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), v);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

__attribute__((target("avx2"))) uint64_t SumU32x8(__m256i v) {
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), v);
  uint64_t s = 0;
  for (uint32_t lane : lanes) s += lane;
  return s;
}

// Blocks of 64 bytes as two 32-byte vectors with weights 64..33 and 32..1.
__attribute__((target("avx2"))) void UpdateAvx2(uint32_t& a, uint32_t& b, const uint8_t* p,
                                                size_t n) {
  constexpr size_t kBlock = 64;
  const __m256i w_hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&kWeights[0]));
  const __m256i w_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&kWeights[32]));
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i zero = _mm256_setzero_si256();
  while (n >= kBlock) {
    const size_t blocks = std::min(n, kVectorChunk) / kBlock;
    n -= blocks * kBlock;
    __m256i vs1 = zero;
    __m256i vs1_acc = zero;
    __m256i vs2 = zero;
    for (size_t i = 0; i < blocks; ++i, p += kBlock) {
      const __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      const __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
      vs1_acc = _mm256_add_epi64(vs1_acc, vs1);
      vs1 = _mm256_add_epi64(vs1,
                             _mm256_add_epi64(_mm256_sad_epu8(c0, zero), _mm256_sad_epu8(c1, zero)));
      vs2 = _mm256_add_epi32(vs2, _mm256_madd_epi16(_mm256_maddubs_epi16(c0, w_hi), ones));
      vs2 = _mm256_add_epi32(vs2, _mm256_madd_epi16(_mm256_maddubs_epi16(c1, w_lo), ones));
    }
    const uint64_t sa = a + SumU64x4(vs1);
    const uint64_t sb = b + uint64_t{a} * blocks * kBlock + kBlock * SumU64x4(vs1_acc) +
                        SumU32x8(vs2);
    a = static_cast<uint32_t>(sa % kMod);
    b = static_cast<uint32_t>(sb % kMod);
  }
  UpdateScalar(a, b, p, n);
}

#endif  // DELTAKV_ADLER_X86

Kernel KernelFor(Adler32Impl impl) {
  switch (impl) {
#ifdef DELTAKV_ADLER_X86
    case Adler32Impl::kSsse3:
      return UpdateSsse3;
    case Adler32Impl::kAvx2:
      return UpdateAvx2;
#endif
    default:
      return UpdateScalar;
  }
}

Adler32Impl SelectImpl() {
  std::vector<Adler32Impl> impls = SupportedAdler32Impls();
  return impls.back();
}

// Returns Adler-32 continued from `adler` with exactly zlib's results, including for initial
// values whose halves are not reduced (>= kMod): zlib reduces those as a side effect of
// every path except the one-byte shortcut, which subtracts kMod at most once from each half.
uint32_t Adler32WithKernel(Kernel kernel, std::span<const uint8_t> data, uint32_t adler) {
  uint32_t a = adler & 0xFFFF;
  uint32_t b = adler >> 16;
  if (data.size() == 1) {
    a += data[0];
    if (a >= kMod) a -= kMod;
    b += a;
    if (b >= kMod) b -= kMod;
    return (b << 16) | a;
  }
  a %= kMod;
  b %= kMod;
  kernel(a, b, data.data(), data.size());
  return (b << 16) | a;
}

}  // namespace

uint32_t Adler32(std::span<const uint8_t> data, uint32_t adler) {
  static const Kernel kernel = KernelFor(SelectImpl());
  return Adler32WithKernel(kernel, data, adler);
}

std::vector<Adler32Impl> SupportedAdler32Impls() {
  std::vector<Adler32Impl> impls = {Adler32Impl::kScalar};
#ifdef DELTAKV_ADLER_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("ssse3")) impls.push_back(Adler32Impl::kSsse3);
  if (__builtin_cpu_supports("avx2")) impls.push_back(Adler32Impl::kAvx2);
#endif
  return impls;
}

std::string_view Adler32ImplName(Adler32Impl impl) {
  switch (impl) {
    case Adler32Impl::kScalar:
      return "scalar";
    case Adler32Impl::kSsse3:
      return "ssse3";
    case Adler32Impl::kAvx2:
      return "avx2";
  }
  return "unknown";
}

uint32_t Adler32With(Adler32Impl impl, std::span<const uint8_t> data, uint32_t adler) {
  return Adler32WithKernel(KernelFor(impl), data, adler);
}

uint32_t Adler32Combine(uint32_t adler1, uint32_t adler2, uint64_t len2) {
  // zlib takes a signed 64-bit length and answers 0xFFFFFFFF for a negative one.
  if (len2 > static_cast<uint64_t>(INT64_MAX)) return 0xFFFFFFFFu;
  // X||Y: A = A1 + A2 - 1, B = B1 + B2 + len2 * (A1 - 1)   (mod kMod).
  // Each half is brought into range by the same bounded subtractions zlib performs, so halves
  // that were not reduced on input give zlib's (possibly unreduced) output as well.
  const uint32_t rem = static_cast<uint32_t>(len2 % kMod);
  const uint32_t a1 = adler1 & 0xFFFF;
  const uint32_t b1 = adler1 >> 16;
  const uint32_t a2 = adler2 & 0xFFFF;
  const uint32_t b2 = adler2 >> 16;
  uint32_t a = a1 + a2 + kMod - 1;  // < 3 * 2^16 + kMod
  uint32_t b = (rem * a1) % kMod + b1 + b2 + kMod - rem;
  if (a >= kMod) a -= kMod;
  if (a >= kMod) a -= kMod;
  if (b >= 2 * kMod) b -= 2 * kMod;
  if (b >= kMod) b -= kMod;
  return (b << 16) | a;
}

// AdlerDelta ---------------------------------------------------------------------------------

namespace {
// Each term added to s2_ is below 2^24 in magnitude (s1_ terms below 2^8), and the sums start
// below kMod after a reduction, so 2^32 terms keep both below 2^57.
constexpr uint64_t kReduceAfterTerms = uint64_t{1} << 32;

uint32_t ReduceSigned(int64_t v) {
  int64_t r = v % static_cast<int64_t>(kMod);
  if (r < 0) r += kMod;
  return static_cast<uint32_t>(r);
}
}  // namespace

void AdlerDelta::Reduce() {
  s1_ %= static_cast<int64_t>(kMod);
  s2_ %= static_cast<int64_t>(kMod);
  pending_ = 0;
}

void AdlerDelta::AddByte(uint64_t position, uint8_t old_byte, uint8_t new_byte) {
  const int64_t d = int64_t{new_byte} - int64_t{old_byte};
  s1_ += d;
  s2_ += static_cast<int64_t>(position % kMod) * d;
  if (++pending_ >= kReduceAfterTerms) Reduce();
}

void AdlerDelta::AddXorRun(uint64_t position, std::span<const uint8_t> old_bytes,
                           std::span<const uint8_t> xor_bytes) {
  assert(old_bytes.size() == xor_bytes.size());
  const size_t n = std::min(old_bytes.size(), xor_bytes.size());
  const uint8_t* old_p = old_bytes.data();
  const uint8_t* xor_p = xor_bytes.data();
  uint64_t pos = position % kMod;
  size_t done = 0;
  while (done < n) {
    // A segment does not wrap its positions past kMod, so its bytes sit at pos + i and its
    // contribution to s2 is pos * S1 + sum i * d_i. Sub-blocks of 256 keep the inner sums in
    // 32 bits (|sum i * d_i| < 255 * 256^2 / 2), which lets the compiler vectorize them.
    const size_t seg = static_cast<size_t>(std::min<uint64_t>(n - done, kMod - pos));
    int64_t seg_s1 = 0;
    int64_t seg_w = 0;
    for (size_t base = 0; base < seg; base += 256) {
      const size_t len = std::min<size_t>(256, seg - base);
      const uint8_t* o = old_p + done + base;
      const uint8_t* x = xor_p + done + base;
      int32_t s1 = 0;
      int32_t w = 0;
      for (size_t i = 0; i < len; ++i) {
        const int32_t d = int32_t{static_cast<uint8_t>(o[i] ^ x[i])} - int32_t{o[i]};
        s1 += d;
        w += static_cast<int32_t>(i) * d;
      }
      seg_s1 += s1;
      seg_w += static_cast<int64_t>(base) * s1 + w;
    }
    s1_ += seg_s1;
    s2_ += static_cast<int64_t>(pos) * seg_s1 + seg_w;
    pending_ += seg;
    if (pending_ >= kReduceAfterTerms) Reduce();
    done += seg;
    pos = 0;  // the next segment starts where positions wrap to 0 (mod kMod)
  }
}

void AdlerDelta::Merge(const AdlerDelta& other) {
  Reduce();
  s1_ += other.s1_ % static_cast<int64_t>(kMod);
  s2_ += other.s2_ % static_cast<int64_t>(kMod);
  pending_ = 1;  // both sums are now below 2 * kMod < 2^24: as much as one term
}

uint32_t AdlerDelta::s1() const { return ReduceSigned(s1_); }
uint32_t AdlerDelta::s2() const { return ReduceSigned(s2_); }

uint32_t AdlerDelta::Apply(uint32_t adler_before, uint64_t length) const {
  const uint64_t a = (adler_before & 0xFFFF) % kMod;
  const uint64_t b = (adler_before >> 16) % kMod;
  const uint64_t d1 = s1();
  const uint64_t d2 = s2();
  const uint64_t n = length % kMod;
  const uint64_t a_new = (a + d1) % kMod;
  const uint64_t b_new = (b + n * d1 + (kMod - d2)) % kMod;
  return static_cast<uint32_t>((b_new << 16) | a_new);
}

}  // namespace deltakv::deltasync
