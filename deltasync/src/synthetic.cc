#include "deltasync/synthetic.h"

#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "base/mapped_file.h"
#include "base/parallel.h"
#include "deltasync/checkpoint.h"
#include "output_layout.h"

namespace deltakv::deltasync {

namespace {

// splitmix64: small, fast, good enough for synthetic weights.
struct Rng {
  uint64_t s;
  uint64_t Next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
};

uint64_t NumElements(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

// Header for a layout, in the given order; "step" goes into __metadata__ when set.
StatusOr<std::string> LayoutHeader(const std::vector<SyntheticTensor>& tensors,
                                   const std::string& step) {
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
  if (!step.empty()) metadata["step"] = step;
  return BuildSafetensorsLayoutHeader(tensors, metadata);
}

// bf16 weights ~ N(0, 0.02): sign, exponent near 2^-6, random mantissa.
void FillWeights(DType dtype, std::span<uint8_t> out, Rng& rng) {
  size_t esz = DTypeSize(dtype);
  size_t n = out.size() / esz;
  for (size_t i = 0; i < n; ++i) {
    uint64_t r = rng.Next();
    float f = static_cast<float>((static_cast<double>(r & 0xFFFFFF) / 0xFFFFFF - 0.5) * 0.08);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    switch (dtype) {
      case DType::kBF16: {
        uint16_t v = static_cast<uint16_t>(bits >> 16);
        std::memcpy(out.data() + 2 * i, &v, 2);
        break;
      }
      case DType::kF32:
        std::memcpy(out.data() + 4 * i, &bits, 4);
        break;
      default:
        for (size_t b = 0; b < esz; ++b) out[i * esz + b] = static_cast<uint8_t>(r >> (8 * b));
    }
  }
}

Status WriteFile(const std::string& path, const std::string& header, uint64_t data_size,
                 const std::function<void(std::span<uint8_t>)>& fill) {
  ASSIGN_OR_RETURN(MappedOutputFile f,
                   MappedOutputFile::Create(path, 8 + header.size() + data_size));
  WriteSafetensorsPrefix(header, f.bytes());
  fill(f.bytes().subspan(8 + header.size()));
  return f.Commit();
}

}  // namespace

std::vector<SyntheticFile> ModelLikeLayout(uint64_t total_bytes, unsigned files, unsigned experts) {
  if (files == 0) files = 1;
  // hidden h, intermediate 4h (gate, up, down), attention q,k,v,o: 4h^2 + 12h^2 = 16h^2 per layer
  // in bf16 = 32h^2 bytes; pick h and layer count so that the total lands near total_bytes.
  // Pick the hidden size so there are at least 8 layers, then round the layer count to the
  // nearest whole number, so the total lands near total_bytes.
  uint64_t hidden = 256;
  while (32 * (hidden * 2) * (hidden * 2) * 8 <= total_bytes && hidden < 8192) hidden *= 2;
  uint64_t per_layer = 32 * hidden * hidden;
  uint64_t embed = hidden * 1024 * 2;
  uint64_t layers =
      total_bytes > embed ? std::max<uint64_t>(1, (total_bytes - embed + per_layer / 2) / per_layer)
                          : 1;
  std::vector<SyntheticTensor> all;
  all.push_back({"model.embed_tokens.weight", DType::kBF16, {1024, hidden}});
  for (uint64_t l = 0; l < layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    all.push_back({p + "input_layernorm.weight", DType::kF32, {hidden}});
    all.push_back({p + "self_attn.q_proj.weight", DType::kBF16, {hidden, hidden}});
    all.push_back({p + "self_attn.k_proj.weight", DType::kBF16, {hidden, hidden}});
    all.push_back({p + "self_attn.v_proj.weight", DType::kBF16, {hidden, hidden}});
    all.push_back({p + "self_attn.o_proj.weight", DType::kBF16, {hidden, hidden}});
    all.push_back({p + "post_attention_layernorm.weight", DType::kF32, {hidden}});
    if (experts > 0) {
      const uint64_t e = experts;
      const uint64_t inter = std::max<uint64_t>(64, 4 * hidden / e / 64 * 64);
      all.push_back({p + "mlp.gate.weight", DType::kBF16, {e, hidden}});
      all.push_back({p + "mlp.experts.w13_weight", DType::kBF16, {e, 2 * inter, hidden}});
      all.push_back({p + "mlp.experts.w2_weight", DType::kBF16, {e, hidden, inter}});
      continue;
    }
    all.push_back({p + "mlp.gate_proj.weight", DType::kBF16, {4 * hidden, hidden}});
    all.push_back({p + "mlp.up_proj.weight", DType::kBF16, {4 * hidden, hidden}});
    all.push_back({p + "mlp.down_proj.weight", DType::kBF16, {hidden, 4 * hidden}});
  }
  all.push_back({"model.norm.weight", DType::kF32, {hidden}});
  all.push_back({"model.quant_codes", DType::kU8, {hidden, 16}});
  all.push_back({"model.unused_adapter", DType::kBF16, {0, hidden}});
  std::vector<SyntheticFile> out(files);
  size_t per_file = (all.size() + files - 1) / files;
  for (unsigned f = 0; f < files; ++f) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05u-of-%05u.safetensors", f + 1, files);
    out[f].name = name;
    for (size_t i = f * per_file; i < std::min(all.size(), (f + 1) * per_file); ++i) {
      out[f].tensors.push_back(all[i]);
    }
  }
  return out;
}

Status GenerateCheckpoint(const std::string& dir, const std::vector<SyntheticFile>& layout,
                          uint64_t seed) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError("create directory '" + dir + "': " + ec.message());
  for (size_t fi = 0; fi < layout.size(); ++fi) {
    const SyntheticFile& f = layout[fi];
    ASSIGN_OR_RETURN(std::string header, LayoutHeader(f.tensors, ""));
    uint64_t data = 0;
    for (const SyntheticTensor& t : f.tensors) data += NumElements(t.shape) * DTypeSize(t.dtype);
    RETURN_IF_ERROR(WriteFile(dir + "/" + f.name, header, data, [&](std::span<uint8_t> d) {
      uint64_t off = 0;
      for (size_t ti = 0; ti < f.tensors.size(); ++ti) {
        const SyntheticTensor& t = f.tensors[ti];
        uint64_t bytes = NumElements(t.shape) * DTypeSize(t.dtype);
        Rng rng{seed * 0x100000001B3ull + fi * 7919 + ti};
        FillWeights(t.dtype, d.subspan(off, bytes), rng);
        off += bytes;
      }
    }));
  }
  return Status::Ok();
}

StatusOr<MutationStats> MutateCheckpoint(const std::string& parent_dir, const std::string& out_dir,
                                         const MutationOptions& opt) {
  if (!(opt.density >= 0 && opt.density <= 1)) {
    return InvalidArgument("density must be in [0, 1]");
  }
  if (!(opt.tensor_fraction > 0 && opt.tensor_fraction <= 1)) {
    return InvalidArgument("tensor fraction must be in (0, 1]");
  }
  // FNV-1a of the name mixed with the seed, as a fraction in [0, 1).
  auto picked = [&](const std::string& name) {
    if (opt.tensor_fraction >= 1) return true;
    uint64_t h = 0xcbf29ce484222325ull ^ (opt.seed * 0x9e3779b97f4a7c15ull);
    for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
    h ^= h >> 29;
    return static_cast<double>(h >> 11) * 0x1.0p-53 < opt.tensor_fraction;
  };
  ASSIGN_OR_RETURN(Checkpoint parent, Checkpoint::Open(parent_dir, MappedFile::Shrink::kReadZeros));
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return IoError("create directory '" + out_dir + "': " + ec.message());
  MutationStats stats;
  Rng rng{opt.seed};
  // Geometric gaps between changed elements: O(changes) random draws, not O(elements).
  const double log_q = opt.density < 1 ? std::log1p(-opt.density) : 0;
  auto next_gap = [&]() -> uint64_t {
    if (opt.density >= 1) return 0;
    if (opt.density <= 0) return UINT64_MAX;
    double g = std::floor(std::log(1.0 - rng.Uniform()) / log_q);
    return g > 1e18 ? UINT64_MAX : static_cast<uint64_t>(g);
  };
  for (size_t fi = 0; fi < parent.files().size(); ++fi) {
    const SafetensorsFile& pf = parent.files()[fi];
    std::vector<SyntheticTensor> tensors;
    for (const TensorInfo& t : pf.header().tensors) tensors.push_back({t.name, t.dtype, t.shape});
    std::string header = pf.header().raw;
    if (!opt.step_metadata.empty()) {
      ASSIGN_OR_RETURN(header, LayoutHeader(tensors, opt.step_metadata));
    }
    RETURN_IF_ERROR(WriteFile(out_dir + "/" + parent.file_names()[fi], header,
                              pf.header().data_size, [&](std::span<uint8_t> d) {
                                uint64_t off = 0;
                                for (const TensorInfo& t : pf.header().tensors) {
                                  std::span<const uint8_t> src = pf.TensorBytes(t);
                                  std::memcpy(d.data() + off, src.data(), src.size());
                                  const size_t esz = DTypeSize(t.dtype);
                                  const uint64_t n = picked(t.name) ? src.size() / esz : 0;
                                  for (uint64_t i = next_gap(); i < n;) {
                                    // +-1 or +-2 in the lowest byte's bits, carried into the
                                    // element (little endian).
                                    int step = static_cast<int>(rng.Next() & 1) + 1;
                                    bool up = (rng.Next() & 2) != 0;
                                    uint8_t* e = d.data() + off + i * esz;
                                    uint64_t v = 0;
                                    std::memcpy(&v, e, esz);
                                    v = up ? v + static_cast<uint64_t>(step)
                                           : v - static_cast<uint64_t>(step);
                                    std::memcpy(e, &v, esz);
                                    ++stats.elements_changed;
                                    uint64_t gap = next_gap();
                                    if (gap >= n - i - 1) break;
                                    i += 1 + gap;
                                  }
                                  off += src.size();
                                }
                              }));
    stats.bytes += pf.header().data_size;
  }
  RETURN_IF_ERROR(parent.CheckUnchanged());
  return stats;
}

}  // namespace deltakv::deltasync
