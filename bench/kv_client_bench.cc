// KvTierClient store and reload throughput: the full engine paths, PrepareStore + Store +
// CompleteStore (gather engine blocks into pool slots, then publish) and PrepareLoad + Load +
// CompleteLoad (pin, scatter slots back into engine blocks, unpin), through the cpu copy engine.
//
// Per configuration (engine layout x block size x copy threads):
//   layouts      per_layer: 32 layers with separate K and V tensors ([blocks, block/64] each),
//                so a block is gathered from 64 runs; cross_layer: one contiguous region per
//                block.
//   block sizes  64 KiB, 256 KiB, 1 MiB, 4 MiB; copy threads 1 and 2.
//   workload     a working set of --working-set-mib of engine blocks is stored under fresh keys
//                (requests of 16 blocks, all issued before the first is completed, as an engine
//                offloading many requests does), then reloaded into a second engine memory; the
//                pool holds two working sets, so every store after the first round evicts.
//   baseline     plain memcpy of the same bytes, block by block, from a plain buffer into a
//                second and back out into a third (a store and a reload), split over the same
//                number of threads, in rounds alternating with the client's.
// Prints one JSON line per configuration: store and load GB/s end to end and the memcpy GB/s
// (each of its median round) and the ratios, the copy engine's own GB/s (busy time only),
// evictions, and whether every reloaded byte matched. Each configuration runs about 2 x
// --min-seconds after a warm-up round.
//
// Usage: kv_client_bench [per_layer|cross_layer|all] [--working-set-mib N] [--min-seconds S]
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "kvtier/copy_engine.h"
#include "kvtier/kv_layout.h"
#include "kvtier/slot_pool.h"
#include "kvtier/tier_client.h"

namespace deltakv::bench {
namespace {

using kvtier::PoolKey;

constexpr uint64_t kLayers = 32;
constexpr size_t kKeysPerCall = 16;
constexpr int kMaxRounds = 200;

struct Options {
  std::string layouts = "all";
  uint64_t working_set_bytes = 64ull << 20;
  double min_seconds = 0.3;
};

PoolKey KeyOf(uint64_t i) { return PoolKey{i * 0x9E3779B97F4A7C15ull + 11, i ^ 0x5EED}; }

// Engine KV memory of `blocks` blocks of `block_bytes` in one of the two layouts.
class EngineKv {
 public:
  EngineKv(bool per_layer, uint64_t blocks, uint64_t block_bytes)
      : per_layer_(per_layer), blocks_(blocks), block_bytes_(block_bytes) {
    if (per_layer_) {
      run_bytes_ = block_bytes / (2 * kLayers);
      for (uint64_t t = 0; t < 2 * kLayers; ++t) buffers_.emplace_back(blocks * run_bytes_);
    } else {
      run_bytes_ = block_bytes;
      buffers_.emplace_back(blocks * block_bytes);
    }
  }

  StatusOr<kvtier::KvLayout> Layout() {
    if (!per_layer_) return kvtier::KvLayout::CrossLayer(buffers_[0].data(), blocks_, block_bytes_);
    std::vector<kvtier::LayerTensors> layers(kLayers);
    for (uint64_t l = 0; l < kLayers; ++l) {
      layers[l].k = buffers_[2 * l].data();
      layers[l].v = buffers_[2 * l + 1].data();
    }
    return kvtier::KvLayout::PerLayer(layers, blocks_, run_bytes_);
  }

  void FillRandom(uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (auto& b : buffers_) {
      for (size_t i = 0; i + 8 <= b.size(); i += 8) {
        const uint64_t x = rng();
        std::memcpy(b.data() + i, &x, 8);
      }
    }
  }

  bool SameBytes(const EngineKv& other) const { return buffers_ == other.buffers_; }

 private:
  bool per_layer_;
  uint64_t blocks_, block_bytes_, run_bytes_ = 0;
  std::vector<std::vector<uint8_t>> buffers_;
};

// Baseline: `rounds` times, memcpy every block of src into dst, blocks split over `threads`.
double MemcpySeconds(const std::vector<uint8_t>& src, std::vector<uint8_t>& dst,
                     uint64_t block_bytes, int threads, int rounds) {
  const uint64_t blocks = src.size() / block_bytes;
  Stopwatch watch;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const uint64_t first = blocks * t / threads, last = blocks * (t + 1) / threads;
      for (int r = 0; r < rounds; ++r) {
        for (uint64_t b = first; b < last; ++b) {
          std::memcpy(dst.data() + b * block_bytes, src.data() + b * block_bytes, block_bytes);
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  return watch.Seconds();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// One store round and one load round of `keys` (engine blocks 0..n-1 on both sides).
struct RoundTimes {
  double store = 0;
  double load = 0;
  bool ok = true;
};

RoundTimes StoreAndReload(kvtier::KvTierClient& writer, kvtier::KvTierClient& reader,
                          const std::vector<PoolKey>& keys) {
  RoundTimes t;
  const size_t n = keys.size();
  std::vector<uint64_t> blocks(n);
  for (size_t i = 0; i < n; ++i) blocks[i] = i;
  auto batch = [&](size_t first) {
    return std::span<const PoolKey>(keys).subspan(first, std::min(kKeysPerCall, n - first));
  };
  auto engine_blocks = [&](size_t first, size_t count) {
    return std::span<const uint64_t>(blocks).subspan(first, count);
  };

  Stopwatch store_watch;
  std::vector<kvtier::StoreHandle> stores;
  for (size_t first = 0; first < n; first += kKeysPerCall) {
    StatusOr<kvtier::StoreHandle> h = writer.PrepareStore(batch(first));
    if (!h.ok() || h->allocated() != h->size()) {
      t.ok = false;
      break;
    }
    if (!writer.Store(*h, engine_blocks(first, h->size())).ok()) t.ok = false;
    stores.push_back(std::move(h).value());
  }
  for (kvtier::StoreHandle& h : stores) {
    if (!writer.CompleteStore(h).ok()) t.ok = false;
  }
  t.store = store_watch.Seconds();

  Stopwatch load_watch;
  std::vector<kvtier::LoadHandle> loads;
  for (size_t first = 0; first < n && t.ok; first += kKeysPerCall) {
    const std::span<const PoolKey> keys_of_batch = batch(first);
    StatusOr<kvtier::LoadHandle> h = reader.PrepareLoad(keys_of_batch, keys_of_batch.size());
    if (!h.ok()) {
      t.ok = false;
      break;
    }
    if (!reader.Load(*h, engine_blocks(first, h->size())).ok()) t.ok = false;
    loads.push_back(std::move(h).value());
  }
  for (kvtier::LoadHandle& h : loads) {
    if (!reader.CompleteLoad(h).ok()) t.ok = false;
  }
  t.load = load_watch.Seconds();
  return t;
}

void RunConfig(const Options& options, bool per_layer, uint64_t block_bytes, uint32_t threads,
               uint64_t config_id) {
  const uint64_t blocks = std::max<uint64_t>(kKeysPerCall, options.working_set_bytes / block_bytes);
  const uint64_t bytes = blocks * block_bytes;  // per direction per round

  // Baseline buffers: engine -> "pool" -> engine, like a store and a reload.
  std::vector<uint8_t> plain_src(bytes, 0x5A), plain_pool(bytes, 0x00), plain_dst(bytes, 0x00);
  auto memcpy_round = [&] {
    return MemcpySeconds(plain_src, plain_pool, block_bytes, static_cast<int>(threads), 1) +
           MemcpySeconds(plain_pool, plain_dst, block_bytes, static_cast<int>(threads), 1);
  };

  const std::string pool_name =
      "dkv-clientbench-" + std::to_string(getpid()) + "-" + std::to_string(config_id);
  kvtier::SlotPoolOptions pool_options;
  pool_options.block_bytes = block_bytes;
  pool_options.capacity_slots = 2 * blocks;
  pool_options.prefault = true;
  StatusOr<kvtier::SlotPool> pool = kvtier::SlotPool::Create(pool_name, pool_options);
  if (!pool.ok()) {
    std::fprintf(stderr, "create pool: %s\n", pool.status().ToString().c_str());
    return;
  }
  kvtier::CpuCopyEngineOptions engine_options;
  engine_options.threads = threads;
  StatusOr<std::unique_ptr<kvtier::CpuCopyEngine>> engine =
      kvtier::CpuCopyEngine::Create(engine_options);
  if (!engine.ok()) {
    std::fprintf(stderr, "copy engine: %s\n", engine.status().ToString().c_str());
    return;
  }
  EngineKv src(per_layer, blocks, block_bytes), dst(per_layer, blocks, block_bytes);
  src.FillRandom(config_id + 1);
  StatusOr<kvtier::KvLayout> src_layout = src.Layout();
  StatusOr<kvtier::KvLayout> dst_layout = dst.Layout();
  if (!src_layout.ok() || !dst_layout.ok()) {
    std::fprintf(stderr, "layout: %s %s\n", src_layout.status().ToString().c_str(),
                 dst_layout.status().ToString().c_str());
    return;
  }
  auto writer = kvtier::KvTierClient::Open(pool_name, std::move(src_layout).value(), engine->get());
  auto reader = kvtier::KvTierClient::Open(pool_name, std::move(dst_layout).value(), engine->get());
  if (!writer.ok() || !reader.ok()) {
    std::fprintf(stderr, "open client: %s %s\n", writer.status().ToString().c_str(),
                 reader.status().ToString().c_str());
    return;
  }

  std::vector<PoolKey> keys(blocks);
  auto round_keys = [&](int round) {
    for (uint64_t i = 0; i < blocks; ++i) {
      keys[i] = KeyOf((config_id << 40) | (static_cast<uint64_t>(round) << 20) | i);
    }
  };
  // A warm-up round of each, then rounds alternating between the two (so that both see the
  // same machine when it is shared) until the client's rounds add up to min_seconds.
  bool ok = true;
  round_keys(0);
  ok = StoreAndReload(**writer, **reader, keys).ok;
  (void)memcpy_round();
  const kvtier::TierStats warm_store = (*writer)->Stats();
  const kvtier::TierStats warm_load = (*reader)->Stats();
  std::vector<double> store_seconds, load_seconds, memcpy_seconds;  // per round
  double client_seconds = 0;
  int rounds = 0;
  while (ok && client_seconds < options.min_seconds && rounds < kMaxRounds) {
    memcpy_seconds.push_back(memcpy_round());
    round_keys(rounds + 1);
    RoundTimes t = StoreAndReload(**writer, **reader, keys);
    ok = ok && t.ok;
    store_seconds.push_back(t.store);
    load_seconds.push_back(t.load);
    client_seconds += t.store + t.load;
    ++rounds;
  }
  const bool verified = ok && src.SameBytes(dst);
  const kvtier::TierStats s = (*writer)->Stats();
  const kvtier::TierStats l = (*reader)->Stats();
  auto gbps = [](double b, double seconds) { return seconds > 0 ? b / seconds / 1e9 : 0.0; };
  // The copy engine's own rate over the timed rounds (busy time only, no prepare/commit).
  const double copy_store_gbps = gbps(static_cast<double>(s.store.bytes - warm_store.store.bytes),
                                      s.store.busy_seconds - warm_store.store.busy_seconds);
  const double copy_load_gbps = gbps(static_cast<double>(l.load.bytes - warm_load.load.bytes),
                                     l.load.busy_seconds - warm_load.load.busy_seconds);
  // Rates of the median round, which a burst of other load on the machine does not move.
  const double moved = static_cast<double>(bytes) * rounds;
  const double memcpy_gbps = gbps(2.0 * bytes, Median(memcpy_seconds));  // in and out
  const double store_gbps = gbps(static_cast<double>(bytes), Median(store_seconds));
  const double load_gbps = gbps(static_cast<double>(bytes), Median(load_seconds));
  PrintResult({{"bench", "kv_client"},
               {"workload", "store_reload"},
               {"layout", per_layer ? "per_layer" : "cross_layer"},
               {"runs_per_block", per_layer ? 2 * kLayers : 1},
               {"block_bytes", block_bytes},
               {"copy_threads", threads},
               {"blocks", blocks},
               {"keys_per_call", kKeysPerCall},
               {"rounds", rounds},
               {"bytes_per_direction", moved},
               {"store_gbps", store_gbps},
               {"load_gbps", load_gbps},
               {"memcpy_gbps", memcpy_gbps},
               {"store_ratio_vs_memcpy", memcpy_gbps > 0 ? store_gbps / memcpy_gbps : 0.0},
               {"load_ratio_vs_memcpy", memcpy_gbps > 0 ? load_gbps / memcpy_gbps : 0.0},
               {"copy_engine_store_gbps", copy_store_gbps},
               {"copy_engine_load_gbps", copy_load_gbps},
               {"evictions", s.evictions},
               {"verified", verified}});
}

int ParseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "per_layer" || a == "cross_layer" || a == "all") {
      o->layouts = a;
    } else if (a == "--working-set-mib" && i + 1 < argc) {
      o->working_set_bytes = std::strtoull(argv[++i], nullptr, 10) << 20;
    } else if (a == "--min-seconds" && i + 1 < argc) {
      o->min_seconds = std::strtod(argv[++i], nullptr);
    } else {
      std::fprintf(stderr,
                   "usage: kv_client_bench [per_layer|cross_layer|all] [--working-set-mib N] "
                   "[--min-seconds S]\n");
      return 1;
    }
  }
  if (o->working_set_bytes == 0 || o->min_seconds < 0) {
    std::fprintf(stderr, "kv_client_bench: --working-set-mib must be > 0, --min-seconds >= 0\n");
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace deltakv::bench

int main(int argc, char** argv) {
  deltakv::bench::Options options;
  if (int rc = deltakv::bench::ParseArgs(argc, argv, &options); rc != 0) return rc;
  deltakv::bench::PrintEnvironment("kv_client_bench");
  uint64_t config_id = 1;
  for (bool per_layer : {true, false}) {
    if (options.layouts != "all" && (options.layouts == "per_layer") != per_layer) continue;
    for (uint64_t block : {64ull << 10, 256ull << 10, 1ull << 20, 4ull << 20}) {
      for (uint32_t threads : {1u, 2u}) {
        deltakv::bench::RunConfig(options, per_layer, block, threads, config_id++);
      }
    }
  }
  return 0;
}
