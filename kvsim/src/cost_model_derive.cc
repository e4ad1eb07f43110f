// DeriveCostModel: the roofline constants of kvsim/cost_model.h from a model and a node.
#include <algorithm>
#include <string>

#include "kvsim/cost_model.h"

namespace deltakv::kvsim {
namespace {

Status CheckFraction(const char* name, double v) {
  if (!(v > 0 && v <= 1)) {
    return InvalidArgument(std::string("cost model: ") + name + " must be in (0, 1], got " +
                                   std::to_string(v));
  }
  return Status::Ok();
}

Status NeedPositive(const char* what, double v) {
  if (!(v > 0)) return InvalidArgument(std::string("cost model: ") + what + " is not set");
  return Status::Ok();
}

}  // namespace

StatusOr<CostModel> DeriveCostModel(const ModelSpec& model, const NodeSpec& node,
                                    const CostModelOptions& o) {
  if (o.tp == 0) return InvalidArgument("cost model: tp must be at least 1");
  for (auto [name, v] : {std::pair<const char*, double>{"prefill_mfu", o.prefill_mfu},
                         {"attention_efficiency", o.attention_efficiency},
                         {"hbm_efficiency", o.hbm_efficiency},
                         {"link_efficiency", o.link_efficiency}}) {
    RETURN_IF_ERROR(CheckFraction(name, v));
  }
  if (o.step_overhead_s < 0 || o.reload_latency_s < 0) {
    return InvalidArgument("cost model: overheads must not be negative");
  }
  const double peak_tflops = o.fp8_compute && node.gpu.dense_fp8_tflops > 0
                                 ? node.gpu.dense_fp8_tflops
                                 : node.gpu.dense_bf16_tflops;
  RETURN_IF_ERROR(NeedPositive("the GPU's dense TFLOPS", peak_tflops));
  RETURN_IF_ERROR(NeedPositive("the GPU's HBM bandwidth", node.gpu.hbm_gbps));
  RETURN_IF_ERROR(NeedPositive("the GPU's host-to-device bandwidth", node.gpu.h2d_gbps));
  RETURN_IF_ERROR(
      NeedPositive("the model's active parameters", static_cast<double>(model.active_params)));
  RETURN_IF_ERROR(
      NeedPositive("the model's weight bytes", static_cast<double>(model.weight_bytes)));
  CostModel c;
  c.tp = o.tp;
  c.kv_bytes_per_token = KvBytesPerToken(model, o.kv_dtype);
  RETURN_IF_ERROR(
      NeedPositive("the model's KV bytes per token", static_cast<double>(c.kv_bytes_per_token)));
  if (model.attention == AttentionKind::kMla) {
    c.kv_bytes_per_token_per_rank =
        o.mla_replicated ? c.kv_bytes_per_token : (c.kv_bytes_per_token + o.tp - 1) / o.tp;
  } else {
    // KV heads split across ranks; past kv_heads ranks they are replicated.
    const uint32_t split = std::max<uint32_t>(1, std::min(o.tp, model.kv_heads));
    c.kv_bytes_per_token_per_rank = (c.kv_bytes_per_token + split - 1) / split;
  }
  c.flops_per_token = 2.0 * static_cast<double>(model.active_params);
  const uint32_t qk = model.qk_head_dim ? model.qk_head_dim : model.head_dim;
  const uint32_t v = model.v_head_dim ? model.v_head_dim : model.head_dim;
  c.attention_flops_coef = 2.0 * model.kv_layers * model.attention_heads * (qk + v);
  const double gpus = static_cast<double>(o.tp);
  c.compute_flops_per_s = gpus * peak_tflops * 1e12 * o.prefill_mfu;
  c.attention_flops_per_s = gpus * peak_tflops * 1e12 * o.attention_efficiency;
  c.hbm_bytes_per_s = gpus * node.gpu.hbm_gbps * 1e9 * o.hbm_efficiency;
  c.weight_bytes = static_cast<double>(model.weight_bytes);
  const double total = static_cast<double>(model.total_params ? model.total_params
                                                              : model.active_params);
  c.active_weight_bytes = c.weight_bytes * static_cast<double>(model.active_params) / total;
  c.step_overhead_s = o.step_overhead_s;
  c.reload_bytes_per_s = node.gpu.h2d_gbps * 1e9 * o.link_efficiency;
  c.reload_latency_s = o.reload_latency_s;
  return c;
}

}  // namespace deltakv::kvsim
