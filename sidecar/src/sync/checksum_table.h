// ChecksumTable: the sidecar's record of what the engine's weights are, the base of the
// checksum chain (docs/ARCHITECTURE.md, "Checksum chain").
//
// It maps every registered tensor to the Adler-32 of its live bytes, as computed by the ranks
// themselves (VERIFY, shm/PROTOCOL.md §9.4) and, when a checkpoint was given, checked against
// that checkpoint's manifest. It names the version the bytes are, how the table was made
// ("checkpoint LOCATION" or "sync ID"), and the identity of every rank it was computed on: a
// rank that re-registered since (another process or slot incarnation) makes the table stale,
// and the next sync checks the live bytes again before it decodes anything.
//
// Each commit moves the table to the delta's new checksums. The table is saved as
// `<state-dir>/checksums.json` (written atomically) and loaded at start, so it survives a
// sidecar restart. A scrub that finds live bytes different from the table marks the table
// diverged: syncs are refused until the engine is verified again.
//
// Thread-safety: a value; ShmSyncExecutor guards its copy.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "deltasync/adler32.h"
#include "shm/control_block.h"

namespace deltakv::sidecar {

struct TableRank {
  uint32_t rank = 0;
  uint32_t pid = 0;
  uint64_t epoch = 0;
  uint64_t state_word = 0;
  bool operator==(const TableRank&) const = default;
};

struct ChecksumTable {
  std::string version;  // the version id the bytes are
  std::string source;   // "checkpoint <location>" | "sync <id>" | "live bytes at sync <id>"
  bool checkpoint_verified = false;  // every tensor was compared with a checkpoint manifest
  double updated_unix = 0;
  std::vector<TableRank> ranks;             // sorted by rank
  // The ranks the table was made on serve global ranks [slice_first, slice_first + slice_count)
  // of a slice_world-rank group (a node of a split topology); slice_world 0: the whole group
  // (tables written before slices were recorded are read so). A table made for another slice
  // vouches for nothing on this one: its split tensors' values cover other bytes.
  uint32_t slice_first = 0, slice_count = 0, slice_world = 0;
  // tensor name -> Adler-32 of its canonical bytes. For a tensor the node holds only part of
  // (split over nodes), the Adler-32 of the canonical bytes with every byte the node does not
  // hold taken as zero: its ranks' owned sums applied to zeros. Never a whole-tensor value.
  std::map<std::string, uint32_t> adler32;
  // tensor name -> per rank (index = rank) the partial sums of the bytes it owns, against zero
  // bytes (PROTOCOL.md §9.4 OWNED): a scrub names the rank whose bytes changed. A commit adds
  // each rank's incremental STAGED sums. May be absent for a tensor (then only adler32 counts).
  std::map<std::string, std::vector<deltasync::AdlerDelta>> owned;
  // Set by a scrub (or a failed commit) that found the live bytes differ from this table.
  std::string diverged;  // "" = consistent

  bool empty() const { return adler32.empty(); }
  // True if the table was made for global ranks [first, first + count) of `world` (a table
  // without a slice counts as made for the whole group).
  bool ForSlice(uint32_t first, uint32_t count, uint32_t world) const {
    if (slice_world == 0) return first == 0 && count == world;
    return slice_first == first && slice_count == count && slice_world == world;
  }
  // True if `ranks` (as attached now) are exactly the ranks the table was computed on.
  bool CurrentFor(const std::vector<shm::RankInfo>& attached) const;
  static std::vector<TableRank> RanksOf(const std::vector<shm::RankInfo>& ranks);

  nlohmann::json ToJson() const;
  // InvalidArgument naming the field for malformed JSON.
  static StatusOr<ChecksumTable> FromJson(const std::string& text);
  // <dir>/checksums.json; NotFound when absent.
  static StatusOr<ChecksumTable> Load(const std::string& dir);
  Status Save(const std::string& dir) const;
};

}  // namespace deltakv::sidecar
