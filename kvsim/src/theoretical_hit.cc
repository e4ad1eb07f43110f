// The theoretical hit rate of kvsim/theoretical_hit.h.
#include "kvsim/theoretical_hit.h"

#include <algorithm>
#include <unordered_map>

namespace deltakv::kvsim {

TheoreticalHit ComputeTheoreticalHit(const Corpus& corpus, Availability availability) {
  TheoreticalHit out;
  for (const Trace& t : corpus.traces) {
    HitCount h;
    std::vector<const TraceRequest*> reqs;
    for (const Conversation& c : t.conversations) {
      for (const TraceRequest& r : c.turns) reqs.push_back(&r);
    }
    std::stable_sort(reqs.begin(), reqs.end(),
                     [](const TraceRequest* a, const TraceRequest* b) { return a->t_s < b->t_s; });
    // Per hash id: the earliest time a request that had it was done (causal) or had arrived.
    // Ids are prefix hashes in both formats, so an id matches only behind its own prefix.
    std::unordered_map<uint64_t, double> avail;
    for (const TraceRequest* r : reqs) {
      ++h.requests;
      h.input_tokens += r->input_tokens;
      h.total_blocks += r->hash_ids.size();
      const double done = availability == Availability::kCausal
                              ? r->t_s + std::max(0.0, r->api_time_s)
                              : r->t_s;
      bool hitting = true;
      uint64_t hits = 0;
      // Register after the lookup so that a request never hits on itself.
      std::vector<uint64_t> fresh;
      for (uint64_t key : r->hash_ids) {
        auto it = avail.find(key);
        if (hitting && it != avail.end() && it->second <= r->t_s) {
          ++hits;
        } else {
          hitting = false;
        }
        if (it == avail.end()) {
          fresh.push_back(key);
        } else {
          it->second = std::min(it->second, done);
        }
      }
      for (uint64_t key : fresh) avail.emplace(key, done);
      h.hit_blocks += hits;
      h.hit_tokens += std::min<uint64_t>(r->input_tokens, hits * t.block_size);
    }
    out.total.requests += h.requests;
    out.total.input_tokens += h.input_tokens;
    out.total.hit_tokens += h.hit_tokens;
    out.total.total_blocks += h.total_blocks;
    out.total.hit_blocks += h.hit_blocks;
    out.per_trace.push_back(h);
  }
  return out;
}

}  // namespace deltakv::kvsim
