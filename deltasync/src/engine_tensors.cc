#include "deltasync/engine_tensors.h"

#include "json_fields.h"

namespace deltakv::deltasync {

namespace jf = json_fields;
using Json = nlohmann::json;

inline constexpr const char* kEngineTensorsFormat = "deltakv.engine-tensors/1";

std::string EngineTensorTableSegmentName(const std::string& shm_name, uint32_t rank) {
  return shm_name + ".tensors." + std::to_string(rank);
}

std::string EngineTensorTableToJson(const EngineTensorTable& t) {
  Json tensors = Json::array();
  for (const EngineTensor& e : t.tensors) {
    tensors.push_back({{"name", e.name},
                       {"dtype", std::string(DTypeName(e.dtype))},
                       {"local_bytes", e.local_bytes},
                       {"layout", Json::parse(e.layout.ToJson())}});
  }
  Json j{{"format", kEngineTensorsFormat},
         {"rank", t.rank},
         {"world_size", t.world_size},
         {"version", t.version},
         {"tensors", std::move(tensors)}};
  if (t.global_world > 0) {
    j["global_rank"] = t.global_rank;
    j["global_world"] = t.global_world;
  }
  return json_fields::Dump(j);
}

StatusOr<EngineTensorTable> ParseEngineTensorTable(std::string_view text) {
  const std::string where = "engine tensor table";
  ASSIGN_OR_RETURN(Json j, jf::Parse(text, where));
  ASSIGN_OR_RETURN(std::string format, jf::String(j, "format", where));
  if (format != kEngineTensorsFormat)
    return InvalidArgument(where + ": unknown format '" + format + "'");
  EngineTensorTable t;
  ASSIGN_OR_RETURN(uint64_t rank, jf::Uint(j, "rank", where));
  ASSIGN_OR_RETURN(uint64_t world, jf::Uint(j, "world_size", where));
  if (world == 0 || world > 4096 || rank >= world) {
    return InvalidArgument(where + ": rank " + std::to_string(rank) + " of world size " +
                           std::to_string(world));
  }
  t.rank = static_cast<uint32_t>(rank);
  t.world_size = static_cast<uint32_t>(world);
  if (j.contains("global_rank") || j.contains("global_world")) {
    ASSIGN_OR_RETURN(uint64_t grank, jf::Uint(j, "global_rank", where));
    ASSIGN_OR_RETURN(uint64_t gworld, jf::Uint(j, "global_world", where));
    if (gworld == 0 || gworld > kLayoutMaxWorld || grank < rank || grank - rank + world > gworld) {
      return InvalidArgument(where + ": global rank " + std::to_string(grank) + " of " +
                             std::to_string(gworld) + " does not fit local rank " +
                             std::to_string(rank) + " of " + std::to_string(world));
    }
    t.global_rank = static_cast<uint32_t>(grank);
    t.global_world = static_cast<uint32_t>(gworld);
  }
  ASSIGN_OR_RETURN(t.version, jf::OptionalString(j, "version", where, ""));
  ASSIGN_OR_RETURN(const Json* tensors, jf::Array(j, "tensors", where));
  for (size_t i = 0; i < tensors->size(); ++i) {
    const Json& e = (*tensors)[i];
    std::string w = where + ": tensors[" + std::to_string(i) + "]";
    ASSIGN_OR_RETURN(std::string name, jf::String(e, "name", w));
    ASSIGN_OR_RETURN(std::string dtype, jf::String(e, "dtype", w));
    auto dt = ParseDType(dtype);
    if (!dt) return InvalidArgument(w + ": unknown dtype '" + dtype + "'");
    ASSIGN_OR_RETURN(uint64_t local_bytes, jf::Uint(e, "local_bytes", w));
    ASSIGN_OR_RETURN(const Json* layout_json, jf::Object(e, "layout", w));
    auto layout = TensorLayout::FromJson(layout_json->dump());
    if (!layout.ok()) return layout.status().WithPrefix(w + " '" + name + "'");
    EngineTensor et{std::move(name), *dt, local_bytes, std::move(layout).value()};
    if (et.layout.spec().dtype != et.dtype) {
      return InvalidArgument(w + " '" + et.name + "': dtype " + dtype + " but the layout's is " +
                             std::string(DTypeName(et.layout.spec().dtype)));
    }
    if (et.layout.world() != t.LayoutWorld()) {
      return InvalidArgument(w + " '" + et.name + "': the layout spans " +
                             std::to_string(et.layout.world()) + " ranks, the table's group " +
                             std::to_string(t.LayoutWorld()));
    }
    if (et.layout.LocalBytes(t.LayoutRank()).total != et.local_bytes) {
      return InvalidArgument(w + " '" + et.name + "': local_bytes " +
                             std::to_string(et.local_bytes) + " but the layout gives rank " +
                             std::to_string(t.LayoutRank()) + " " +
                             std::to_string(et.layout.LocalBytes(t.LayoutRank()).total));
    }
    t.tensors.push_back(std::move(et));
  }
  return t;
}

StatusOr<RankTensorTables> ToRankTensorTables(const std::vector<EngineTensorTable>& tables) {
  if (tables.empty()) return FailedPrecondition("no engine ranks are registered");
  const uint32_t world = tables[0].world_size;
  if (tables.size() != world) {
    return FailedPrecondition(std::to_string(tables.size()) + " of " + std::to_string(world) +
                              " engine ranks are registered");
  }
  RankTensorTables out(world);
  std::vector<bool> seen(world, false);
  for (const EngineTensorTable& t : tables) {
    if (t.world_size != world) return InvalidArgument("engine ranks disagree on the world size");
    if (t.rank >= world) {
      return InvalidArgument("engine rank " + std::to_string(t.rank) + " is outside the world of " +
                             std::to_string(world));
    }
    if (t.LayoutWorld() != tables[0].LayoutWorld() ||
        t.LayoutRank() - t.rank != tables[0].LayoutRank() - tables[0].rank) {
      return InvalidArgument("engine rank " + std::to_string(t.rank) + " names global rank " +
                             std::to_string(t.LayoutRank()) + " of " +
                             std::to_string(t.LayoutWorld()) + ", rank " +
                             std::to_string(tables[0].rank) + " global rank " +
                             std::to_string(tables[0].LayoutRank()) + " of " +
                             std::to_string(tables[0].LayoutWorld()) +
                             ": a node's ranks must be consecutive global ranks of one group");
    }
    if (seen[t.rank])
      return InvalidArgument("engine rank " + std::to_string(t.rank) + " registered twice");
    seen[t.rank] = true;
    for (uint32_t i = 0; i < t.tensors.size(); ++i) {
      auto [it, inserted] =
          out[t.rank].emplace(t.tensors[i].name, RankTensorEntry{i, t.tensors[i].layout});
      if (!inserted) {
        return InvalidArgument("engine rank " + std::to_string(t.rank) + " registered tensor '" +
                               t.tensors[i].name + "' twice");
      }
    }
  }
  return out;
}

}  // namespace deltakv::deltasync
