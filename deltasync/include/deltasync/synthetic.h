// Synthetic checkpoints for demos, tests and benchmarks: model-like tensor layouts filled with
// plausible bf16/f32 weights, and "training steps" that change a chosen fraction of elements
// by 1-2 ulp, as RL updates at small learning rates do.
//
// Output is deterministic for a given spec and seed. Files are written atomically.
//
// Thread-safety: functions are reentrant.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "deltasync/safetensors.h"

namespace deltakv::deltasync {

using SyntheticTensor = TensorDecl;

struct SyntheticFile {
  std::string name;  // e.g. "model-00001-of-00002.safetensors"
  std::vector<SyntheticTensor> tensors;
};

// A transformer-like layout of about `total_bytes` (bf16 matrices, f32 norms, a U8 and a
// zero-size tensor), split over `files` files. With `experts` > 0 each layer's MLP is a
// mixture of experts instead: a router `mlp.gate.weight` [E, h] and the stacked experts
// `mlp.experts.w13_weight` [E, 2I, h] (gate | up) and `mlp.experts.w2_weight` [E, h, I], with
// I = 4h / E rounded down to a multiple of 64 (at least 64).
std::vector<SyntheticFile> ModelLikeLayout(uint64_t total_bytes, unsigned files,
                                           unsigned experts = 0);

// Writes the files of `layout` into `dir` (created if missing) with random weights.
Status GenerateCheckpoint(const std::string& dir, const std::vector<SyntheticFile>& layout,
                          uint64_t seed);

struct MutationOptions {
  double density = 0.01;  // fraction of elements changed, in [0, 1]
  // Fraction of tensors that change at all, in (0, 1]; a tensor is picked by a hash of its
  // name and the seed. `density` applies within the picked tensors. 1 = every tensor.
  double tensor_fraction = 1.0;
  uint64_t seed = 1;
  // Extra metadata written into the new files' "__metadata__" (changes their headers).
  std::string step_metadata;
};

struct MutationStats {
  uint64_t elements_changed = 0;
  uint64_t bytes = 0;
};

// Writes into `out_dir` a copy of the checkpoint in `parent_dir` where each element changes
// with probability `density` by +-1 or +-2 in its last bits (1-byte dtypes by +-1..2).
// IoError if a parent file changed while it was read.
StatusOr<MutationStats> MutateCheckpoint(const std::string& parent_dir, const std::string& out_dir,
                                         const MutationOptions& options);

}  // namespace deltakv::deltasync
