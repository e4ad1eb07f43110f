// Model and hardware descriptions for capacity planning and replay: what a token of KV cache
// costs, what a GPU node holds, and the presets (docs/CAPACITY.md gives every number's source).
//
// A ModelSpec comes from a Hugging Face config.json (ParseHfConfig) or a preset. KV bytes per
// token follow the attention kind:
//   MHA/GQA: 2 * kv_layers * num_key_value_heads * head_dim * dtype bytes
//   MLA:     kv_layers * (kv_lora_rank + qk_rope_head_dim) * dtype bytes (no 2x, no heads)
// where kv_layers counts only the layers that keep per-token KV (all of them, or a hybrid
// model's full-attention layers; its other layers keep fixed_state_bytes per request).
//
// Thread-safety: value types; the functions are stateless.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace deltakv::kvsim {

enum class AttentionKind : uint8_t { kMha, kMla };  // kMha covers GQA and MQA

enum class KvDtype : uint8_t {
  kBf16,       // 2 bytes (also fp16)
  kFp8,        // 1 byte
  kFp8DsMla,   // vLLM fp8_ds_mla: 656 bytes per MLA layer (512 fp8 + 4 fp32 scales + 64 bf16)
  kFp32,       // 4 bytes
};
std::string_view KvDtypeName(KvDtype dtype);
// "bf16", "bfloat16", "fp16", "float16", "auto" -> kBf16; "fp8", "fp8_e4m3", "fp8_e5m2" ->
// kFp8; "fp8_ds_mla"; "fp32", "float32". InvalidArgument otherwise.
StatusOr<KvDtype> ParseKvDtype(std::string_view name);

struct ModelSpec {
  std::string name;
  AttentionKind attention = AttentionKind::kMha;
  uint32_t layers = 0;     // num_hidden_layers
  uint32_t kv_layers = 0;  // layers that keep per-token KV (== layers unless hybrid)
  uint32_t attention_heads = 0;
  uint32_t kv_heads = 0;  // MHA/GQA
  uint32_t head_dim = 0;  // MHA/GQA
  uint32_t kv_lora_rank = 0;       // MLA
  uint32_t qk_rope_head_dim = 0;   // MLA
  uint32_t qk_head_dim = 0;  // per-head query/key width of prefill attention (MLA: nope + rope)
  uint32_t v_head_dim = 0;   // per-head value width
  uint64_t total_params = 0;
  uint64_t active_params = 0;  // per token (MoE: the routed experts + shared parts)
  uint64_t weight_bytes = 0;   // bytes of the served checkpoint (all ranks together)
  uint64_t fixed_state_bytes = 0;  // per request, independent of length (hybrid linear layers)
  KvDtype default_kv_dtype = KvDtype::kBf16;
  std::string source;  // where the numbers come from (a preset's citation, or the file)
};

// Bytes of KV cache one token costs in one full copy of the model's cache.
uint64_t KvBytesPerToken(const ModelSpec& model, KvDtype dtype);

// Parses a Hugging Face config.json (fields nested under "text_config" are found too). Reads
// num_hidden_layers, num_attention_heads, num_key_value_heads (default: attention heads),
// head_dim (default hidden_size / num_attention_heads), kv_lora_rank + qk_rope_head_dim (MLA),
// qk_nope_head_dim, v_head_dim, a hybrid model's full-attention layer list, torch_dtype, and
// estimates total/active parameters from the dimensions when the file does not give them.
// InvalidArgument naming `file` and the field for missing or inconsistent fields.
StatusOr<ModelSpec> ParseHfConfig(std::string_view json_text, std::string_view file);

struct GpuSpec {
  std::string name;
  uint64_t memory_bytes = 0;       // HBM per GPU
  double hbm_gbps = 0;             // HBM bandwidth per GPU, 1e9 B/s
  double dense_bf16_tflops = 0;    // dense (not sparse) peak per GPU
  double dense_fp8_tflops = 0;
  double h2d_gbps = 0;             // achieved host -> device copy bandwidth per GPU
  double d2h_gbps = 0;
  std::string source;
};

struct NodeSpec {
  std::string name;
  GpuSpec gpu;
  uint32_t gpus = 0;           // per node
  uint64_t host_ram_bytes = 0; // per node
  std::string source;
};

// Presets. Names (case-insensitive): models "deepseek-v3", "kimi-k2", "kimi-k3", "qwen3-32b",
// "llama-3.1-70b"; nodes "h200x8", "b200x8", "gb200x4" and "gb300x4" (one GB200 / GB300 NVL72
// compute tray: 4 GPUs, 2 Grace CPUs). NotFound listing the known names otherwise.
StatusOr<ModelSpec> ModelPreset(std::string_view name);
StatusOr<NodeSpec> NodePreset(std::string_view name);
std::vector<std::string> ModelPresetNames();
std::vector<std::string> NodePresetNames();

}  // namespace deltakv::kvsim
