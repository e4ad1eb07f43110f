// Model and node presets (kvsim/model.h). docs/CAPACITY.md lists every number's source; the
// `source` strings repeat them briefly.
#include <algorithm>
#include <cctype>
#include <string>

#include "kvsim/model.h"

namespace deltakv::kvsim {
namespace {

constexpr uint64_t kG = 1000ull * 1000 * 1000;

ModelSpec Mla(std::string name, uint32_t layers, uint32_t kv_layers, uint32_t heads,
              uint64_t total, uint64_t active, uint64_t weight_bytes, std::string source) {
  ModelSpec m;
  m.name = std::move(name);
  m.attention = AttentionKind::kMla;
  m.layers = layers;
  m.kv_layers = kv_layers;
  m.attention_heads = heads;
  m.kv_lora_rank = 512;
  m.qk_rope_head_dim = 64;
  m.qk_head_dim = 192;  // 128 nope + 64 rope
  m.v_head_dim = 128;
  m.total_params = total;
  m.active_params = active;
  m.weight_bytes = weight_bytes;
  m.source = std::move(source);
  return m;
}

ModelSpec Gqa(std::string name, uint32_t layers, uint32_t heads, uint32_t kv_heads,
              uint64_t params, std::string source) {
  ModelSpec m;
  m.name = std::move(name);
  m.layers = m.kv_layers = layers;
  m.attention_heads = heads;
  m.kv_heads = kv_heads;
  m.head_dim = m.qk_head_dim = m.v_head_dim = 128;
  m.total_params = m.active_params = params;
  m.weight_bytes = params * 2;  // bf16
  m.source = std::move(source);
  return m;
}

std::vector<ModelSpec> Models() {
  std::vector<ModelSpec> v;
  v.push_back(Mla("deepseek-v3", 61, 61, 128, 671 * kG, 37 * kG, 689 * kG,
                  "deepseek-ai/DeepSeek-V3 config.json and model card (671B total, 37B active, "
                  "FP8 checkpoint)"));
  v.push_back(Mla("kimi-k2", 61, 61, 64, 1040 * kG, 32 * kG, 1030 * kG,
                  "moonshotai/Kimi-K2-Instruct config.json and model card (1.04T total, 32B "
                  "active, block-FP8 checkpoint)"));
  ModelSpec k3 = Mla("kimi-k3", 93, 24, 64, 2800 * kG, 64 * kG, 1700 * kG,
                     "hybrid: 24 MLA of 93 layers (text_config.linear_attn_config); 1.7 TB "
                     "MXFP4 checkpoint; active parameters estimated");
  // 69 linear-attention layers, 32 heads x 128 x 128 fp32 state each (an estimate).
  k3.fixed_state_bytes = 69ull * 32 * 128 * 128 * 4;
  v.push_back(k3);
  v.push_back(Gqa("qwen3-32b", 64, 64, 8, 32800000000ull,
                  "Qwen/Qwen3-32B config.json (64 layers, 8 KV heads, head_dim 128; 32.8B)"));
  v.push_back(Gqa("llama-3.1-70b", 80, 64, 8, 70600000000ull,
                  "meta-llama/Llama-3.1-70B config.json (80 layers, 8 KV heads; 70.6B)"));
  return v;
}

std::vector<NodeSpec> Nodes() {
  std::vector<NodeSpec> v;
  {
    NodeSpec n;
    n.name = "h200x8";
    n.gpu = {"H200 SXM", 141 * kG, 4800, 989, 1979, 50, 50,
             "NVIDIA H200 datasheet (141 GB HBM3e, 4.8 TB/s, 989 TFLOPS dense BF16); host link "
             "PCIe Gen5 x16, ~50 GB/s achieved per direction as measured on H100"};
    n.gpus = 8;
    n.host_ram_bytes = 2048 * kG;
    n.source = "NVIDIA DGX H200 datasheet (8 GPUs, 2 TB system memory)";
    v.push_back(n);
  }
  {
    NodeSpec n;
    n.name = "b200x8";
    n.gpu = {"B200", 180 * kG, 8000, 2250, 4500, 50, 50,
             "NVIDIA DGX B200 datasheet (1,440 GB HBM3e over 8 GPUs, 64 TB/s, 72 PF FP8 "
             "training = 4.5 PF dense FP8 per GPU); host link PCIe Gen5 x16 as H200"};
    n.gpus = 8;
    n.host_ram_bytes = 2048 * kG;
    n.source = "NVIDIA DGX B200 datasheet (8 GPUs, 2 TB system memory, up to 4 TB)";
    v.push_back(n);
  }
  {
    NodeSpec n;
    n.name = "gb200x4";
    n.gpu = {"GB200 (Blackwell)", 186 * kG, 8000, 2500, 5000, 300, 300,
             "NVIDIA GB200 NVL72 spec (13.4 TB HBM3e / 72 GPUs, 8 TB/s, 180 PF dense BF16 / 72); "
             "NVLink-C2C 450 GB/s per direction, ~300 GB/s assumed achieved (GH200 measured "
             "346 GB/s host-to-device)"};
    n.gpus = 4;
    n.host_ram_bytes = 960 * kG;
    n.source = "one GB200 NVL72 compute tray: 4 GPUs, 2 Grace CPUs with 480 GB LPDDR5X each";
    v.push_back(n);
  }
  {
    NodeSpec n;
    n.name = "gb300x4";
    n.gpu = {"GB300 (Blackwell Ultra)", 288 * kG, 8000, 2500, 5000, 300, 300,
             "NVIDIA GB300 NVL72 spec (288 GB HBM3e per GPU, 8 TB/s); dense BF16/FP8 as GB200 "
             "(an assumption: Blackwell Ultra raises FP4, not BF16); host link as GB200"};
    n.gpus = 4;
    n.host_ram_bytes = 960 * kG;
    n.source = "one GB300 NVL72 compute tray: 4 GPUs, 2 Grace CPUs with LPDDR5X (~480 GB each)";
    v.push_back(n);
  }
  return v;
}

std::string Lower(std::string_view s) {
  std::string o(s);
  for (char& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

template <typename T>
std::string Names(const std::vector<T>& v) {
  std::string s;
  for (const T& x : v) s += (s.empty() ? "" : ", ") + x.name;
  return s;
}

}  // namespace

StatusOr<ModelSpec> ModelPreset(std::string_view name) {
  const std::string n = Lower(name);
  for (const ModelSpec& m : Models()) {
    if (m.name == n) return m;
  }
  return NotFound("no model preset '" + std::string(name) + "' (known: " + Names(Models()) + ")");
}

StatusOr<NodeSpec> NodePreset(std::string_view name) {
  const std::string n = Lower(name);
  for (const NodeSpec& x : Nodes()) {
    if (x.name == n) return x;
  }
  return NotFound("no node preset '" + std::string(name) + "' (known: " + Names(Nodes()) + ")");
}

std::vector<std::string> ModelPresetNames() {
  std::vector<std::string> v;
  for (const ModelSpec& m : Models()) v.push_back(m.name);
  return v;
}

std::vector<std::string> NodePresetNames() {
  std::vector<std::string> v;
  for (const NodeSpec& n : Nodes()) v.push_back(n.name);
  return v;
}

}  // namespace deltakv::kvsim
