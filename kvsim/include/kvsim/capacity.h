// The capacity planner: what a model's KV cache costs on a node, how many tokens the GPUs and
// the host hold, what the host pool really maps, and the settings that give that pool in
// deltakv's sidecar and in other engines' conventions. docs/CAPACITY.md gives the formulas.
//
// Units: bytes, and per node or per rank as each field says. A replica is one copy of the model
// on `tp` GPUs, spanning `nodes_per_replica` nodes (tp = nodes_per_replica * GPUs per node
// when it spans nodes); `replicas_per_node` replicas share a node when tp < GPUs per node.
//
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "kvsim/model.h"

namespace deltakv::kvsim {

struct CapacityInputs {
  ModelSpec model;
  NodeSpec node;
  // GPUs per replica; 0 = the fewest whole nodes (1..8) whose GPUs hold the weights and leave
  // at least a tenth of their usable memory for KV (one node when nothing does).
  uint32_t tp = 0;
  KvDtype kv_dtype = KvDtype::kBf16;
  bool mla_replicated = true;             // MLA latents on every rank (no decode context parallel)
  double gpu_memory_utilization = 0.9;    // fraction of HBM the engine may use
  uint64_t gpu_reserve_bytes = 4ull << 30;  // per GPU: activations, CUDA graphs, NCCL buffers
  bool cpu_checkpoint_copy = false;       // the engine keeps a copy of its weights in host RAM
  std::optional<uint64_t> host_ram_bytes;  // per node; none = the node's (0 is none at all)
  uint64_t container_limit_bytes = 0;     // per node (memory limit of the pod); 0 = none
  uint64_t shm_bytes = 0;                 // size of /dev/shm on the node; 0 = unknown
  uint64_t host_reserve_bytes = 64ull << 30;  // per node: OS, engine and sidecar processes
  double host_fraction = 1.0;             // of what is left, the share given to the KV pool
  uint32_t block_tokens = 64;             // tokens per pool block
  // GPU KV capacity per replica in tokens, given instead of computed from the formula.
  std::optional<uint64_t> gpu_kv_tokens;
};

struct EngineFlag {
  std::string engine;   // "deltakv sidecar", "vllm", "lmcache", "sglang"
  std::string setting;  // e.g. "--kv-offloading-size 840"
  std::string scope;    // "per node", "per replica (total over TP ranks)", "per rank"
  std::string note;
};

struct CapacityPlan {
  uint32_t tp = 0;
  uint32_t nodes_per_replica = 1;
  uint32_t replicas_per_node = 1;
  uint32_t ranks_per_node = 0;  // ranks of one replica on one node
  uint64_t kv_bytes_per_token = 0;           // one full copy of the cache
  uint64_t kv_bytes_per_token_per_rank = 0;  // what one rank holds
  uint64_t host_bytes_per_token = 0;         // per node, per replica: its ranks' shares there
                                             // (MLA latents replicated on every rank count once each)
  uint64_t fixed_state_bytes = 0;            // per request (hybrid models)
  // GPU side.
  uint64_t weight_bytes_per_gpu = 0;
  uint64_t gpu_kv_bytes_per_gpu = 0;  // given tokens: what they take on each GPU
  uint64_t gpu_kv_tokens = 0;  // per replica
  bool gpu_kv_tokens_given = false;  // CapacityInputs::gpu_kv_tokens, not the formula
  // Host side, per node.
  uint64_t host_ram_bytes = 0;
  uint64_t host_limit_bytes = 0;         // min(RAM, container limit)
  uint64_t checkpoint_copy_bytes = 0;    // this node's share of a CPU copy (when kept)
  uint64_t host_kv_budget_bytes = 0;     // without a CPU copy
  uint64_t host_kv_budget_with_copy_bytes = 0;
  uint64_t host_kv_bytes = 0;            // the chosen budget x host_fraction
  uint64_t host_kv_tokens = 0;           // per replica (what the pool on each node holds)
  // The pool that holds it, per node.
  uint64_t block_bytes = 0;      // --kv-block-bytes: block_tokens x KV bytes per token per rank
                                 // (each rank process stores its share in a slot of its own)
  uint64_t slots = 0;            // --kv-capacity-slots
  uint64_t pool_segment_bytes = 0;  // what SlotPool::Create maps for them (metadata included)
  double kv_host_fraction = 0;   // the --kv-host-fraction that gives about `slots` on this node
  std::vector<EngineFlag> flags;
  std::vector<std::string> warnings;
};

// InvalidArgument for a model without KV bytes, a node without GPUs or memory, tp that is not
// a divisor or multiple of the node's GPUs, or fractions outside (0, 1]. A plan whose weights do
// not fit on the GPUs is still returned, with a warning and gpu_kv_tokens 0 (or as given).
StatusOr<CapacityPlan> PlanCapacity(const CapacityInputs& in);

// The plan as a one-line JSON object.
std::string CapacityPlanJson(const CapacityPlan& plan);

}  // namespace deltakv::kvsim
