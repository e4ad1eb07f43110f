// SyncRecord: the state of one sync request as reported by GET /v1/syncs/{id}.
//
// States: queued -> fetching -> decoding -> staged -> committing -> live, or aborted with a
// reason from any state before live. Phase timings are wall-clock milliseconds.
//
// Thread-safety: values; SyncManager guards the live copies.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace deltakv::sidecar {

enum class SyncState { kQueued, kFetching, kDecoding, kStaged, kCommitting, kLive, kAborted };

const char* SyncStateName(SyncState s);

struct SyncRequest {
  std::string version;  // the policy version the delta produces
  std::string delta;    // delta location: "file:///dir", "/dir", "http://host:port/prefix"
};

struct SyncRecord {
  std::string id;
  SyncRequest request;
  SyncState state = SyncState::kQueued;
  std::string error;                       // set when aborted
  std::string parent_version;              // from the delta manifest
  std::map<std::string, double> phase_ms;  // "fetch", "decode", "stage", "pause", ...
  uint64_t bytes_fetched = 0;
  uint64_t nonzero_bytes = 0;
  uint64_t tensors_changed = 0;
  uint64_t plan_parts = 0;    // write-plan parts sent to the ranks (all ranks together)
  uint64_t plan_records = 0;  // write-plan records (all ranks together)
  // 64-byte lines of engine weight memory the commit writes, and in all registered weights
  // (all ranks together): the scatter's share of a full rewrite.
  uint64_t touched_lines = 0;
  uint64_t weight_lines = 0;
  double created_unix = 0;
  double finished_unix = 0;
  double total_ms = 0;

  bool finished() const { return state == SyncState::kLive || state == SyncState::kAborted; }
  nlohmann::json ToJson() const;
};

double UnixNow();

}  // namespace deltakv::sidecar
