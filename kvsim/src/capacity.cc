// The capacity planner of kvsim/capacity.h.
#include "kvsim/capacity.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "kvtier/pool_layout.h"

namespace deltakv::kvsim {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
constexpr uint64_t kChunkBytes = 256ull << 20;  // the sidecar's chunk of lazily touched slots

std::string Num(double v, const char* fmt = "%.1f") {
  char b[64];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

uint64_t NextPow2(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// v rounded down to a multiple of 1 / per (the tolerance keeps 0.29 from becoming 0.28).
double FloorTo(double v, double per) { return std::floor(v * per * (1 + 1e-12)) / per; }

// The largest power of two at most v (0 for 0).
uint64_t PrevPow2(uint64_t v) { return v == 0 ? 0 : uint64_t{1} << (63 - __builtin_clzll(v)); }

uint64_t SaturatingMul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

// The largest slot count (up to `want`) whose pool segment kvtier::ComputeGeometry accepts:
// the pool has a limit on its slots and on its total size. 0 when none does.
uint64_t LargestPoolSlots(uint64_t block_bytes, uint64_t want) {
  auto ok = [&](uint64_t n) { return kvtier::ComputeGeometry(block_bytes, n, kChunkBytes).ok(); };
  if (want == 0 || ok(want)) return want;
  uint64_t lo = 0, hi = std::min(want, kvtier::kMaxSlots + 1);  // ok(lo), !ok(hi) but lo = 0
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    (ok(mid) ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace

StatusOr<CapacityPlan> PlanCapacity(const CapacityInputs& in) {
  const ModelSpec& m = in.model;
  const NodeSpec& node = in.node;
  if (node.gpus == 0 || node.gpu.memory_bytes == 0) {
    return InvalidArgument("capacity: the node has no GPUs or no GPU memory");
  }
  if (!(in.gpu_memory_utilization > 0 && in.gpu_memory_utilization <= 1) ||
      !(in.host_fraction > 0 && in.host_fraction <= 1)) {
    return InvalidArgument("capacity: gpu_memory_utilization and host_fraction must be in (0, 1]");
  }
  if (in.block_tokens == 0) return InvalidArgument("capacity: block_tokens must be >= 1");
  CapacityPlan p;
  p.tp = in.tp;
  if (p.tp == 0) {
    p.tp = node.gpus;
    for (uint32_t k = 1; k <= 8; ++k) {
      const double usable = static_cast<double>(node.gpu.memory_bytes) * in.gpu_memory_utilization;
      const double left = usable - static_cast<double>(m.weight_bytes) / (k * node.gpus) -
                          static_cast<double>(in.gpu_reserve_bytes);
      if (left >= 0.1 * usable) {
        p.tp = k * node.gpus;
        break;
      }
    }
  }
  if (p.tp <= node.gpus) {
    if (node.gpus % p.tp != 0) {
      return InvalidArgument("capacity: tp " + std::to_string(p.tp) + " does not divide the " +
                             std::to_string(node.gpus) + " GPUs of a node");
    }
    p.replicas_per_node = node.gpus / p.tp;
    p.ranks_per_node = p.tp;
  } else {
    if (p.tp % node.gpus != 0) {
      return InvalidArgument("capacity: tp " + std::to_string(p.tp) +
                             " is not a multiple of the " + std::to_string(node.gpus) +
                             " GPUs of a node");
    }
    p.nodes_per_replica = p.tp / node.gpus;
    p.ranks_per_node = node.gpus;
  }
  p.kv_bytes_per_token = KvBytesPerToken(m, in.kv_dtype);
  if (p.kv_bytes_per_token == 0) return InvalidArgument("capacity: the model has no KV layers");
  if (m.attention == AttentionKind::kMla) {
    p.kv_bytes_per_token_per_rank =
        in.mla_replicated ? p.kv_bytes_per_token : (p.kv_bytes_per_token + p.tp - 1) / p.tp;
  } else {
    const uint32_t split = std::max<uint32_t>(1, std::min(p.tp, m.kv_heads));
    p.kv_bytes_per_token_per_rank = (p.kv_bytes_per_token + split - 1) / split;
  }
  p.host_bytes_per_token = p.kv_bytes_per_token_per_rank * p.ranks_per_node;
  p.fixed_state_bytes = m.fixed_state_bytes;

  // GPU: what is left of each GPU after the weights' shard and the runtime reserve.
  p.weight_bytes_per_gpu = (m.weight_bytes + p.tp - 1) / p.tp;
  const double usable = static_cast<double>(node.gpu.memory_bytes) * in.gpu_memory_utilization;
  const double left = usable - static_cast<double>(p.weight_bytes_per_gpu) -
                      static_cast<double>(in.gpu_reserve_bytes);
  if (left <= 0) {
    p.warnings.push_back("the weights (" + Num(p.weight_bytes_per_gpu / kGiB) +
                         " GiB per GPU) and the reserve do not fit in " +
                         Num(usable / kGiB) + " GiB per GPU: use more GPUs per replica");
  } else {
    p.gpu_kv_bytes_per_gpu = static_cast<uint64_t>(left);
    p.gpu_kv_tokens = p.gpu_kv_bytes_per_gpu / p.kv_bytes_per_token_per_rank;
  }
  if (in.gpu_kv_tokens) {
    p.gpu_kv_tokens = *in.gpu_kv_tokens;
    p.gpu_kv_tokens_given = true;
    p.gpu_kv_bytes_per_gpu = SaturatingMul(p.gpu_kv_tokens, p.kv_bytes_per_token_per_rank);
  }

  // Host, per node.
  p.host_ram_bytes = in.host_ram_bytes.value_or(node.host_ram_bytes);
  if (!in.host_ram_bytes && p.host_ram_bytes == 0) {
    return InvalidArgument("capacity: the node's host RAM is unknown");
  }
  p.host_limit_bytes = in.container_limit_bytes ? std::min(in.container_limit_bytes, p.host_ram_bytes)
                                                : p.host_ram_bytes;
  const uint64_t copy = m.weight_bytes / p.nodes_per_replica * p.replicas_per_node;
  p.checkpoint_copy_bytes = in.cpu_checkpoint_copy ? copy : 0;
  auto budget = [&](uint64_t taken) -> uint64_t {
    const uint64_t used = in.host_reserve_bytes + taken;
    return p.host_limit_bytes > used ? p.host_limit_bytes - used : 0;
  };
  p.host_kv_budget_bytes = budget(0);
  p.host_kv_budget_with_copy_bytes = budget(copy);
  const uint64_t chosen = in.cpu_checkpoint_copy ? p.host_kv_budget_with_copy_bytes
                                                 : p.host_kv_budget_bytes;
  p.host_kv_bytes = static_cast<uint64_t>(static_cast<double>(chosen) * in.host_fraction);

  // The pool: one per node, shared by every rank process on it; each rank stores its own
  // share of a block in a slot of its own.
  p.block_bytes = uint64_t{in.block_tokens} * p.kv_bytes_per_token_per_rank;
  const uint64_t stride = kvtier::SlotStride(p.block_bytes);
  if (p.block_bytes > kvtier::kMaxBlockBytes) {
    p.warnings.push_back("a block of " + std::to_string(in.block_tokens) + " tokens is " +
                         std::to_string(p.block_bytes) +
                         " bytes, over the pool's block limit: use smaller blocks");
  }
  // The largest slot count whose real segment (metadata, index and data) fits the budget, and
  // that one pool can have.
  uint64_t slots = p.host_kv_bytes / stride;
  if (p.block_bytes <= kvtier::kMaxBlockBytes) {
    const uint64_t most = LargestPoolSlots(p.block_bytes, slots);
    if (most < slots && most > 0) {
      auto g = kvtier::ComputeGeometry(p.block_bytes, most, kChunkBytes);
      p.warnings.push_back("the host KV budget (" + Num(p.host_kv_bytes / kGiB, "%.0f") +
                           " GiB per node) is more than one pool can map (" + std::to_string(most) +
                           " slots, " + Num(g.ok() ? g->total_size / kGiB : 0, "%.0f") +
                           " GiB): the pool is capped there");
    }
    slots = most;
  }
  while (slots > 0) {
    auto g = kvtier::ComputeGeometry(p.block_bytes, slots, kChunkBytes);
    if (!g.ok()) break;
    if (g->total_size <= p.host_kv_bytes) {
      p.pool_segment_bytes = g->total_size;
      break;
    }
    const uint64_t over = g->total_size - p.host_kv_bytes;
    slots -= std::max<uint64_t>(1, (over + stride - 1) / stride);
  }
  p.slots = p.pool_segment_bytes ? slots : 0;
  const uint64_t ranks_here = uint64_t{p.ranks_per_node} * p.replicas_per_node;
  p.host_kv_tokens = p.slots / ranks_here * in.block_tokens;
  const uint64_t avail_at_start =
      p.host_limit_bytes > in.host_reserve_bytes + p.checkpoint_copy_bytes
          ? p.host_limit_bytes - in.host_reserve_bytes - p.checkpoint_copy_bytes
          : 0;
  p.kv_host_fraction =
      avail_at_start ? std::min(1.0, static_cast<double>(p.slots * stride) / avail_at_start) : 0;

  // Warnings that would otherwise show up as the OOM killer on the first batch.
  if (in.shm_bytes != 0 && p.pool_segment_bytes > in.shm_bytes) {
    p.warnings.push_back("the pool (" + Num(p.pool_segment_bytes / kGiB) +
                         " GiB) is larger than /dev/shm (" + Num(in.shm_bytes / kGiB) +
                         " GiB): mount a larger /dev/shm (Kubernetes: an emptyDir with medium "
                         "Memory and a sizeLimit)");
  }
  if (in.container_limit_bytes != 0 && in.container_limit_bytes < p.host_ram_bytes) {
    p.warnings.push_back("the container limit (" + Num(in.container_limit_bytes / kGiB) +
                         " GiB) caps the host budget; shared memory counts against it");
  }
  if (p.host_kv_budget_bytes == 0) {
    p.warnings.push_back("the host reserve (" + Num(in.host_reserve_bytes / kGiB) +
                         " GiB) leaves no host memory for KV");
  } else if (in.cpu_checkpoint_copy && p.host_kv_budget_with_copy_bytes == 0) {
    p.warnings.push_back("the CPU copy of the checkpoint leaves no host memory for KV");
  }

  // Settings.
  const double per_node_gib = p.pool_segment_bytes / kGiB;
  const uint64_t rank_bytes = p.slots / ranks_here * p.block_bytes;
  const uint64_t replica_bytes = rank_bytes * p.tp;  // all ranks of one replica
  p.flags.push_back({"deltakv sidecar",
                     "--kv-block-bytes " + std::to_string(p.block_bytes) +
                         " --kv-capacity-slots " + std::to_string(p.slots),
                     "per node", Num(per_node_gib) + " GiB mapped in /dev/shm"});
  p.flags.push_back({"deltakv sidecar",
                     "--kv-block-bytes " + std::to_string(p.block_bytes) +
                         " --kv-host-fraction " + Num(p.kv_host_fraction, "%.3f"),
                     "per node",
                     "of the memory available when the sidecar starts (after the engine "
                     "loaded); an estimate, the slot count above is exact"});
  {
    // vLLM's allocation rounds each per-rank tensor up to a power of two: the setting is the
    // largest whole GiB whose rounded tensors still fit this node's budget.
    const uint64_t tensors = uint64_t{m.kv_layers} * (m.attention == AttentionKind::kMla ? 1 : 2);
    const uint64_t replica_tensors = uint64_t{p.tp} * tensors;
    const uint64_t node_tensors = ranks_here * tensors;
    const uint64_t gib = static_cast<uint64_t>(kGiB);
    auto tensor_bytes = [&](uint64_t size_gib) {  // one rounded tensor
      return replica_tensors ? NextPow2(size_gib * gib / replica_tensors) : 0;
    };
    auto pinned_per_node = [&](uint64_t size_gib) { return tensor_bytes(size_gib) * node_tensors; };
    const uint64_t whole = replica_bytes / gib;
    uint64_t size = whole;
    if (node_tensors != 0 && pinned_per_node(size) > p.host_kv_bytes) {
      const uint64_t tensor = PrevPow2(p.host_kv_bytes / node_tensors);
      size = std::min(size, SaturatingMul(tensor, replica_tensors) / gib);
    }
    const double pinned = static_cast<double>(tensor_bytes(size) * replica_tensors);
    std::string note = "the allocation rounds each of its " + std::to_string(replica_tensors) +
                       " per-rank tensors up to a power of two: " + Num(pinned / kGiB) +
                       " GiB really pinned for " + Num(static_cast<double>(size)) + " asked";
    if (size < whole) {
      note += " (the pool's " + std::to_string(whole) + " GiB would pin " +
              Num(static_cast<double>(pinned_per_node(whole)) / kGiB) + " GiB per node, over the " +
              Num(p.host_kv_bytes / kGiB) + " GiB budget)";
    }
    p.flags.push_back({"vllm", "--kv-offloading-size " + std::to_string(size),
                       "per replica (GiB, total over TP ranks)", note});
    if (size == 0) {
      if (whole > 0) {
        p.warnings.push_back(
            "vLLM: no whole GiB of --kv-offloading-size fits the host KV budget (" +
            Num(p.host_kv_bytes / kGiB) +
            " GiB per node) once each per-rank tensor rounds up to a power of two");
      }
    } else if (pinned_per_node(size) > std::min(p.host_kv_bytes, p.host_limit_bytes)) {
      p.warnings.push_back("vLLM: --kv-offloading-size " + std::to_string(size) + " really pins " +
                           Num(static_cast<double>(pinned_per_node(size)) / kGiB) +
                           " GiB per node, more than the host KV budget (" +
                           Num(p.host_kv_bytes / kGiB) + " GiB)");
    }
  }
  // Rounded down, so that no setting asks for more than the pool's share.
  p.flags.push_back({"lmcache", "max_local_cpu_size: " + Num(FloorTo(rank_bytes / kGiB, 10)),
                     "per rank (GiB)", ""});
  const uint64_t hicache_gb = rank_bytes / 1'000'000'000;
  std::string ratio;
  if (p.gpu_kv_bytes_per_gpu) {
    const double r = static_cast<double>(rank_bytes) / p.gpu_kv_bytes_per_gpu;
    ratio = "or --hicache-ratio " + Num(FloorTo(r, 100), "%.2f") +
            " (host pool over the device KV pool)";
  }
  p.flags.push_back(
      {"sglang", "--hicache-size " + std::to_string(hicache_gb), "per rank (GB)", ratio});
  if (hicache_gb == 0 && rank_bytes > 0) {
    p.warnings.push_back("SGLang: the host KV per rank (" + Num(rank_bytes / 1e9, "%.2f") +
                         " GB) rounds down to --hicache-size 0 (whole GB; 0 means the ratio "
                         "decides): give --hicache-ratio instead");
  }
  return p;
}

std::string CapacityPlanJson(const CapacityPlan& p) {
  nlohmann::json flags = nlohmann::json::array();
  for (const EngineFlag& f : p.flags) {
    flags.push_back({{"engine", f.engine}, {"setting", f.setting}, {"scope", f.scope},
                     {"note", f.note}});
  }
  nlohmann::json j = {{"tp", p.tp},
                      {"nodes_per_replica", p.nodes_per_replica},
                      {"replicas_per_node", p.replicas_per_node},
                      {"ranks_per_node", p.ranks_per_node},
                      {"kv_bytes_per_token", p.kv_bytes_per_token},
                      {"kv_bytes_per_token_per_rank", p.kv_bytes_per_token_per_rank},
                      {"host_bytes_per_token_per_node", p.host_bytes_per_token},
                      {"fixed_state_bytes_per_request", p.fixed_state_bytes},
                      {"weight_bytes_per_gpu", p.weight_bytes_per_gpu},
                      {"gpu_kv_bytes_per_gpu", p.gpu_kv_bytes_per_gpu},
                      {"gpu_kv_tokens_per_replica", p.gpu_kv_tokens},
                      {"gpu_kv_tokens_given", p.gpu_kv_tokens_given},
                      {"host_ram_bytes_per_node", p.host_ram_bytes},
                      {"host_limit_bytes_per_node", p.host_limit_bytes},
                      {"checkpoint_copy_bytes_per_node", p.checkpoint_copy_bytes},
                      {"host_kv_budget_bytes_per_node", p.host_kv_budget_bytes},
                      {"host_kv_budget_with_copy_bytes_per_node", p.host_kv_budget_with_copy_bytes},
                      {"host_kv_bytes_per_node", p.host_kv_bytes},
                      {"host_kv_tokens_per_replica", p.host_kv_tokens},
                      {"pool",
                       {{"block_bytes", p.block_bytes},
                        {"slots", p.slots},
                        {"segment_bytes", p.pool_segment_bytes},
                        {"kv_host_fraction", p.kv_host_fraction}}},
                      {"flags", flags},
                      {"warnings", p.warnings}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace deltakv::kvsim
