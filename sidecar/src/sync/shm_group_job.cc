// ShmSyncExecutor::Job's multi-node steps of a sync: the PREPARED record's sums and held
// tensors, their checks over every member's records, the decision, the commit point and the
// group's pause report.
#include <algorithm>
#include <set>

#include "deltasync/plan_verify.h"
#include "sync/shm_job.h"

namespace deltakv::sidecar {

using namespace shm_job;

nlohmann::json ShmSyncExecutor::Job::PartialJson() const {
  // [[tensor index, parent s1, s2, change s1, s2, full s1, s2], ...] over the bytes this node
  // holds.
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < partial_.size(); ++i) {
    if (!partial_[i]) continue;
    out.push_back({i, partial_parent_[i].s1(), partial_parent_[i].s2(), partial_inc_[i].s1(),
                   partial_inc_[i].s2(), partial_full_[i].s1(), partial_full_[i].s2()});
  }
  return out;
}

Status ShmSyncExecutor::Job::CheckHeld(const std::vector<nlohmann::json>& records) const {
  if (!stage_) return Status::Ok();
  // A record without "held" is a node that holds every tensor.
  std::vector<bool> held(all_names_.size(), false);
  for (const nlohmann::json& r : records) {
    if (!r.is_object() || !r.contains("held")) return Status::Ok();
    const nlohmann::json& h = r["held"];
    if (!h.is_object() || !h.contains("of") || !h["of"].is_number_unsigned() ||
        h["of"].get<uint64_t>() != all_names_.size() || !h.contains("tensors") ||
        !h["tensors"].is_array()) {
      return DataLoss("a PREPARED record's 'held' is not {\"of\": " +
                      std::to_string(all_names_.size()) + ", \"tensors\": [...]}");
    }
    for (const nlohmann::json& i : h["tensors"]) {
      if (!i.is_number_unsigned() || i.get<uint64_t>() >= held.size()) {
        return DataLoss("a PREPARED record's 'held' names tensor " + i.dump());
      }
      held[i.get<uint64_t>()] = true;
    }
  }
  for (size_t i = 0; i < held.size(); ++i) {
    if (!held[i]) {
      return FailedPrecondition("the delta changes tensor '" + all_names_[i] +
                                "', which no node's engine registered (pipeline stages)");
    }
  }
  return Status::Ok();
}

Status ShmSyncExecutor::Job::CheckPartials(const std::vector<nlohmann::json>& partials) const {
  const size_t n = m_.tensors.size();
  std::vector<deltasync::AdlerDelta> parent(n), inc(n), full(n);
  std::vector<bool> seen(n, false);
  for (const nlohmann::json& p : partials) {
    if (p.is_null()) continue;
    if (!p.is_array()) return DataLoss("a PREPARED record's 'partial' is not an array");
    for (const nlohmann::json& e : p) {
      if (!e.is_array() || e.size() != 7) return DataLoss("a 'partial' entry is not 7 numbers");
      for (const nlohmann::json& v : e) {
        if (!v.is_number_unsigned()) return DataLoss("a 'partial' entry holds a non-integer");
      }
      const uint64_t i = e[0].get<uint64_t>();
      if (i >= n) return DataLoss("a 'partial' entry names tensor " + std::to_string(i));
      auto sums = [&](size_t k) {
        return deltasync::AdlerDelta::FromSums(
            static_cast<uint32_t>(e[k].get<uint64_t>() % 65521),
            static_cast<uint32_t>(e[k + 1].get<uint64_t>() % 65521));
      };
      parent[i].Merge(sums(1));
      inc[i].Merge(sums(3));
      full[i].Merge(sums(5));
      seen[i] = true;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (!partial_[i]) continue;
    const deltasync::DeltaTensor& t = m_.tensors[i];
    if (!seen[i]) return DataLoss("tensor '" + t.name + "': no node's sums");
    const uint32_t held = parent[i].Apply(deltasync::Adler32OfZeros(t.length), t.length);
    if (held != t.parent_adler32) {
      return FailedPrecondition("tensor '" + t.name +
                                "' (split over nodes): the nodes hold "
                                "Adler-32 " +
                                Hex(held) + ", the delta's parent is " + Hex(t.parent_adler32));
    }
    RETURN_IF_ERROR(deltasync::VerifyStagedTensor(t.name + "' (split over nodes",
                                                  plan_tables_[0][i], inc[i], full[i]));
  }
  return Status::Ok();
}

Status ShmSyncExecutor::Job::GroupDecide(const std::string& key) {
  GroupCommit& group = *ex_.options_.group;
  const auto t0 = Clock::now();
  const bool split = std::find(partial_.begin(), partial_.end(), true) != partial_.end();
  nlohmann::json fields = nlohmann::json::object();
  if (split) fields["partial"] = PartialJson();
  if (stage_) fields["held"] = {{"of", all_names_.size()}, {"tensors", held_}};
  auto d = group.PrepareAndAwait(key, request_.version, live_, request_.delta, sync_id_, fields,
                                 [this](const std::vector<nlohmann::json>& records) {
                                   std::vector<nlohmann::json> partials;
                                   for (const nlohmann::json& r : records) {
                                     partials.push_back(r.is_object() && r.contains("partial")
                                                            ? r["partial"]
                                                            : nlohmann::json());
                                   }
                                   RETURN_IF_ERROR(CheckPartials(partials));
                                   return CheckHeld(records);
                                 });
  Phase("group", MsSince(t0));
  RETURN_IF_ERROR(d.status());
  decision_ = *d;
  update_([&](SyncRecord& r) {
    if (r.group) r.group->decision_learnt = d->learnt;
  });
  if (!d->commit) {
    return FailedPrecondition("group '" + group.options().group +
                              "' decided ABORT (written by node '" + d->by + "'): " + d->reason);
  }
  MaybeStall("decided");
  return Status::Ok();
}

void ShmSyncExecutor::Job::AwaitCommitPoint() {
  const auto margin = ex_.options_.group->options().commit_margin;
  const int64_t wait_ns =
      std::clamp<int64_t>(decision_.commit_at_unix_ns - UnixNs(), 0,
                          std::chrono::duration_cast<std::chrono::nanoseconds>(margin).count());
  if (wait_ns > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait_ns));
  update_([&](SyncRecord& r) {
    if (!r.group) return;
    r.group->commit_at_unix_ns = decision_.commit_at_unix_ns;
    r.group->commit_wait_ms = static_cast<double>(wait_ns) / 1e6;
  });
}

void ShmSyncExecutor::Job::ReportGroupPauses(const std::string& key) {
  GroupCommit& group = *ex_.options_.group;
  update_([&](SyncRecord& r) {
    if (r.group) r.group->pause = pause_;
  });
  if (pause_.pause_start_ns <= 0) return;  // no rank confirmed: nothing to report
  Status published = group.PublishPause(key, pause_);
  auto view = group.AwaitPauses(key);
  update_([&](SyncRecord& r) {
    if (!r.group) return;
    if (view.ok()) {
      r.group->view = *view;
    } else {
      r.group->view_error = view.status().message();
    }
    if (!published.ok()) {
      r.group->view_error = "this node's pause was not published: " + published.message() +
                            (r.group->view_error.empty() ? "" : "; " + r.group->view_error);
    }
  });
}

}  // namespace deltakv::sidecar
