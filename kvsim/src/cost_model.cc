// The roofline step model of kvsim/cost_model.h.
#include "kvsim/cost_model.h"

#include <algorithm>
#include <string>

namespace deltakv::kvsim {

double CostModel::ChunkAttentionFlops(uint64_t p, uint64_t m) const {
  return attention_flops_coef * static_cast<double>(m) *
         (static_cast<double>(p) + static_cast<double>(m) / 2.0);
}

double CostModel::StepSeconds(uint64_t prefill_tokens, double attention_flops, uint64_t decode_seqs,
                              uint64_t decode_context_tokens) const {
  const double tokens = static_cast<double>(prefill_tokens + decode_seqs);
  if (tokens == 0) return 0;
  const double compute =
      flops_per_token * tokens / compute_flops_per_s + attention_flops / attention_flops_per_s;
  const double weights = std::min(weight_bytes, active_weight_bytes * tokens);
  const double kv = static_cast<double>(decode_context_tokens) *
                    static_cast<double>(kv_bytes_per_token_per_rank) * tp;
  const double memory = (weights + kv) / hbm_bytes_per_s;
  return std::max(compute, memory) + step_overhead_s;
}

double CostModel::ReloadSeconds(uint64_t tokens) const {
  if (tokens == 0) return 0;
  return reload_latency_s +
         static_cast<double>(tokens) * static_cast<double>(kv_bytes_per_token_per_rank) /
             reload_bytes_per_s;
}

}  // namespace deltakv::kvsim
