// KV block key hashing throughput (docs/KEYS.md). Prints the environment, then one JSON line
// per (workload, hash kind, block size) with the baseline measured in the same run:
//   chain     ChainKeys over a 1 Mi-token request vs plain H over each block's token bytes
//             (XXH3-128 / SHA-256, one digest per block, no tag, context or chaining)
//   keychain  KeyChain::Append one block at a time (a growing request) vs the same baseline
//   fingerprint  TokenFingerprint per block vs the plain XXH3-128 baseline
// Throughput is tokens per second on one core; `ratio` = keys / baseline (1.0 = no overhead).
//
// Usage: kv_keys_bench [chain|keychain|fingerprint|all]   (default all)
#include <openssl/evp.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "bench_util.h"
#include "kvtier/keys.h"

namespace deltakv::kvtier {
namespace {

constexpr size_t kTokens = size_t{1} << 20;
constexpr uint32_t kBlockSizes[] = {16, 32, 64, 256};
constexpr HashKind kKinds[] = {HashKind::kXxh3, HashKind::kSha256};

volatile uint64_t g_sink = 0;  // keeps results observable

// Best seconds per call of fn over `reps` rounds, each repeated until it lasts >= min_s.
template <typename Fn>
double BestSeconds(Fn&& fn, int reps = 3, double min_s = 0.1) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    int calls = 0;
    bench::Stopwatch sw;
    do {
      fn();
      ++calls;
    } while (sw.Seconds() < min_s);
    best = std::min(best, sw.Seconds() / calls);
  }
  return best;
}

KeyContext BenchContext(HashKind kind) {
  KeyContext c;
  c.model_fingerprint = "meta-llama/Llama-3.1-8B@0e9e39f";
  c.kv_dtype = "bfloat16";
  c.kv_layout = "NHD";
  c.tp_rank = 0;
  c.tp_size = 2;
  c.salt = "tenant-42";
  c.kind = kind;
  return c;
}

// The baseline: one plain digest per block of token bytes, nothing else.
void PlainDigests(HashKind kind, std::span<const uint32_t> tokens, uint32_t block, EVP_MD_CTX* sha,
                  const EVP_MD* md) {
  uint64_t acc = 0;
  for (size_t at = 0; at + block <= tokens.size(); at += block) {
    const uint32_t* p = tokens.data() + at;
    if (kind == HashKind::kXxh3) {
      acc ^= XXH3_128bits(p, size_t{block} * 4).low64;
    } else {
      uint8_t d[EVP_MAX_MD_SIZE];
      unsigned int n = 0;
      EVP_DigestInit_ex2(sha, md, nullptr);
      EVP_DigestUpdate(sha, p, size_t{block} * 4);
      EVP_DigestFinal_ex(sha, d, &n);
      acc ^= d[0];
    }
  }
  g_sink = g_sink + acc;
}

void Report(const std::string& workload, HashKind kind, uint32_t block, double seconds,
            double baseline_seconds, const std::string& baseline) {
  const double tps = static_cast<double>(kTokens) / seconds;
  const double base_tps = static_cast<double>(kTokens) / baseline_seconds;
  bench::PrintResult({{"bench", "kv_keys"},
                      {"workload", workload},
                      {"hash", std::string(HashKindName(kind))},
                      {"block_tokens", block},
                      {"tokens", kTokens},
                      {"tokens_per_s", tps},
                      {"ns_per_block", seconds * 1e9 / static_cast<double>(kTokens / block)},
                      {"baseline", baseline},
                      {"baseline_tokens_per_s", base_tps},
                      {"ratio", tps / base_tps},
                      {"build", bench::BuildType()}});
}

int Run(const std::string& workload) {
  std::vector<uint32_t> tokens(kTokens);
  std::mt19937 rng(42);
  for (uint32_t& t : tokens) t = rng() % 152064;  // a Qwen-sized vocabulary
  EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  EVP_MD_CTX* sha = EVP_MD_CTX_new();
  if (md == nullptr || sha == nullptr) {
    std::fprintf(stderr, "kv_keys_bench: OpenSSL SHA-256 unavailable\n");
    return 1;
  }
  // Warm up (page faults, CPU frequency) before the first measurement.
  BestSeconds([&] { PlainDigests(HashKind::kXxh3, tokens, 16, sha, md); }, 1, 0.2);
  for (HashKind kind : kKinds) {
    const KeyContext ctx = BenchContext(kind);
    for (uint32_t block : kBlockSizes) {
      const bool xxh3 = kind == HashKind::kXxh3;
      const std::string baseline_name =
          xxh3 ? "plain XXH3-128 per block" : "plain SHA-256 per block";
      const double base_s = BestSeconds([&] { PlainDigests(kind, tokens, block, sha, md); });
      if (workload == "all" || workload == "chain") {
        const double s = BestSeconds([&] {
          auto keys = ChainKeys(ctx, tokens, block);
          if (!keys.ok()) std::abort();
          g_sink = g_sink + keys->back().lo;
        });
        Report("chain", kind, block, s, base_s, baseline_name);
      }
      if (workload == "all" || workload == "keychain") {
        const double s = BestSeconds([&] {
          auto chain = KeyChain::Create(ctx, block);
          if (!chain.ok()) std::abort();
          for (size_t at = 0; at < tokens.size(); at += block) {
            if (!chain->Append(std::span(tokens).subspan(at, block)).ok()) std::abort();
          }
          g_sink = g_sink + chain->tail().lo;
        });
        Report("keychain", kind, block, s, base_s, baseline_name);
      }
      if (xxh3 && (workload == "all" || workload == "fingerprint")) {
        const double s = BestSeconds([&] {
          uint64_t acc = 0;
          for (size_t at = 0; at < tokens.size(); at += block) {
            acc ^= TokenFingerprint(std::span(tokens).subspan(at, block));
          }
          g_sink = g_sink + acc;
        });
        Report("fingerprint", kind, block, s, base_s, baseline_name);
      }
    }
  }
  EVP_MD_CTX_free(sha);
  EVP_MD_free(md);
  return 0;
}

}  // namespace
}  // namespace deltakv::kvtier

int main(int argc, char** argv) {
  const std::string workload = argc > 1 ? argv[1] : "all";
  if (workload != "all" && workload != "chain" && workload != "keychain" &&
      workload != "fingerprint") {
    std::fprintf(stderr, "usage: %s [chain|keychain|fingerprint|all]\n", argv[0]);
    return 2;
  }
  deltakv::bench::PrintEnvironment("kv_keys");
  return deltakv::kvtier::Run(workload);
}
