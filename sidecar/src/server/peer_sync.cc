#include "server/peer_sync.h"

#include <algorithm>

#include "log/log.h"

namespace deltakv::sidecar {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

json RecordState(const std::string& node, const std::string& key, const SyncRecord& r) {
  json j = {{"node", node}, {"sync_key", key}, {"id", r.id}, {"state", SyncStateName(r.state)}};
  if (!r.error.empty()) j["error"] = r.error;
  return j;
}

}  // namespace

PeerSync::PeerSync(std::shared_ptr<GroupCommit> group, SyncManager* manager,
                   PeerSyncOptions options)
    : group_(std::move(group)),
      manager_(manager),
      options_(std::move(options)),
      client_(options_.group_token, options_.call_timeout),
      status_client_(options_.group_token, options_.status_timeout) {}

PeerSync::~PeerSync() {
  stopping_.store(true);
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    threads.swap(fan_outs_);
  }
  for (std::thread& t : threads) t.join();
}

StatusOr<json> PeerSync::StartSync(const std::string& version, const std::string& delta) {
  SyncRequest r;
  r.version = version;
  r.delta = delta;
  std::lock_guard<std::mutex> submit_lock(submit_mu_);
  const std::string live = manager_->LiveVersion();
  StatusOr<std::string> key = live.empty() || version.empty()
                                  ? StatusOr<std::string>(NotFound("no live version"))
                                  : group_->SyncKey(version, live);
  if (!key.ok()) {
    // No key (no ranks attached, etcd unreachable): the sync fails at Admit, as on one node.
    ASSIGN_OR_RETURN(std::string id, manager_->Submit(std::move(r)));
    return json{{"id", id}, {"state", "queued"}};
  }
  std::string id;
  if (auto existing = manager_->FindGroupSync(*key)) {
    id = existing->id;  // a peer's prepare got here first: the same sync
  } else {
    r.group_key = *key;
    ASSIGN_OR_RETURN(id, manager_->Submit(std::move(r)));
  }
  json out = {{"id", id}, {"state", "queued"}, {"group", {{"key", *key}}}};
  if (auto rec = manager_->Get(id)) out["state"] = SyncStateName(rec->state);
  auto claim = group_->ClaimCoordinator(*key);
  if (!claim.ok()) {
    // etcd failed between two calls: the sync's own etcd calls decide its fate.
    log::Warn("could not claim the sync's coordination",
              {{"key", *key}, {"error", claim.status().message()}});
    return out;
  }
  out["group"]["coordinator"] = claim->node;
  if (claim->node != group_->options().node) return out;  // another node fans it out
  std::lock_guard<std::mutex> lock(mu_);
  if (!coordinated_.insert(*key).second) return out;  // fanned out already
  PeerPrepare p;
  p.sync_key = *key;
  p.version = version;
  p.delta = delta;
  auto attempt = SyncKeyAttempt(*key);
  p.attempt = attempt.ok() ? *attempt : 0;
  log::Info("coordinating group sync", {{"key", *key}});
  fan_outs_.emplace_back([this, p] { FanOut(p); });
  return out;
}

void PeerSync::FanOut(const PeerPrepare& p) {
  const auto deadline = Clock::now() + group_->options().prepare_timeout;
  std::vector<std::thread> calls;
  for (const std::string& m : group_->options().members) {
    if (m == group_->options().node) continue;
    calls.emplace_back([this, &p, m, deadline] { PrepareMember(p, m, deadline); });
  }
  for (std::thread& t : calls) t.join();
}

void PeerSync::PrepareMember(const PeerPrepare& p, const std::string& member,
                             Clock::time_point deadline) {
  const std::string& self = group_->options().node;
  std::string last = "never asked";
  auto abort = [&](const std::string& why) {
    auto d = group_->Abort(p.sync_key, "coordinator '" + self + "': node '" + member + "' " + why);
    log::Warn("peer prepare failed", {{"key", p.sync_key}, {"node", member}, {"error", why}});
    if (!d.ok()) {
      // etcd unreachable: the nodes' own prepare deadlines decide.
      log::Warn("could not write ABORT", {{"key", p.sync_key}, {"error", d.status().message()}});
    }
  };
  while (!stopping_.load()) {
    if (Clock::now() >= deadline) {
      return abort("did not accept the prepare within " +
                   std::to_string(group_->options().prepare_timeout.count()) + " ms (" + last +
                   ")");
    }
    // Decided meanwhile (the node came by itself, or failed): nothing left to ask.
    if (auto d = group_->Decision(p.sync_key); d.ok() && d->has_value()) return;
    std::string url;
    auto urls = group_->PeerUrls();
    bool live = false;
    if (urls.ok()) {
      for (const auto& [node, u] : *urls) {
        if (node == member) {
          live = true;
          url = u;
        }
      }
      if (live && url.empty()) return abort("advertises no peer URL (start it with --peer-url)");
      if (!live) last = "not a live member";
    } else {
      last = urls.status().message();
    }
    if (!url.empty()) {
      auto answer = client_.Prepare(url, p);
      if (answer.ok() && answer->status >= 200 && answer->status < 300) {
        log::Info("peer prepared",
                  {{"key", p.sync_key}, {"node", member}, {"status", answer->status}});
        return;
      }
      if (answer.ok() && answer->status >= 400 && answer->status < 500) {
        return abort("refused the prepare: " + answer->Describe());
      }
      last = answer.ok() ? answer->Describe() : answer.status().message();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

PeerSyncAnswer PeerSync::Prepare(const PeerPrepare& p) {
  const std::string& self = group_->options().node;
  std::lock_guard<std::mutex> submit_lock(submit_mu_);
  if (auto existing = manager_->FindGroupSync(p.sync_key)) {
    return {200, RecordState(self, p.sync_key, *existing)};  // idempotent: the same sync
  }
  auto d = group_->Decision(p.sync_key);
  if (!d.ok()) {
    return {503, {{"error", {{"code", "UNAVAILABLE"}, {"message", d.status().message()}}}}};
  }
  if (d->has_value() && !(*d)->commit) {
    return {409,
            {{"error",
              {{"code", "ABORTED"},
               {"message", "the group decided ABORT for '" + p.sync_key + "' (by '" + (*d)->by +
                               "'): " + (*d)->reason}}}}};
  }
  SyncRequest r;
  r.version = p.version;
  r.delta = p.delta;
  r.group_key = p.sync_key;
  auto id = manager_->Submit(std::move(r));
  if (!id.ok()) {
    const int status = id.status().code() == StatusCode::kInvalidArgument ? 400 : 409;
    return {status,
            {{"error",
              {{"code", std::string(StatusCodeName(id.status().code()))},
               {"message", id.status().message()}}}}};
  }
  return {202, {{"node", self}, {"sync_key", p.sync_key}, {"id", *id}, {"state", "queued"}}};
}

PeerSyncAnswer PeerSync::Decided(const std::string& key) {
  group_->Notice(key);
  return {200, {{"node", group_->options().node}, {"sync_key", key}}};
}

PeerSyncAnswer PeerSync::Status(const std::string& key) const {
  auto rec = manager_->FindGroupSync(key);
  if (!rec) {
    return {404,
            {{"error",
              {{"code", "NOT_FOUND"},
               {"message", "no sync '" + key + "' on node '" + group_->options().node + "'"}}}}};
  }
  return {200, RecordState(group_->options().node, key, *rec)};
}

bool PeerSync::Coordinates(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return coordinated_.count(key) > 0;
}

json PeerSync::MembersJson(const std::string& key) const {
  json out = json::object();
  std::vector<std::pair<std::string, std::string>> urls;
  if (auto u = group_->PeerUrls(); u.ok()) urls = *u;
  for (const std::string& m : group_->options().members) {
    if (m == group_->options().node) {
      auto rec = manager_->FindGroupSync(key);
      out[m] = rec ? SyncStateName(rec->state) : "none";
      continue;
    }
    auto it = std::find_if(urls.begin(), urls.end(), [&](const auto& e) { return e.first == m; });
    if (it == urls.end() || it->second.empty()) {
      out[m] = "unreachable";
      continue;
    }
    auto a = status_client_.SyncStatus(it->second, key);
    if (!a.ok()) {
      out[m] = "unreachable";
    } else if (a->status == 404) {
      out[m] = "none";
    } else if (a->status == 200 && a->body.is_object() && a->body.contains("state") &&
               a->body["state"].is_string()) {
      out[m] = a->body["state"];
    } else {
      out[m] = a->status >= 400 && a->status < 500 ? "refused" : "unreachable";
    }
  }
  return out;
}

}  // namespace deltakv::sidecar
