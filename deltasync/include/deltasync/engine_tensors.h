// EngineTensorTable: the weight tensors one engine rank registered, as the rank publishes
// them to the sidecar (JSON text in a shared-memory segment, see shm/PROTOCOL.md).
//
//   {"format": "deltakv.engine-tensors/1", "rank": 0, "world_size": 2, "version": "v1",
//    "tensors": [{"name": "model.layers.0.mlp.up_proj.weight", "dtype": "BF16",
//                 "local_bytes": 4194304, "layout": {...TensorLayout JSON...}}, ...]}
//
// A node serving a slice of a larger tensor-parallel group adds "global_rank" and
// "global_world" (both or neither): its local rank `rank` is global rank `global_rank`, and
// layouts name global ranks. Without them global_rank = rank and global_world = world_size.
//
// `index` of each entry is its position in "tensors" (the shim's registration order).
// Parsing validates everything and rejects bad input with InvalidArgument naming the field.
//
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "deltasync/layout.h"
#include "deltasync/sync_planner.h"

namespace deltakv::deltasync {

struct EngineTensor {
  std::string name;
  DType dtype;
  uint64_t local_bytes;
  TensorLayout layout;
};

struct EngineTensorTable {
  uint32_t rank = 0;        // node-local rank (the control block slot)
  uint32_t world_size = 1;  // the node's ranks
  std::string version;
  std::vector<EngineTensor> tensors;
  // A slice of a larger group: the layouts' rank of this rank and the group's world. 0: the
  // node serves the whole group (the layouts' rank is `rank`).
  uint32_t global_rank = 0;
  uint32_t global_world = 0;

  uint32_t LayoutRank() const { return global_world > 0 ? global_rank : rank; }
  uint32_t LayoutWorld() const { return global_world > 0 ? global_world : world_size; }
};

// Name of the shared-memory segment where rank `rank` publishes its table: a Scratch segment
// whose body is {u64 length, `length` bytes of JSON} (shm/PROTOCOL.md).
std::string EngineTensorTableSegmentName(const std::string& shm_name, uint32_t rank);

std::string EngineTensorTableToJson(const EngineTensorTable& t);
// InvalidArgument for malformed JSON, a missing or mistyped field, a rank outside its world, a
// global rank that does not fit, an unknown dtype, an invalid layout, or an entry whose dtype
// differs from its layout's, whose layout spans another number of ranks than the table's group
// (LayoutWorld), or whose local_bytes differ from what the layout gives this rank.
StatusOr<EngineTensorTable> ParseEngineTensorTable(std::string_view text);

// Builds the planner's per-rank tables (index = node-local rank). FailedPrecondition if no
// table is given or fewer or more tables than the first one's world size (ranks not yet
// registered); InvalidArgument if a rank is outside the world or duplicated, world sizes
// disagree, the ranks are not consecutive global ranks of one group, or a name repeats within a
// rank.
StatusOr<RankTensorTables> ToRankTensorTables(const std::vector<EngineTensorTable>& tables);

}  // namespace deltakv::deltasync
