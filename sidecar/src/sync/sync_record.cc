#include "sync/sync_record.h"

#include "store/open_store.h"

namespace deltakv::sidecar {

const char* SyncStateName(SyncState s) {
  switch (s) {
    case SyncState::kQueued:
      return "queued";
    case SyncState::kFetching:
      return "fetching";
    case SyncState::kDecoding:
      return "decoding";
    case SyncState::kStaged:
      return "staged";
    case SyncState::kCommitting:
      return "committing";
    case SyncState::kLive:
      return "live";
    case SyncState::kAborted:
      return "aborted";
    case SyncState::kVerifying:
      return "verifying";
    case SyncState::kVerified:
      return "verified";
    case SyncState::kDiverged:
      return "diverged";
    case SyncState::kFailed:
      return "failed";
  }
  return "unknown";
}

const char* JobKindName(JobKind k) {
  switch (k) {
    case JobKind::kSync:
      return "sync";
    case JobKind::kVerify:
      return "verify";
    case JobKind::kScrub:
      return "scrub";
  }
  return "unknown";
}

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

nlohmann::json GroupSyncReport::ToJson() const {
  nlohmann::json j = {{"group", group},
                      {"node", node},
                      {"key", key},
                      {"catch_up", catch_up},
                      {"commit_at_unix_ns", commit_at_unix_ns},
                      {"commit_wait_ms", commit_wait_ms}};
  if (!decision_learnt.empty()) j["decision_learnt"] = decision_learnt;
  if (pause) j["pause"] = NodePauseJson(*pause);
  if (view) j["view"] = view->ToJson();
  if (!view_error.empty()) j["view_error"] = view_error;
  return j;
}

nlohmann::json SyncRecord::ToJson() const {
  nlohmann::json j = {{"id", id},
                      {"kind", JobKindName(request.kind)},
                      {"version", request.version},
                      {"delta", RedactLocation(request.delta)},
                      {"state", SyncStateName(state)},
                      {"parent_version", parent_version},
                      {"phase_ms", phase_ms},
                      {"bytes_fetched", bytes_fetched},
                      {"nonzero_bytes", nonzero_bytes},
                      {"plan_parts", plan_parts},
                      {"plan_records", plan_records},
                      {"touched_lines", touched_lines},
                      {"weight_lines", weight_lines},
                      {"tensors_changed", tensors_changed},
                      {"created_unix", created_unix},
                      {"total_ms", total_ms}};
  if (request.kind != JobKind::kSync) {
    j["checkpoint"] = RedactLocation(request.checkpoint);
    j["rate_bytes_per_s"] = request.rate_bytes_per_s;
    j["tensors_checked"] = tensors_checked;
    j["bytes_checked"] = bytes_checked;
    j["mismatches"] = mismatches;
  }
  if (group) j["group"] = group->ToJson();
  if (finished()) j["finished_unix"] = finished_unix;
  if (!error.empty()) j["error"] = error;
  return j;
}

}  // namespace deltakv::sidecar
