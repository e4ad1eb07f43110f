// KV bytes per token, KV dtypes and Hugging Face config.json parsing (kvsim/model.h).
#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <string>

#include "kvsim/model.h"

namespace deltakv::kvsim {
namespace {

using nlohmann::json;

std::string Lower(std::string_view s) {
  std::string o(s);
  for (char& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

// A field of the config, looked up at the top level, then under text_config.
const json* Find(const json& root, const char* key) {
  if (root.contains(key) && !root[key].is_null()) return &root[key];
  if (root.contains("text_config") && root["text_config"].is_object()) {
    const json& t = root["text_config"];
    if (t.contains(key) && !t[key].is_null()) return &t[key];
  }
  return nullptr;
}

class Reader {
 public:
  Reader(const json& root, std::string_view file) : root_(root), file_(file) {}
  Status Error(const std::string& field, const std::string& what) const {
    return InvalidArgument(file_ + ": " + field + ": " + what);
  }
  // A positive integer field; 0 when absent and not required.
  StatusOr<uint64_t> Int(const char* key, bool required, uint64_t max = 1ull << 40) const {
    const json* v = Find(root_, key);
    if (v == nullptr) {
      if (required) return Error(key, "missing");
      return uint64_t{0};
    }
    if (!v->is_number_integer() || (!v->is_number_unsigned() && v->get<int64_t>() < 0)) {
      return Error(key, "expected an integer >= 0, got " + v->dump());
    }
    const uint64_t n = v->get<uint64_t>();
    if (n > max) return Error(key, v->dump() + " is implausibly large");
    return n;
  }
  const json* Get(const char* key) const { return Find(root_, key); }

 private:
  const json& root_;
  std::string file_;
};

uint64_t BytesPerParam(const json& root) {
  const json* q = Find(root, "quantization_config");
  if (q != nullptr && q->is_object()) {
    const std::string method = q->contains("quant_method") && (*q)["quant_method"].is_string()
                                   ? Lower((*q)["quant_method"].get<std::string>())
                                   : "";
    const std::string fmt = q->contains("fmt") && (*q)["fmt"].is_string()
                                ? Lower((*q)["fmt"].get<std::string>())
                                : "";
    if (method == "fp8" || fmt.find("e4m3") != std::string::npos) return 1;
    if (method.find("mxfp4") != std::string::npos || method.find("nvfp4") != std::string::npos) {
      return 0;  // half a byte: handled by the caller
    }
  }
  const json* d = Find(root, "torch_dtype");
  if (d == nullptr) d = Find(root, "dtype");
  if (d != nullptr && d->is_string()) {
    const std::string s = Lower(d->get<std::string>());
    if (s == "float32") return 4;
    if (s.find("float8") != std::string::npos) return 1;
  }
  return 2;
}

}  // namespace

std::string_view KvDtypeName(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kBf16: return "bf16";
    case KvDtype::kFp8: return "fp8";
    case KvDtype::kFp8DsMla: return "fp8_ds_mla";
    case KvDtype::kFp32: return "fp32";
  }
  return "?";
}

StatusOr<KvDtype> ParseKvDtype(std::string_view name) {
  const std::string s = Lower(name);
  if (s == "bf16" || s == "bfloat16" || s == "fp16" || s == "float16" || s == "half" ||
      s == "auto") {
    return KvDtype::kBf16;
  }
  if (s == "fp8" || s == "fp8_e4m3" || s == "fp8_e5m2" || s == "float8_e4m3fn") {
    return KvDtype::kFp8;
  }
  if (s == "fp8_ds_mla") return KvDtype::kFp8DsMla;
  if (s == "fp32" || s == "float32" || s == "float") return KvDtype::kFp32;
  return InvalidArgument("unknown KV dtype '" + std::string(name) +
                         "' (bf16, fp16, fp8, fp8_e4m3, fp8_e5m2, fp8_ds_mla, fp32)");
}

uint64_t KvBytesPerToken(const ModelSpec& m, KvDtype dtype) {
  if (m.attention == AttentionKind::kMla) {
    const uint64_t elems = uint64_t{m.kv_lora_rank} + m.qk_rope_head_dim;
    switch (dtype) {
      case KvDtype::kBf16: return m.kv_layers * elems * 2;
      case KvDtype::kFp8: return m.kv_layers * elems;
      // 512 fp8 latent bytes + 4 fp32 scales + 64 bf16 RoPE values per layer (vLLM).
      case KvDtype::kFp8DsMla: return m.kv_layers * (uint64_t{m.kv_lora_rank} + 16 +
                                                     2ull * m.qk_rope_head_dim);
      case KvDtype::kFp32: return m.kv_layers * elems * 4;
    }
  }
  const uint64_t elems = 2ull * m.kv_layers * m.kv_heads * m.head_dim;
  switch (dtype) {
    case KvDtype::kBf16: return elems * 2;
    case KvDtype::kFp8:
    case KvDtype::kFp8DsMla: return elems;
    case KvDtype::kFp32: return elems * 4;
  }
  return 0;
}

StatusOr<ModelSpec> ParseHfConfig(std::string_view text, std::string_view file) {
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {  // syntax, or a number too large to represent
    return InvalidArgument(std::string(file) + ": malformed JSON: " + e.what());
  }
  if (!root.is_object()) return InvalidArgument(std::string(file) + ": expected a JSON object");
  Reader r(root, file);
  ModelSpec m;
  m.source = std::string(file);
  if (const json* n = r.Get("_name_or_path"); n != nullptr && n->is_string()) {
    m.name = n->get<std::string>();
  } else if (const json* t = r.Get("model_type"); t != nullptr && t->is_string()) {
    m.name = t->get<std::string>();
  } else {
    m.name = std::string(file);
  }
  ASSIGN_OR_RETURN(uint64_t layers, r.Int("num_hidden_layers", true, 10000));
  ASSIGN_OR_RETURN(uint64_t hidden, r.Int("hidden_size", true));
  ASSIGN_OR_RETURN(uint64_t heads, r.Int("num_attention_heads", true, 100000));
  if (layers == 0 || hidden == 0 || heads == 0) {
    return r.Error("num_hidden_layers/hidden_size/num_attention_heads", "must be at least 1");
  }
  ASSIGN_OR_RETURN(uint64_t kv_heads, r.Int("num_key_value_heads", false, 100000));
  ASSIGN_OR_RETURN(uint64_t head_dim, r.Int("head_dim", false, 100000));
  ASSIGN_OR_RETURN(uint64_t kv_lora, r.Int("kv_lora_rank", false, 1u << 20));
  ASSIGN_OR_RETURN(uint64_t rope, r.Int("qk_rope_head_dim", false, 1u << 20));
  ASSIGN_OR_RETURN(uint64_t nope, r.Int("qk_nope_head_dim", false, 1u << 20));
  ASSIGN_OR_RETURN(uint64_t v_dim, r.Int("v_head_dim", false, 1u << 20));
  ASSIGN_OR_RETURN(uint64_t q_lora, r.Int("q_lora_rank", false, 1u << 20));
  ASSIGN_OR_RETURN(uint64_t vocab, r.Int("vocab_size", false));
  ASSIGN_OR_RETURN(uint64_t inter, r.Int("intermediate_size", false));
  ASSIGN_OR_RETURN(uint64_t moe_inter, r.Int("moe_intermediate_size", false));
  uint64_t experts = 0;
  for (const char* k : {"n_routed_experts", "num_experts", "num_local_experts"}) {
    ASSIGN_OR_RETURN(uint64_t e, r.Int(k, false, 1u << 20));
    if (e != 0) experts = e;
  }
  ASSIGN_OR_RETURN(uint64_t top_k, r.Int("num_experts_per_tok", false, 1u << 20));
  ASSIGN_OR_RETURN(uint64_t shared, r.Int("n_shared_experts", false, 1u << 20));
  ASSIGN_OR_RETURN(uint64_t first_dense, r.Int("first_k_dense_replace", false, 10000));
  m.layers = static_cast<uint32_t>(layers);
  m.attention_heads = static_cast<uint32_t>(heads);
  m.kv_layers = m.layers;
  // Hybrid models: only the full-attention layers keep per-token KV.
  const json* lac = r.Get("linear_attn_config");
  if (lac != nullptr && lac->is_object() && lac->contains("full_attn_layers")) {
    const json& full = (*lac)["full_attn_layers"];
    if (!full.is_array() || full.empty()) {
      return r.Error("linear_attn_config.full_attn_layers", "expected a non-empty array");
    }
    m.kv_layers = static_cast<uint32_t>(full.size());
    // Linear-attention state: heads x head_dim x head_dim fp32 per linear layer (an
    // estimate: the recurrent state of KDA / gated delta rule layers).
    uint64_t lh = heads, ld = 128;
    if (lac->contains("num_heads") && (*lac)["num_heads"].is_number_unsigned()) {
      lh = (*lac)["num_heads"].get<uint64_t>();
    }
    if (lac->contains("head_dim") && (*lac)["head_dim"].is_number_unsigned()) {
      ld = (*lac)["head_dim"].get<uint64_t>();
    }
    m.fixed_state_bytes = (layers - std::min<uint64_t>(layers, m.kv_layers)) * lh * ld * ld * 4;
  } else if (const json* lt = r.Get("layer_types"); lt != nullptr && lt->is_array()) {
    uint32_t full = 0;
    for (const json& t : *lt) full += t.is_string() && t.get<std::string>() == "full_attention";
    if (full > 0) m.kv_layers = full;
  }
  if (m.kv_layers > m.layers) {
    return r.Error("linear_attn_config.full_attn_layers", "more layers than num_hidden_layers");
  }
  uint64_t attn_params;
  if (kv_lora > 0) {
    if (rope == 0) return r.Error("qk_rope_head_dim", "missing (needed with kv_lora_rank)");
    m.attention = AttentionKind::kMla;
    m.kv_lora_rank = static_cast<uint32_t>(kv_lora);
    m.qk_rope_head_dim = static_cast<uint32_t>(rope);
    m.qk_head_dim = static_cast<uint32_t>(nope + rope);
    m.v_head_dim = static_cast<uint32_t>(v_dim ? v_dim : nope);
    const uint64_t q = q_lora ? hidden * q_lora + q_lora * heads * (nope + rope)
                              : hidden * heads * (nope + rope);
    attn_params = q + hidden * (kv_lora + rope) + kv_lora * heads * (nope + m.v_head_dim) +
                  heads * m.v_head_dim * hidden;
  } else {
    m.attention = AttentionKind::kMha;
    m.kv_heads = static_cast<uint32_t>(kv_heads ? kv_heads : heads);
    if (m.kv_heads > heads || heads % m.kv_heads != 0) {
      return r.Error("num_key_value_heads", std::to_string(m.kv_heads) + " does not divide " +
                                                std::to_string(heads) + " attention heads");
    }
    if (head_dim == 0) {
      if (hidden % heads != 0) {
        return r.Error("head_dim", "missing, and hidden_size is not a multiple of the heads");
      }
      head_dim = hidden / heads;
    }
    m.head_dim = static_cast<uint32_t>(head_dim);
    m.qk_head_dim = m.v_head_dim = m.head_dim;
    attn_params = hidden * heads * head_dim * 2 + hidden * m.kv_heads * head_dim * 2;
  }
  // Parameters: attention + MLP (dense, or MoE: routed + shared experts and the router) per
  // layer, plus input and output embeddings.
  const uint64_t dense_mlp = 3 * hidden * inter;
  const uint64_t expert = 3 * hidden * (moe_inter ? moe_inter : inter);
  uint64_t total = 0, active = 0;
  for (uint64_t l = 0; l < layers; ++l) {
    total += attn_params;
    active += attn_params;
    if (experts > 0 && l >= first_dense) {
      total += (experts + shared) * expert + hidden * experts;
      active += (std::max<uint64_t>(top_k, 1) + shared) * expert;
    } else {
      total += dense_mlp;
      active += dense_mlp;
    }
  }
  bool tied = false;
  if (const json* t = r.Get("tie_word_embeddings"); t != nullptr && t->is_boolean()) {
    tied = t->get<bool>();
  }
  const uint64_t emb = vocab * hidden * (tied ? 1 : 2);
  m.total_params = total + emb;
  m.active_params = active + emb;
  const uint64_t bpp = BytesPerParam(root);
  m.weight_bytes = bpp == 0 ? m.total_params / 2 + m.total_params / 32  // fp4 + block scales
                            : m.total_params * bpp;
  const json* d = r.Get("torch_dtype");
  if (d != nullptr && d->is_string() && Lower(d->get<std::string>()) == "float32") {
    m.default_kv_dtype = KvDtype::kFp32;
  }
  return m;
}

}  // namespace deltakv::kvsim
