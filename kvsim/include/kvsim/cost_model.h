// The GPU side of a replay: how long one engine step takes and how fast KV moves between host
// and GPU, derived from a model and a node with a roofline (docs/CAPACITY.md, "Replay cost
// model", gives the formulas and the defaults' sources).
//
// One replica of the model runs on `tp` GPUs. An engine step runs every decoding request one
// token and a chunk of prefill tokens (continuous batching with chunked prefill, as vLLM and
// SGLang schedule). Its time is the larger of its compute time and its memory time, plus a
// fixed per-step overhead:
//   compute = (2 * active_params * tokens + attention FLOPs) / (tp * peak * mfu)
//   attention FLOPs of a prefill chunk of m tokens after p cached ones
//           = 2 * kv_layers * heads * (qk_head_dim + v_head_dim) * m * (p + m / 2)
//   memory  = (weights read + KV read) / (tp * hbm bandwidth * hbm efficiency)
//   weights read = min(weight_bytes, active weight bytes * tokens)   (MoE: experts touched)
//   KV read = context tokens of the decoding requests * KV bytes per token (all ranks)
// A host hit costs a reload: bytes per rank over the host link, per GPU in parallel.
//
// Thread-safety: value types; the functions are stateless.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kvsim/model.h"

namespace deltakv::kvsim {

struct CostModelOptions {
  uint32_t tp = 8;              // GPUs per replica (all its nodes together)
  KvDtype kv_dtype = KvDtype::kBf16;
  bool mla_replicated = true;   // MLA latents on every TP rank (no decode context parallel)
  bool fp8_compute = false;     // prefill GEMMs at the fp8 peak (fp8/fp4 checkpoints)
  double prefill_mfu = 0.45;    // fraction of peak FLOPs a prefill step reaches
  double attention_efficiency = 0.35;  // fraction of peak for prefill attention
  double hbm_efficiency = 0.7;  // fraction of HBM bandwidth a decode step reaches
  double step_overhead_s = 0.002;  // scheduling, sampling, launches per step
  double reload_latency_s = 0.0005;  // fixed cost of one host -> GPU reload
  double link_efficiency = 1.0;  // on top of the node's achieved h2d_gbps
};

struct CostModel {
  uint32_t tp = 1;
  uint64_t kv_bytes_per_token = 0;           // one full copy of the model's cache
  uint64_t kv_bytes_per_token_per_rank = 0;  // what one rank holds (and reloads)
  double flops_per_token = 0;                // 2 * active params
  double attention_flops_coef = 0;           // 2 * kv_layers * heads * (qk + v)
  double compute_flops_per_s = 0;            // tp * peak * mfu (GEMMs)
  double attention_flops_per_s = 0;          // tp * peak * attention_efficiency
  double hbm_bytes_per_s = 0;                // tp * hbm * efficiency
  double weight_bytes = 0;
  double active_weight_bytes = 0;            // weights one token touches
  double step_overhead_s = 0;
  double reload_bytes_per_s = 0;             // per rank (ranks reload in parallel)
  double reload_latency_s = 0;

  // Seconds of one step with `prefill_tokens` tokens of prefill whose attention FLOPs are
  // `attention_flops`, and `decode_seqs` decoding requests with `decode_context_tokens` tokens
  // of context in all.
  double StepSeconds(uint64_t prefill_tokens, double attention_flops, uint64_t decode_seqs,
                     uint64_t decode_context_tokens) const;
  // Attention FLOPs of a prefill chunk of m tokens after p tokens of context.
  double ChunkAttentionFlops(uint64_t p, uint64_t m) const;
  // Seconds to reload `tokens` tokens of KV from host memory (0 for 0 tokens).
  double ReloadSeconds(uint64_t tokens) const;
};

// InvalidArgument when the model or node lacks a number the model needs (named), tp is 0, or
// an efficiency is outside (0, 1]. A replica may span nodes (tp larger than node.gpus).
StatusOr<CostModel> DeriveCostModel(const ModelSpec& model, const NodeSpec& node,
                                    const CostModelOptions& options);

}  // namespace deltakv::kvsim
