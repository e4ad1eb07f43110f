// Tests of KV bytes per token, config.json parsing, presets and the capacity planner. Expected
// KV sizes are checked against figures others publish (cited per case).
#include "kvsim/model.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kvsim/capacity.h"
#include "kvsim/cost_model.h"
#include "kvtier/pool_layout.h"

namespace deltakv::kvsim {
namespace {

// Fields as in deepseek-ai/DeepSeek-V3 config.json.
const char* kDeepSeekV3 = R"({"architectures":["DeepseekV3ForCausalLM"],"model_type":"deepseek_v3",
"hidden_size":7168,"intermediate_size":18432,"moe_intermediate_size":2048,"num_hidden_layers":61,
"num_attention_heads":128,"num_key_value_heads":128,"n_routed_experts":256,"n_shared_experts":1,
"num_experts_per_tok":8,"first_k_dense_replace":3,"kv_lora_rank":512,"q_lora_rank":1536,
"qk_nope_head_dim":128,"qk_rope_head_dim":64,"v_head_dim":128,"vocab_size":129280,
"torch_dtype":"bfloat16","quantization_config":{"quant_method":"fp8","fmt":"e4m3"}})";

// Qwen/Qwen3-32B.
const char* kQwen3_32B = R"({"model_type":"qwen3","hidden_size":5120,"intermediate_size":25600,
"num_hidden_layers":64,"num_attention_heads":64,"num_key_value_heads":8,"head_dim":128,
"vocab_size":151936,"tie_word_embeddings":false,"torch_dtype":"bfloat16"})";

// meta-llama/Llama-3.1-70B (no head_dim field: hidden / heads = 128).
const char* kLlama70B = R"({"model_type":"llama","hidden_size":8192,"intermediate_size":28672,
"num_hidden_layers":80,"num_attention_heads":64,"num_key_value_heads":8,"vocab_size":128256,
"torch_dtype":"bfloat16"})";

// zai-org/GLM-4.5: head_dim 128 is explicit and differs from hidden / heads (5120 / 96).
const char* kGlm45 = R"({"model_type":"glm4_moe","hidden_size":5120,"intermediate_size":12288,
"moe_intermediate_size":1536,"num_hidden_layers":92,"num_attention_heads":96,
"num_key_value_heads":8,"head_dim":128,"n_routed_experts":160,"n_shared_experts":1,
"num_experts_per_tok":8,"first_k_dense_replace":3,"vocab_size":151552})";

// A Kimi-K3-like hybrid: 93 layers of which 24 are MLA, nested under text_config.
std::string KimiK3Like() {
  nlohmann::json full = nlohmann::json::array();
  for (int i = 0; i < 24; ++i) full.push_back(3 + 4 * i);
  nlohmann::json j = {{"model_type", "kimi_k3"},
                      {"text_config",
                       {{"hidden_size", 7168},
                        {"num_hidden_layers", 93},
                        {"num_attention_heads", 64},
                        {"kv_lora_rank", 512},
                        {"qk_rope_head_dim", 64},
                        {"qk_nope_head_dim", 128},
                        {"v_head_dim", 128},
                        {"linear_attn_config",
                         {{"full_attn_layers", full}, {"num_heads", 32}, {"head_dim", 128}}}}}};
  return j.dump();
}

ModelSpec Parse(const std::string& text) {
  auto m = ParseHfConfig(text, "config.json");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : ModelSpec{};
}

TEST(KvBytesPerToken, MatchesPublishedFigures) {
  const ModelSpec ds = Parse(kDeepSeekV3);
  EXPECT_EQ(ds.attention, AttentionKind::kMla);
  EXPECT_EQ(KvBytesPerToken(ds, KvDtype::kBf16), 70272u);  // 61 x 576 x 2
  EXPECT_EQ(KvBytesPerToken(ds, KvDtype::kFp8), 35136u);
  EXPECT_EQ(KvBytesPerToken(ds, KvDtype::kFp8DsMla), 61u * 656);  // vLLM fp8_ds_mla layout
  // LMCache's FAQ: Qwen3-32B 0.2441 GiB per 1k tokens = ~262,100 B/token.
  EXPECT_EQ(KvBytesPerToken(Parse(kQwen3_32B), KvDtype::kBf16), 262144u);
  // LMCache's FAQ: Llama-3.1-70B 0.3052 GiB per 1k tokens = ~327,700 B/token.
  EXPECT_EQ(KvBytesPerToken(Parse(kLlama70B), KvDtype::kBf16), 327680u);
  // GLM-4.5 with its explicit head_dim (a hidden/heads fallback would give 0.42x this).
  EXPECT_EQ(KvBytesPerToken(Parse(kGlm45), KvDtype::kBf16), 376832u);
  // Kimi-K3: only the 24 MLA layers grow (SGLang reports "only 26KB"/token); counting all 93
  // layers would be 3.9x too much.
  const ModelSpec k3 = Parse(KimiK3Like());
  EXPECT_EQ(k3.layers, 93u);
  EXPECT_EQ(k3.kv_layers, 24u);
  EXPECT_EQ(KvBytesPerToken(k3, KvDtype::kBf16), 27648u);
  EXPECT_EQ(KvBytesPerToken(k3, KvDtype::kFp8), 13824u);
  EXPECT_EQ(k3.fixed_state_bytes, 69ull * 32 * 128 * 128 * 4);
}

TEST(HfConfig, EstimatesParametersFromDimensions) {
  const ModelSpec ds = Parse(kDeepSeekV3);
  // Published: 671B total, 37B active.
  EXPECT_NEAR(ds.total_params / 1e9, 671, 671 * 0.02);
  EXPECT_NEAR(ds.active_params / 1e9, 37, 37 * 0.05);
  EXPECT_EQ(ds.weight_bytes, ds.total_params);  // fp8 checkpoint: one byte per parameter
  const ModelSpec q = Parse(kQwen3_32B);
  EXPECT_NEAR(q.total_params / 1e9, 32.8, 32.8 * 0.03);
  EXPECT_EQ(q.weight_bytes, q.total_params * 2);
  EXPECT_NEAR(Parse(kLlama70B).total_params / 1e9, 70.6, 70.6 * 0.02);
}

TEST(HfConfig, MalformedConfigsNameTheField) {
  auto err = [](const std::string& text, const std::string& needle) {
    auto m = ParseHfConfig(text, "cfg.json");
    ASSERT_FALSE(m.ok()) << text;
    EXPECT_NE(m.status().message().find(needle), std::string::npos) << m.status().message();
    EXPECT_NE(m.status().message().find("cfg.json"), std::string::npos);
  };
  err("{", "malformed JSON");
  err("[]", "expected a JSON object");
  err(R"({"hidden_size":10,"num_attention_heads":2})", "num_hidden_layers: missing");
  err(R"({"num_hidden_layers":"8","hidden_size":10,"num_attention_heads":2})",
      "num_hidden_layers: expected");
  err(R"({"num_hidden_layers":2,"hidden_size":10,"num_attention_heads":4})", "head_dim");
  err(R"({"num_hidden_layers":2,"hidden_size":64,"num_attention_heads":8,"num_key_value_heads":3})",
      "num_key_value_heads");
  err(R"({"num_hidden_layers":2,"hidden_size":64,"num_attention_heads":8,"kv_lora_rank":16})",
      "qk_rope_head_dim");
  err(R"({"num_hidden_layers":0,"hidden_size":64,"num_attention_heads":8})", "at least 1");
  err(R"({"num_hidden_layers":2,"hidden_size":64,"num_attention_heads":8,
          "linear_attn_config":{"full_attn_layers":[0,1,2]}})",
      "more layers");
}

// Found by hf_config_fuzz: a number too large for a double threw out of the parser.
TEST(HfConfig, RegressNumberOverflowIsAnError) {
  auto m = ParseHfConfig("{\"hidden_size\": 8" + std::string(400, '0') + "}", "big.json");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
}

TEST(KvDtype, NamesParse) {
  EXPECT_EQ(*ParseKvDtype("bfloat16"), KvDtype::kBf16);
  EXPECT_EQ(*ParseKvDtype("FP8_E4M3"), KvDtype::kFp8);
  EXPECT_EQ(*ParseKvDtype("fp8_ds_mla"), KvDtype::kFp8DsMla);
  EXPECT_FALSE(ParseKvDtype("int3").ok());
}

TEST(Presets, KnownAndUnknownNames) {
  for (const std::string& n : ModelPresetNames()) EXPECT_TRUE(ModelPreset(n).ok()) << n;
  for (const std::string& n : NodePresetNames()) EXPECT_TRUE(NodePreset(n).ok()) << n;
  EXPECT_EQ(KvBytesPerToken(*ModelPreset("Kimi-K2"), KvDtype::kBf16), 70272u);
  EXPECT_EQ(KvBytesPerToken(*ModelPreset("kimi-k3"), KvDtype::kBf16), 27648u);
  auto bad = ModelPreset("gpt-9");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("qwen3-32b"), std::string::npos);
}

constexpr double kGiB = 1024.0 * 1024 * 1024;

TEST(Capacity, CpuCheckpointCopyEatsTheHostBudget) {
  // An 8-GPU node with a 770 GB model: a CPU copy leaves ~275 GB of host memory for KV
  // instead of ~1.1 TB (explicit inputs, decimal GB).
  CapacityInputs in;
  in.model = *ModelPreset("deepseek-v3");
  in.model.weight_bytes = 770'000'000'000ull;
  in.node = *NodePreset("h200x8");
  in.host_ram_bytes = 1'110'000'000'000ull;
  in.host_reserve_bytes = 65'000'000'000ull;
  auto free = PlanCapacity(in);
  in.cpu_checkpoint_copy = true;
  auto copy = PlanCapacity(in);
  ASSERT_TRUE(free.ok() && copy.ok());
  EXPECT_EQ(free->host_kv_budget_bytes, 1'045'000'000'000ull);
  EXPECT_EQ(copy->host_kv_budget_bytes, free->host_kv_budget_bytes);
  EXPECT_EQ(copy->host_kv_budget_with_copy_bytes, 275'000'000'000ull);
  EXPECT_EQ(copy->host_kv_bytes, 275'000'000'000ull);
  EXPECT_LT(copy->host_kv_tokens * 3, free->host_kv_tokens);  // 275 of 1,045 GB
}

TEST(Capacity, GpuTokensSlotsAndFlags) {
  CapacityInputs in;
  in.model = *ModelPreset("llama-3.1-70b");
  in.node = *NodePreset("h200x8");
  in.tp = 8;
  in.gpu_memory_utilization = 0.9;
  in.gpu_reserve_bytes = 4ull << 30;
  auto p = PlanCapacity(in);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->kv_bytes_per_token_per_rank, 327680u / 8);  // 8 KV heads over 8 ranks
  const double left = 141e9 * 0.9 - 141.2e9 / 8 - 4 * kGiB;
  EXPECT_NEAR(static_cast<double>(p->gpu_kv_tokens), left / (327680 / 8), 2);
  EXPECT_EQ(p->block_bytes, 64u * 327680 / 8);
  // The pool really maps what the slots need, within the budget.
  EXPECT_GT(p->slots, 0u);
  EXPECT_LE(p->pool_segment_bytes, p->host_kv_bytes);
  EXPECT_GE(p->pool_segment_bytes, p->slots * p->block_bytes);
  EXPECT_EQ(p->host_kv_tokens, p->slots / 8 * 64);
  bool vllm = false, sidecar = false;
  for (const auto& f : p->flags) {
    vllm |= f.engine == "vllm" && f.setting.find("--kv-offloading-size") == 0;
    sidecar |= f.engine == "deltakv sidecar" &&
               f.setting.find("--kv-capacity-slots " + std::to_string(p->slots)) !=
                   std::string::npos;
  }
  EXPECT_TRUE(vllm);
  EXPECT_TRUE(sidecar);
  auto j = nlohmann::json::parse(CapacityPlanJson(*p));
  EXPECT_EQ(j["pool"]["slots"], p->slots);
  EXPECT_EQ(j["gpu_kv_tokens_per_replica"], p->gpu_kv_tokens);
}

TEST(Capacity, MlaReplicationAndSpanningNodes) {
  CapacityInputs in;
  in.model = *ModelPreset("kimi-k3");
  in.node = *NodePreset("gb300x4");
  auto p = PlanCapacity(in);  // tp 0: the fewest nodes that hold 1.7 TB
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->tp, 8u);
  EXPECT_EQ(p->nodes_per_replica, 2u);
  EXPECT_EQ(p->kv_bytes_per_token_per_rank, 27648u);  // replicated on every rank
  in.mla_replicated = false;
  auto dcp = PlanCapacity(in);
  EXPECT_EQ(dcp->kv_bytes_per_token_per_rank, 27648u / 8);
  EXPECT_NEAR(static_cast<double>(dcp->gpu_kv_tokens) / p->gpu_kv_tokens, 8, 0.01);
  // A CPU copy of half the checkpoint per node leaves ~no host budget on a 960 GB tray.
  in.mla_replicated = true;
  in.cpu_checkpoint_copy = true;
  auto copy = PlanCapacity(in);
  EXPECT_LT(copy->host_kv_bytes, p->host_kv_bytes / 5);
}

TEST(Capacity, WarningsBeforeTheOomKiller) {
  CapacityInputs in;
  in.model = *ModelPreset("qwen3-32b");
  in.node = *NodePreset("h200x8");
  in.tp = 1;
  in.container_limit_bytes = 200ull << 30;
  in.shm_bytes = 64ull << 30;
  auto p = PlanCapacity(in);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->replicas_per_node, 8u);
  EXPECT_LE(p->host_limit_bytes, 200ull << 30);
  bool shm = false;
  for (const auto& w : p->warnings) shm |= w.find("/dev/shm") != std::string::npos;
  EXPECT_TRUE(shm);
  in.tp = 3;
  EXPECT_FALSE(PlanCapacity(in).ok());
  in.tp = 1;
  in.model.weight_bytes = 2000ull << 30;  // does not fit
  auto big = PlanCapacity(in);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->gpu_kv_tokens, 0u);
  EXPECT_FALSE(big->warnings.empty());
}

// The setting of one engine in a plan ("" when absent).
std::string Setting(const CapacityPlan& p, const std::string& engine) {
  for (const auto& f : p.flags) {
    if (f.engine == engine) return f.setting;
  }
  return "";
}

bool Warns(const CapacityPlan& p, const std::string& needle) {
  for (const auto& w : p.warnings) {
    if (w.find(needle) != std::string::npos) return true;
  }
  return false;
}

// SGLang's --hicache-size was rounded to the nearest GB: 1.61 GB per rank became 2, 8 GB on
// four ranks against a 6.44 GB budget.
TEST(Capacity, RegressSglangHicacheSizeIsRoundedDown) {
  CapacityInputs in;
  in.model = *ModelPreset("kimi-k3");
  in.node = *NodePreset("gb300x4");
  in.host_ram_bytes = 70ull << 30;
  auto p = PlanCapacity(in);
  ASSERT_TRUE(p.ok());
  const uint64_t rank_bytes = p->host_kv_tokens * p->kv_bytes_per_token_per_rank;
  EXPECT_EQ(rank_bytes / 1'000'000'000, 1u);  // 1.61 GB
  EXPECT_EQ(Setting(*p, "sglang"), "--hicache-size 1");
  EXPECT_FALSE(Warns(*p, "SGLang"));
  // Under 1 GB per rank: 0, which SGLang reads as "the ratio decides"; the plan says so.
  in.host_ram_bytes = 66ull << 30;
  p = PlanCapacity(in);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(Setting(*p, "sglang"), "--hicache-size 0");
  EXPECT_TRUE(Warns(*p, "--hicache-size 0"));
}

// vLLM pins each per-rank tensor rounded up to a power of two: the plan's setting must pin
// no more than the node's host budget once rounded.
TEST(Capacity, RegressVllmSettingPinsWithinTheBudget) {
  struct Case {
    const char* model;
    const char* node;
    uint64_t ram_gib;  // 0: the node's
  };
  for (const Case& c : {Case{"kimi-k3", "gb300x4", 0}, Case{"qwen3-32b", "h200x8", 0},
                        Case{"llama-3.1-70b", "h200x8", 1000}, Case{"deepseek-v3", "b200x8", 0}}) {
    SCOPED_TRACE(std::string(c.model) + " on " + c.node);
    CapacityInputs in;
    in.model = *ModelPreset(c.model);
    in.node = *NodePreset(c.node);
    if (c.ram_gib) in.host_ram_bytes = c.ram_gib << 30;
    auto p = PlanCapacity(in);
    ASSERT_TRUE(p.ok());
    const std::string s = Setting(*p, "vllm");
    ASSERT_EQ(s.rfind("--kv-offloading-size ", 0), 0u) << s;
    const uint64_t size = std::stoull(s.substr(21));
    const uint64_t tensors =
        uint64_t{in.model.kv_layers} * (in.model.attention == AttentionKind::kMla ? 1 : 2);
    auto pinned_per_node = [&](uint64_t gib) {
      uint64_t t = 1;
      while (t < (gib << 30) / (p->tp * tensors)) t <<= 1;
      return t * tensors * p->ranks_per_node * p->replicas_per_node;
    };
    ASSERT_GT(size, 0u);
    EXPECT_LE(pinned_per_node(size), p->host_kv_bytes);
    // The largest such size up to the pool's share: one GiB more pins over the budget.
    const uint64_t pool_gib =
        p->slots / (p->ranks_per_node * p->replicas_per_node) * p->block_bytes * p->tp >> 30;
    EXPECT_LE(size, pool_gib);
    if (size < pool_gib) {
      EXPECT_GT(pinned_per_node(size + 1), p->host_kv_bytes);
    }
    EXPECT_FALSE(Warns(*p, "vLLM"));
  }
  // The default plan of the report: 1,659 GiB would pin 3,072 (1,536 per tray, 894 GiB each).
  CapacityInputs in;
  in.model = *ModelPreset("kimi-k3");
  in.node = *NodePreset("gb300x4");
  auto p = PlanCapacity(in);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(Setting(*p, "vllm"), "--kv-offloading-size 1536");
  // A budget under one rounded GiB: no size fits, and the plan warns.
  in.host_ram_bytes = (64ull << 30) + (100ull << 20);
  p = PlanCapacity(in);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(Setting(*p, "vllm"), "--kv-offloading-size 0");
  EXPECT_FALSE(Warns(*p, "vLLM"));  // the pool itself is under one GiB: nothing was asked
  in.host_ram_bytes = (64ull << 30) + (600ull << 20);
  p = PlanCapacity(in);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(Warns(*p, "vLLM: no whole GiB")) << Setting(*p, "vllm");
}

// --gpu-kv-tokens reached the replays but not the plan's own GPU figures and SGLang's ratio.
TEST(Capacity, RegressGivenGpuKvTokensAreThePlans) {
  CapacityInputs in;
  in.model = *ModelPreset("qwen3-32b");
  in.node = *NodePreset("h200x8");
  auto computed = PlanCapacity(in);
  in.gpu_kv_tokens = 1000;
  auto p = PlanCapacity(in);
  ASSERT_TRUE(p.ok() && computed.ok());
  EXPECT_FALSE(computed->gpu_kv_tokens_given);
  EXPECT_NE(computed->gpu_kv_tokens, 1000u);
  EXPECT_EQ(p->gpu_kv_tokens, 1000u);
  EXPECT_TRUE(p->gpu_kv_tokens_given);
  EXPECT_EQ(p->gpu_kv_bytes_per_gpu, 1000 * p->kv_bytes_per_token_per_rank);
  const uint64_t rank_bytes = p->host_kv_tokens * p->kv_bytes_per_token_per_rank;
  const double ratio = std::floor(100.0 * rank_bytes / p->gpu_kv_bytes_per_gpu) / 100;
  char want[64];
  std::snprintf(want, sizeof want, "or --hicache-ratio %.2f ", ratio);
  std::string note;
  for (const auto& f : p->flags) {
    if (f.engine == "sglang") note = f.note;
  }
  EXPECT_EQ(note.rfind(want, 0), 0u) << note;
  auto j = nlohmann::json::parse(CapacityPlanJson(*p));
  EXPECT_EQ(j["gpu_kv_tokens_per_replica"], 1000u);
  EXPECT_EQ(j["gpu_kv_tokens_given"], true);
  EXPECT_EQ(nlohmann::json::parse(CapacityPlanJson(*computed))["gpu_kv_tokens_given"], false);
}

// 0 bytes of host RAM meant "the node's".
TEST(Capacity, RegressZeroHostRamIsHonoured) {
  CapacityInputs in;
  in.model = *ModelPreset("qwen3-32b");
  in.node = *NodePreset("h200x8");
  in.host_ram_bytes = 0;
  auto p = PlanCapacity(in);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->host_ram_bytes, 0u);
  EXPECT_EQ(p->host_kv_budget_bytes, 0u);
  EXPECT_EQ(p->slots, 0u);
  EXPECT_TRUE(Warns(*p, "leaves no host memory"));
  in.host_ram_bytes.reset();
  EXPECT_EQ(PlanCapacity(in)->host_ram_bytes, in.node.host_ram_bytes);
  in.node.host_ram_bytes = 0;  // a node whose RAM nobody knows
  EXPECT_FALSE(PlanCapacity(in).ok());
}

// A budget over the 4 PiB one pool segment maps gave a pool of 0 slots, without a warning.
TEST(Capacity, RegressHugeBudgetCapsThePool) {
  CapacityInputs in;
  in.model = *ModelPreset("kimi-k3");
  in.node = *NodePreset("gb300x4");
  in.host_ram_bytes = 5'000'000ull << 30;
  auto p = PlanCapacity(in);
  ASSERT_TRUE(p.ok());
  EXPECT_GT(p->slots, 0u);
  EXPECT_GT(p->pool_segment_bytes, 4000000ull << 30);
  EXPECT_LE(p->pool_segment_bytes, 1ull << 52);
  auto g = kvtier::ComputeGeometry(p->block_bytes, p->slots, 256ull << 20);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->total_size, p->pool_segment_bytes);
  EXPECT_FALSE(kvtier::ComputeGeometry(p->block_bytes, p->slots + 1, 256ull << 20).ok());
  EXPECT_TRUE(Warns(*p, "more than one pool can map"));
  EXPECT_NE(Setting(*p, "deltakv sidecar").find(std::to_string(p->slots)), std::string::npos);
  in.host_ram_bytes = 2000ull << 30;  // an ordinary budget: no such warning
  EXPECT_FALSE(Warns(*PlanCapacity(in), "pool can map"));
}

TEST(CostModel, RooflineFromPresets) {
  CostModelOptions o;
  o.tp = 8;
  auto c = DeriveCostModel(*ModelPreset("llama-3.1-70b"), *NodePreset("h200x8"), o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  // Prefill of 8k tokens is compute-bound: 2 * 70.6e9 * 8192 / (8 * 989e12 * 0.45).
  const double t = c->StepSeconds(8192, 0, 0, 0) - o.step_overhead_s;
  EXPECT_NEAR(t, 2 * 70.6e9 * 8192 / (8 * 989e12 * 0.45), 1e-6);
  // One decode step of one request reads the weights: memory-bound.
  const double d = c->StepSeconds(0, 0, 1, 1000) - o.step_overhead_s;
  EXPECT_NEAR(d, (141.2e9 + 1000.0 * 327680) / (8 * 4800e9 * 0.7), 1e-6);
  EXPECT_GT(c->ChunkAttentionFlops(100000, 1000), c->ChunkAttentionFlops(0, 1000));
  EXPECT_NEAR(c->ReloadSeconds(1000), o.reload_latency_s + 1000.0 * 327680 / 8 / 50e9, 1e-9);
  o.tp = 0;
  EXPECT_FALSE(DeriveCostModel(*ModelPreset("llama-3.1-70b"), *NodePreset("h200x8"), o).ok());
  o.tp = 8;
  o.prefill_mfu = 1.5;
  EXPECT_FALSE(DeriveCostModel(*ModelPreset("llama-3.1-70b"), *NodePreset("h200x8"), o).ok());
}

}  // namespace
}  // namespace deltakv::kvsim
