#include "deltasync/adler32.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cstring>

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
// Lane bounds per chunk of kVectorChunk bytes: the byte sums are 64-bit lanes (no concern); a
// 32-bit weighted-sum lane gains less than 2 * 255 * (64 + 63) + 2 * 255 * (32 + 31) < 2^17 per
// 64 bytes, so less than 2^26 over 32 KiB.
// (An AVX-512 variant measured only ~20% faster in L2 and no faster from L3 or DRAM, and
// 512-bit multiplies can lower the clock of the whole core on some Xeons, so there is none.)
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
    const uint64_t sb =
        b + uint64_t{a} * blocks * kBlock + kBlock * SumU64x2(vs1_acc) + SumU32x4(vs2);
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

// Steps of 128 bytes, four 32-byte vectors c0..c3. With W64(x) the sum of 64-byte half x
// weighted 64..1 and S(x) its byte sum, a 128-byte step adds 128 * a + 64 * S(first half) +
// W64(first half) + W64(second half) to b. Independent accumulators keep the dependency chains
// one add long per step.
__attribute__((target("avx2"))) void UpdateAvx2(uint32_t& a, uint32_t& b, const uint8_t* p,
                                                size_t n) {
  constexpr size_t kStep = 128;
  const __m256i w_hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&kWeights[0]));
  const __m256i w_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&kWeights[32]));
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i zero = _mm256_setzero_si256();
  while (n >= kStep) {
    const size_t steps = std::min(n, kVectorChunk) / kStep;
    n -= steps * kStep;
    __m256i vs1 = zero;      // byte sums (64-bit lanes)
    __m256i vs1_acc = zero;  // sum over steps of vs1 before the step
    __m256i vs_half = zero;  // byte sums of first halves
    __m256i vs2a = zero;     // weighted sums (32-bit lanes), first halves
    __m256i vs2b = zero;     // weighted sums, second halves
    for (size_t i = 0; i < steps; ++i, p += kStep) {
      const __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      const __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
      const __m256i c2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64));
      const __m256i c3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 96));
      vs1_acc = _mm256_add_epi64(vs1_acc, vs1);
      const __m256i first = _mm256_add_epi64(_mm256_sad_epu8(c0, zero), _mm256_sad_epu8(c1, zero));
      const __m256i second = _mm256_add_epi64(_mm256_sad_epu8(c2, zero), _mm256_sad_epu8(c3, zero));
      vs_half = _mm256_add_epi64(vs_half, first);
      vs1 = _mm256_add_epi64(vs1, _mm256_add_epi64(first, second));
      vs2a = _mm256_add_epi32(
          vs2a, _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(c0, w_hi), ones),
                                 _mm256_madd_epi16(_mm256_maddubs_epi16(c1, w_lo), ones)));
      vs2b = _mm256_add_epi32(
          vs2b, _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(c2, w_hi), ones),
                                 _mm256_madd_epi16(_mm256_maddubs_epi16(c3, w_lo), ones)));
    }
    const uint64_t sa = a + SumU64x4(vs1);
    const uint64_t sb = b + uint64_t{a} * steps * kStep + kStep * SumU64x4(vs1_acc) +
                        64 * SumU64x4(vs_half) + SumU32x8(_mm256_add_epi32(vs2a, vs2b));
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

// The fastest kernel this CPU runs, chosen once.
Kernel DispatchedKernel() {
  static const Kernel kernel = KernelFor(SupportedAdler32Impls().back());
  return kernel;
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
  return Adler32WithKernel(DispatchedKernel(), data, adler);
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

// pending_ is a budget in units of 2^24: |s1_| and |s2_| stay below (pending_ + 1) * 2^24.
// A changed byte adds |(i mod M) * d| < 2^24 to s2_ (and |d| <= 255 to s1_), one unit;
// reducing once pending_ reaches 2^32 keeps both sums below 2^57.
constexpr uint64_t kReduceAfterTerms = uint64_t{1} << 32;

// Runs at least this long go through the Adler kernels; shorter ones through a plain loop.
constexpr size_t kMinKernelRun = 256;
// Bytes of new data materialized on the stack at a time for the kernels.
constexpr size_t kXorChunk = 8192;

// out[i] = a[i] ^ b[i], eight bytes at a time (a byte loop is not vectorized at -O2).
void XorBytes(uint8_t* out, const uint8_t* a, const uint8_t* b, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t wa, wb;
    std::memcpy(&wa, a + i, 8);
    std::memcpy(&wb, b + i, 8);
    wa ^= wb;
    std::memcpy(out + i, &wa, 8);
  }
  for (; i < n; ++i) out[i] = static_cast<uint8_t>(a[i] ^ b[i]);
}

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
  if (n < kMinKernelRun) {
    // Short run: one term per byte, zero XOR bytes contributing d = 0.
    uint64_t pos = position % kMod;
    for (size_t i = 0; i < n; ++i) {
      const int64_t d = int64_t{static_cast<uint8_t>(old_p[i] ^ xor_p[i])} - int64_t{old_p[i]};
      s1_ += d;
      s2_ += static_cast<int64_t>(pos) * d;
      if (++pos == kMod) pos = 0;
    }
    pending_ += n;
    if (pending_ >= kReduceAfterTerms) Reduce();
    return;
  }
  // Long run, in chunks of L bytes at positions P..P+L-1. Adler sums started from zero give, for
  // the new bytes N and the old bytes O:  a = sum X_i,  b = sum (L - i) X_i  (mod M). With
  // d_i = N_i - O_i:  sum d_i = a_N - a_O  and
  //   sum (P + i) d_i = (P + L) sum d_i - sum (L - i) d_i = (P + L)(a_N - a_O) - (b_N - b_O),
  // all mod M, which is all s1 and s2 are needed for. Each chunk adds less than 2^33 to s2_.
  const Kernel kernel = DispatchedKernel();
  alignas(64) uint8_t fresh[kXorChunk];
  for (size_t done = 0; done < n;) {
    const size_t len = std::min(kXorChunk, n - done);
    const uint8_t* o = old_p + done;
    const uint8_t* x = xor_p + done;
    XorBytes(fresh, o, x, len);
    uint32_t a_new = 0, b_new = 0, a_old = 0, b_old = 0;
    kernel(a_new, b_new, fresh, len);
    kernel(a_old, b_old, o, len);
    done += len;
    const int64_t da = int64_t{a_new} - int64_t{a_old};  // |da| < M
    const int64_t db = int64_t{b_new} - int64_t{b_old};
    const int64_t end = static_cast<int64_t>((position % kMod + done) % kMod);
    s1_ += da;
    s2_ += end * da - db;
    pending_ += 512;  // < 2^33 = 2^9 units
    if (pending_ >= kReduceAfterTerms) Reduce();
  }
}

void AdlerDelta::AddBytes(uint64_t position, std::span<const uint8_t> bytes) {
  const size_t n = bytes.size();
  const uint8_t* p = bytes.data();
  if (n < kMinKernelRun) {
    uint64_t pos = position % kMod;
    for (size_t i = 0; i < n; ++i) {
      s1_ += p[i];
      s2_ += static_cast<int64_t>(pos) * p[i];
      if (++pos == kMod) pos = 0;
    }
    pending_ += n;
    if (pending_ >= kReduceAfterTerms) Reduce();
    return;
  }
  // As in AddXorRun with all-zero old bytes: a = sum X_i, b = sum (L - i) X_i over a chunk at
  // P..P+L-1 give sum X_i = a and sum (P + i) X_i = (P + L) a - b (mod M).
  const Kernel kernel = DispatchedKernel();
  for (size_t done = 0; done < n;) {
    const size_t len = std::min(kXorChunk, n - done);
    uint32_t a = 0, b = 0;
    kernel(a, b, p + done, len);
    done += len;
    const int64_t end = static_cast<int64_t>((position % kMod + done) % kMod);
    s1_ += a;
    s2_ += end * int64_t{a} - int64_t{b};
    pending_ += 512;
    if (pending_ >= kReduceAfterTerms) Reduce();
  }
}

void AdlerDelta::Merge(const AdlerDelta& other) {
  Reduce();
  s1_ += other.s1_ % static_cast<int64_t>(kMod);
  s2_ += other.s2_ % static_cast<int64_t>(kMod);
  pending_ = 1;  // each sum is now below 2 * M < 2 * 2^24
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
