#include "sync/group_convergence.h"

#include "store/open_store.h"

namespace deltakv::sidecar {

void GroupConvergence::Set(std::string state, std::string reason,
                           std::optional<LatestCommit> latest) {
  nlohmann::json j = {{"group", group_->options().group},
                      {"node", group_->options().node},
                      {"convergence", std::move(state)},
                      {"checked_unix", UnixNow()}};
  if (!reason.empty()) j["reason"] = std::move(reason);
  if (latest) {
    j["latest"] = {{"key", latest->key},
                   {"version", latest->version},
                   {"parent", latest->parent},
                   {"delta", RedactLocation(latest->delta)}};
  }
  std::lock_guard<std::mutex> lock(mu_);
  state_ = std::move(j);
}

std::optional<SyncRequest> GroupConvergence::Check(const std::string& serving) {
  if (group_ == nullptr) return std::nullopt;
  // A sync this node gave up on must be decided before `latest` can be trusted: ABORT unless
  // the group committed it (then it is the latest commit, applied below).
  if (Status s = group_->ResolveInDoubt(); !s.ok()) {
    Set("unknown", "a sync this node gave up on is still undecided: " + s.message(), std::nullopt);
    return std::nullopt;
  }
  auto latest = group_->Latest();
  if (!latest.ok()) {
    Set("unknown", "the group's latest commit could not be read: " + latest.status().message(),
        std::nullopt);
    return std::nullopt;
  }
  if (!latest->has_value()) {
    Set("converged", "the group has recorded no commit", std::nullopt);
    return std::nullopt;
  }
  const LatestCommit& l = **latest;
  if (serving == l.version) {
    Set("converged", "", l);
    return std::nullopt;
  }
  if (serving.empty()) {
    Set("cannot",
        "the engine's ranks name no common version, so the group's commit '" + l.parent + "' -> '" +
            l.version + "' cannot be applied here",
        l);
    return std::nullopt;
  }
  if (serving != l.parent) {
    Set("cannot",
        "the engine serves '" + serving + "', neither the group's committed version '" + l.version +
            "' nor its parent '" + l.parent + "': restart the engine on a checkpoint of '" +
            l.version + "' or '" + l.parent + "'",
        l);
    return std::nullopt;
  }
  Set("applying",
      "the engine serves '" + serving + "'; applying the group's commit to '" + l.version +
          "' from " + l.delta,
      l);
  SyncRequest r;
  r.kind = JobKind::kSync;
  r.version = l.version;
  r.delta = l.delta;
  r.group_catch_up = true;
  return r;
}

void GroupConvergence::Committed(const SyncRequest& request, const std::string& key,
                                 const std::string& parent) {
  if (group_ == nullptr) return;
  // The group's latest commit is the one this node just applied (a newer one needs this node).
  LatestCommit l{key, request.version, parent, request.delta, UnixNow()};
  if (l.parent.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_.is_object() && state_.contains("latest") &&
        state_["latest"].value("version", "") == request.version) {
      l.parent = state_["latest"].value("parent", "");
    }
  }
  Set("converged", "", l);
}

void GroupConvergence::CatchUpFailed(const SyncRequest& request, const Status& why) {
  if (group_ == nullptr) return;
  std::optional<LatestCommit> l;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_.is_object() && state_.contains("latest")) {
      const nlohmann::json& j = state_["latest"];
      l = LatestCommit{j.value("key", ""), j.value("version", ""), j.value("parent", ""),
                       j.value("delta", ""), 0};
    }
  }
  Set("cannot", "the catch-up sync to '" + request.version + "' failed: " + why.message(), l);
}

nlohmann::json GroupConvergence::Json() const {
  if (group_ == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  if (state_.is_null()) {
    return {{"group", group_->options().group},
            {"node", group_->options().node},
            {"convergence", "unchecked"}};
  }
  return state_;
}

}  // namespace deltakv::sidecar
