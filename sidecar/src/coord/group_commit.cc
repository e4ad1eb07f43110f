#include "coord/group_commit.h"

#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/percent_encode.h"
#include "log/log.h"

namespace deltakv::sidecar {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string AbortJson(const std::string& by, const std::string& reason) {
  GroupDecision d;
  d.by = by;
  d.reason = reason;
  d.unix = UnixNow();
  return DecisionToJson(d);
}

int64_t UnixNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool ValidName(const std::string& s) {
  return !s.empty() && s.size() <= 128 && s.find('/') == std::string::npos;
}

}  // namespace

std::string EscapeKeyPart(const std::string& s) {
  return PercentEncode(s, "~");  // keys written before stay the same
}

StatusOr<std::unique_ptr<GroupCommit>> GroupCommit::Create(GroupOptions o) {
  if (!ValidName(o.group))
    return InvalidArgument("group name '" + o.group + "': 1-128 characters, no '/'");
  if (!ValidName(o.node))
    return InvalidArgument("node name '" + o.node + "': 1-128 characters, no '/'");
  if (std::find(o.members.begin(), o.members.end(), o.node) == o.members.end()) {
    return InvalidArgument("node '" + o.node + "' is not among the group's members");
  }
  for (const std::string& m : o.members) {
    if (!ValidName(m)) return InvalidArgument("member name '" + m + "': 1-128 characters, no '/'");
    if (std::count(o.members.begin(), o.members.end(), m) > 1) {
      return InvalidArgument("member '" + m + "' is listed twice");
    }
  }
  if (o.lease_ttl_s < 2) return InvalidArgument("lease TTL must be at least 2 s");
  ASSIGN_OR_RETURN(std::unique_ptr<EtcdClient> etcd, EtcdClient::Create(o.etcd));
  std::unique_ptr<GroupCommit> g(new GroupCommit(std::move(o), std::move(etcd)));
  RETURN_IF_ERROR(g->Join());
  g->keepalive_ = std::thread([p = g.get()] { p->KeepAliveLoop(); });
  g->announcer_ = std::thread([p = g.get()] { p->AnnounceLoop(); });
  return g;
}

GroupCommit::GroupCommit(GroupOptions options, std::unique_ptr<EtcdClient> etcd)
    : options_(std::move(options)),
      etcd_(std::move(etcd)),
      peer_url_(options_.peer_url),
      peer_client_(options_.peer_token, options_.peer_check_timeout) {}

GroupCommit::~GroupCommit() {
  {
    std::lock_guard<std::mutex> lock(notice_mu_);
    stop_.store(true);
  }
  notice_cv_.notify_all();
  if (keepalive_.joinable()) keepalive_.join();
  if (announcer_.joinable()) announcer_.join();
  // Leaving: the membership key and any PREPARED of this node go with the lease.
  if (int64_t lease = lease_.load(); lease != 0) (void)etcd_->RevokeLease(lease);
}

Status GroupCommit::Join() {
  ASSIGN_OR_RETURN(int64_t lease, etcd_->GrantLease(options_.lease_ttl_s));
  lease_.store(lease);
  MemberRecord m;
  m.node = options_.node;
  m.pid = static_cast<int64_t>(getpid());
  m.started_unix = UnixNow();
  {
    std::lock_guard<std::mutex> lock(peer_url_mu_);
    m.peer_url = peer_url_;
  }
  return etcd_->Put(Key("members/" + options_.node), MemberToJson(m), lease);
}

Status GroupCommit::SetPeerUrl(const std::string& url) {
  if (!url.empty()) RETURN_IF_ERROR(ParsePeerUrl(url).status());
  ASSIGN_OR_RETURN(std::optional<EtcdKv> kv, etcd_->Get(Key("members/" + options_.node)));
  MemberRecord m;
  m.node = options_.node;
  m.pid = static_cast<int64_t>(getpid());
  m.started_unix = UnixNow();
  if (kv) {
    if (auto old = ParseMember(kv->value); old.ok()) m = *old;
  }
  m.peer_url = url;
  {
    std::lock_guard<std::mutex> lock(peer_url_mu_);
    peer_url_ = url;
  }
  return etcd_->Put(Key("members/" + options_.node), MemberToJson(m), lease_.load());
}

StatusOr<std::vector<std::pair<std::string, std::string>>> GroupCommit::PeerUrls() {
  ASSIGN_OR_RETURN(std::vector<EtcdKv> kvs, etcd_->List(Key("members/")));
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& m : options_.members) {
    for (const EtcdKv& kv : kvs) {
      if (kv.key != Key("members/" + m)) continue;
      auto rec = ParseMember(kv.value);
      out.emplace_back(m, rec.ok() ? rec->peer_url : "");
    }
  }
  return out;
}

StatusOr<CoordinatorRecord> GroupCommit::ClaimCoordinator(const std::string& key) {
  CoordinatorRecord mine;
  mine.node = options_.node;
  mine.unix = UnixNow();
  {
    std::lock_guard<std::mutex> lock(peer_url_mu_);
    mine.peer_url = peer_url_;
  }
  ASSIGN_OR_RETURN(EtcdKv kv, etcd_->PutIfAbsent(Key(key + "/coordinator"), CoordinatorToJson(mine),
                                                 lease_.load()));
  return ParseCoordinator(kv.value);
}

std::string GroupCommit::Key(const std::string& rest) const {
  return options_.prefix + "/" + options_.group + "/" + rest;
}

void GroupCommit::KeepAliveLoop() {
  const auto period = std::chrono::milliseconds(options_.lease_ttl_s * 1000 / 3);
  auto next = Clock::now() + period;
  while (!stop_.load()) {
    if (Clock::now() < next) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    next = Clock::now() + period;
    // Expired (etcd was unreachable for longer than the TTL): join again on a new lease.
    if (etcd_->KeepAlive(lease_.load()).code() == StatusCode::kNotFound) (void)Join();
  }
}

void GroupCommit::BeginShutdown() {
  {
    std::lock_guard<std::mutex> lock(notice_mu_);
    leaving_.store(true);
  }
  notice_cv_.notify_all();
}

void GroupCommit::Notice(const std::string& key) {
  {
    std::lock_guard<std::mutex> lock(notice_mu_);
    if (std::find(noticed_.begin(), noticed_.end(), key) == noticed_.end()) {
      noticed_.push_back(key);
      if (noticed_.size() > 64) noticed_.erase(noticed_.begin());  // keys nobody waits on
    }
  }
  notice_cv_.notify_all();
}

bool GroupCommit::WaitForNotice(const std::string& key) {
  std::unique_lock<std::mutex> lock(notice_mu_);
  auto noticed = [&] { return std::find(noticed_.begin(), noticed_.end(), key) != noticed_.end(); };
  notice_cv_.wait_for(lock, options_.decision_poll,
                      [&] { return noticed() || leaving_.load() || stop_.load(); });
  if (!noticed()) return false;
  std::erase(noticed_, key);
  return true;
}

void GroupCommit::Announce(const std::string& key) {
  {
    std::lock_guard<std::mutex> lock(notice_mu_);
    announce_.push_back(key);
  }
  notice_cv_.notify_all();
}

void GroupCommit::AnnounceLoop() {
  std::unique_lock<std::mutex> lock(notice_mu_);
  while (true) {
    notice_cv_.wait(lock, [&] { return stop_.load() || !announce_.empty(); });
    // Decisions written just before the node stops are still announced.
    if (announce_.empty()) return;
    const std::string key = announce_.front();
    announce_.erase(announce_.begin());
    lock.unlock();
    if (auto urls = PeerUrls(); urls.ok()) {
      for (const auto& [member, url] : *urls) {
        if (member == options_.node || url.empty()) continue;
        (void)peer_client_.Decided(url, key);  // best effort: the member polls etcd anyway
      }
    }
    lock.lock();
  }
}

StatusOr<std::string> GroupCommit::SyncKey(const std::string& version, const std::string& parent) {
  const std::string base = "syncs/" + EscapeKeyPart(version) + "@" + EscapeKeyPart(parent) + "#";
  for (int attempt = 0;; ++attempt) {
    const std::string key = base + std::to_string(attempt);
    ASSIGN_OR_RETURN(std::optional<GroupDecision> d, Decision(key));
    if (!d || d->commit) return key;
  }
}

StatusOr<std::optional<GroupDecision>> GroupCommit::Decision(const std::string& key) {
  ASSIGN_OR_RETURN(std::optional<EtcdKv> kv, etcd_->Get(Key(key + "/decision")));
  if (!kv) return std::optional<GroupDecision>();
  ASSIGN_OR_RETURN(GroupDecision d, ParseDecision(kv->value));
  return std::optional<GroupDecision>(std::move(d));
}

StatusOr<GroupDecision> GroupCommit::Abort(const std::string& key, const std::string& reason) {
  const std::string mine = AbortJson(options_.node, reason);
  ASSIGN_OR_RETURN(EtcdKv kv, etcd_->PutIfAbsent(Key(key + "/decision"), mine));
  ASSIGN_OR_RETURN(GroupDecision d, ParseDecision(kv.value));
  if (kv.value == mine) {
    d.learnt = "wrote";
    Announce(key);
  }
  return d;
}

Status GroupCommit::CheckPeersHold(const std::string& key) {
  ASSIGN_OR_RETURN(auto urls, PeerUrls());
  for (const auto& [member, url] : urls) {
    if (member == options_.node || url.empty()) continue;
    auto a = peer_client_.SyncStatus(url, key);
    if (!a.ok()) {
      return FailedPrecondition("node '" + member + "' does not answer at " + url + " (" +
                                a.status().message() + "): it may be gone since its PREPARED");
    }
    if (a->status == 404) {
      return FailedPrecondition("node '" + member + "' has no record of sync '" + key +
                                "' (restarted since its PREPARED?)");
    }
    const std::string state = a->status == 200 && a->body.is_object() &&
                                      a->body.contains("state") && a->body["state"].is_string()
                                  ? a->body["state"].get<std::string>()
                                  : "";
    if (state != "staged" && state != "committing" && state != "live") {
      return FailedPrecondition(
          "node '" + member + "' does not hold the staged plan of sync '" + key + "' (" +
          (state.empty() ? "answer " + a->Describe() : "state '" + state + "'") + ")");
    }
  }
  return Status::Ok();
}

std::vector<std::string> GroupCommit::InDoubt() const {
  std::lock_guard<std::mutex> lock(in_doubt_mu_);
  return in_doubt_;
}

Status GroupCommit::ResolveInDoubt() {
  for (const std::string& key : InDoubt()) {
    auto d = Abort(
        key, "node '" + options_.node + "' gave up waiting for the decision (etcd did not answer)");
    if (!d.ok()) return d.status();
    log::Fields f = {{"group", options_.group}, {"key", key}, {"by", d->by}};
    log::Info(d->commit ? "in-doubt sync: the group decided COMMIT"
                        : "in-doubt sync: the group decided ABORT",
              f);
    std::lock_guard<std::mutex> lock(in_doubt_mu_);
    std::erase(in_doubt_, key);
  }
  return Status::Ok();
}

StatusOr<std::vector<std::string>> GroupCommit::LiveMembers() {
  ASSIGN_OR_RETURN(std::vector<EtcdKv> kvs, etcd_->List(Key("members/")));
  std::vector<std::string> live;
  for (const std::string& m : options_.members) {
    for (const EtcdKv& kv : kvs) {
      if (kv.key == Key("members/" + m)) live.push_back(m);
    }
  }
  return live;
}

StatusOr<GroupDecision> GroupCommit::PrepareAndAwait(const std::string& key,
                                                     const std::string& version,
                                                     const std::string& parent,
                                                     const std::string& delta, uint64_t sync_id,
                                                     const nlohmann::json& fields,
                                                     const RecordCheck& check_records) {
  const auto deadline = Clock::now() + options_.prepare_timeout;
  const auto give_up = deadline + options_.in_doubt_timeout;
  const std::string prepared_prefix = Key(key + "/prepared/");
  const std::string decision_key = Key(key + "/decision");
  std::vector<std::string> must_exist;
  for (const std::string& m : options_.members) must_exist.push_back(prepared_prefix + m);
  json mine_json{{"node", options_.node}, {"version", version}, {"parent", parent},
                 {"delta", delta},        {"sync_id", sync_id}, {"unix", UnixNow()}};
  if (fields.is_object()) {
    for (const auto& [k, v] : fields.items()) mine_json[k] = v;
  }
  const std::string mine = log::JsonText(mine_json);
  bool prepared = false;
  bool woken = false;  // by a peer's notice
  Status last;
  auto pause = [&] { woken = WaitForNotice(key); };
  while (true) {
    if (Clock::now() > give_up) {
      {
        std::lock_guard<std::mutex> lock(in_doubt_mu_);
        if (std::find(in_doubt_.begin(), in_doubt_.end(), key) == in_doubt_.end()) {
          in_doubt_.push_back(key);
        }
      }
      return IoError(
          "the group's decision is unknown: " + etcd_->Describe() + " did not answer for " +
          std::to_string((options_.prepare_timeout + options_.in_doubt_timeout).count()) + " ms (" +
          last.message() + "); the staged plan is dropped");
    }
    Status s;
    if (!prepared) {
      s = etcd_->Put(prepared_prefix + options_.node, mine, lease_.load());
      prepared = s.ok();
    }
    if (s.ok()) {
      auto d = Decision(key);
      if (d.ok() && d->has_value()) {
        GroupDecision& g = **d;
        if (g.learnt.empty()) g.learnt = g.by == options_.node ? "wrote" : woken ? "peer" : "etcd";
        log::Fields f = {
            {"group", options_.group}, {"key", key}, {"by", g.by}, {"learnt", g.learnt}};
        if (!g.commit) f.emplace_back("reason", g.reason);
        log::Info(g.commit ? "group decided COMMIT" : "group decided ABORT", f);
        return std::move(g);
      }
      s = d.status();
    }
    if (s.ok() && leaving_.load()) {
      auto d = Abort(key, "node '" + options_.node + "' is shutting down");
      if (d.ok()) return *d;
      s = d.status();
    }
    if (s.ok() && Clock::now() > deadline) {
      // Who never prepared, for the reason.
      std::string missing;
      auto kvs = etcd_->List(prepared_prefix);
      for (const std::string& m : options_.members) {
        bool found = false;
        if (kvs.ok()) {
          for (const EtcdKv& kv : *kvs) found = found || kv.key == prepared_prefix + m;
        }
        if (!found) missing += (missing.empty() ? "" : ", ") + m;
      }
      auto d = Abort(key, "not every node prepared within " +
                              std::to_string(options_.prepare_timeout.count()) +
                              " ms (missing: " + (missing.empty() ? "?" : missing) + ")");
      if (d.ok()) return *d;
      s = d.status();
    }
    if (s.ok()) {
      auto all = etcd_->List(prepared_prefix);
      if (all.ok() && all->size() >= options_.members.size() && check_records) {
        // What only the group can check (tensors split over nodes, from every node's sums;
        // every changed tensor held by some stage) is checked here, before COMMIT.
        std::vector<json> records;
        for (const EtcdKv& kv : *all) {
          json r = json::parse(kv.value, nullptr, /*allow_exceptions=*/false);
          records.push_back(r.is_object() ? r : json());
        }
        if (Status ok = check_records(records); !ok.ok()) {
          auto d = Abort(key, "node '" + options_.node + "': " + ok.message());
          if (d.ok()) return *d;
          s = d.status();
        }
      }
      if (s.ok() && all.ok() && all->size() >= options_.members.size()) {
        // A PREPARED outlives its node by up to the lease TTL: ask the others first.
        if (Status held = CheckPeersHold(key); !held.ok()) {
          if (held.code() == StatusCode::kIoError) {
            last = held;  // etcd: in doubt, retry
            pause();
            continue;
          }
          auto d = Abort(key, "node '" + options_.node + "': " + held.message());
          if (d.ok()) return *d;
          s = d.status();
        }
      }
      if (s.ok() && all.ok() && all->size() >= options_.members.size()) {
        GroupDecision commit;
        commit.commit = true;
        commit.by = options_.node;
        commit.unix = UnixNow();
        commit.version = version;
        commit.parent = parent;
        commit.delta = delta;
        commit.commit_at_unix_ns =
            UnixNs() +
            std::chrono::duration_cast<std::chrono::nanoseconds>(options_.commit_margin).count();
        LatestCommit latest{key, version, parent, delta, commit.unix};
        auto wrote = etcd_->PutIfAbsentAndAllExist(decision_key, DecisionToJson(commit), must_exist,
                                                   {{Key("latest"), LatestToJson(latest)}});
        if (wrote.ok()) {
          if (*wrote) Announce(key);
          continue;  // read the decision that stands
        }
        s = wrote.status();
      } else if (!all.ok()) {
        s = all.status();
      }
    }
    if (!s.ok()) {
      if (s.code() != StatusCode::kIoError) return s;
      last = s;  // etcd unreachable: in doubt, retry
    }
    pause();
  }
}

Status GroupCommit::PublishPause(const std::string& key, const NodePause& pause) {
  return etcd_->Put(Key(key + "/resumed/" + options_.node), log::JsonText(NodePauseJson(pause)),
                    lease_.load());
}

StatusOr<GroupPauseView> GroupCommit::AwaitPauses(const std::string& key) {
  const auto deadline = Clock::now() + options_.report_timeout;
  const std::string prefix = Key(key + "/resumed/");
  Status last;
  bool answered = false;
  GroupPauseView view;
  view.missing = options_.members;
  while (true) {
    auto kvs = etcd_->List(prefix);
    if (kvs.ok()) {
      answered = true;
      std::vector<NodePause> found;
      for (const EtcdKv& kv : *kvs) {
        auto p = ParseNodePause(kv.value);
        // A record under another node's name is not that node's report.
        if (p.ok() && kv.key == prefix + p->node) found.push_back(*p);
      }
      view = MakePauseView(options_.members, found);
      if (view.missing.empty()) return view;
      // Members that are gone will not report: stop waiting for them.
      auto live = LiveMembers();
      if (live.ok()) {
        bool any_alive = false;
        for (const std::string& m : view.missing) {
          any_alive = any_alive || std::find(live->begin(), live->end(), m) != live->end();
        }
        if (!any_alive) return view;
      }
    } else {
      last = kvs.status();
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!answered) return last;
  return view;
}

StatusOr<std::optional<LatestCommit>> GroupCommit::Latest() {
  ASSIGN_OR_RETURN(std::optional<EtcdKv> kv, etcd_->Get(Key("latest")));
  if (!kv) return std::optional<LatestCommit>();
  ASSIGN_OR_RETURN(LatestCommit l, ParseLatest(kv->value));
  return std::optional<LatestCommit>(std::move(l));
}

}  // namespace deltakv::sidecar
