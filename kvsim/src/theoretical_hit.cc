// The theoretical hit rate of kvsim/theoretical_hit.h.
#include "kvsim/theoretical_hit.h"

#include <algorithm>
#include <unordered_map>

namespace deltakv::kvsim {

TheoreticalHit ComputeTheoreticalHit(const Corpus& corpus, Availability availability) {
  TheoreticalHit out;
  for (const Trace& t : corpus.traces) {
    HitCount h;
    // aiperf's global order: by start time, ties broken by position in the file. A root turn k
    // is (t, k, 0, 0); a subagent's turn k is (t, spawn_after, conversation, k), which puts it
    // after the root turn that spawns it and before the next; a Mooncake record is (t, c, 0, 0).
    struct Item {
      double t;
      int64_t a, b, k;
      const TraceRequest* r;
    };
    std::vector<Item> items;
    for (size_t c = 0; c < t.conversations.size(); ++c) {
      const Conversation& cv = t.conversations[c];
      for (size_t k = 0; k < cv.turns.size(); ++k) {
        const int64_t ki = static_cast<int64_t>(k), ci = static_cast<int64_t>(c);
        Item it{cv.turns[k].t_s, ki, 0, 0, &cv.turns[k]};
        if (t.sessions_independent) {
          it.a = ci;
        } else if (c > 0) {
          it.a = cv.spawn_after;
          it.b = ci;
          it.k = ki;
        }
        items.push_back(it);
      }
    }
    std::sort(items.begin(), items.end(), [](const Item& x, const Item& y) {
      if (x.t != y.t) return x.t < y.t;
      if (x.a != y.a) return x.a < y.a;
      if (x.b != y.b) return x.b < y.b;
      return x.k < y.k;
    });
    // Per hash id: the earliest time a request that had it was done (causal) or had arrived.
    // Ids are prefix hashes in both formats, so an id matches only behind its own prefix.
    std::unordered_map<uint64_t, double> avail;
    for (const Item& item : items) {
      const TraceRequest* r = item.r;
      ++h.requests;
      h.input_tokens += r->input_tokens;
      h.total_blocks += r->hash_ids.size();
      const double done =
          availability == Availability::kCausal ? r->t_s + std::max(0.0, r->api_time_s) : r->t_s;
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
