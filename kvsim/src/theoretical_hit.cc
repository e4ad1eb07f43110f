// The theoretical hit rate of kvsim/theoretical_hit.h.
#include "kvsim/theoretical_hit.h"

#include <algorithm>
#include <unordered_map>

namespace deltakv::kvsim {

TheoreticalHit ComputeTheoreticalHit(const Corpus& corpus) {
  TheoreticalHit out;
  for (const Trace& t : corpus.traces) {
    HitCount h;
    std::vector<const TraceRequest*> reqs;
    for (const Conversation& c : t.conversations) {
      for (const TraceRequest& r : c.turns) reqs.push_back(&r);
    }
    std::stable_sort(reqs.begin(), reqs.end(),
                     [](const TraceRequest* a, const TraceRequest* b) { return a->t_s < b->t_s; });
    // Per hash id position chain: the earliest time a prefix ending in this block was done.
    // Keyed by (prefix digest) so that equal ids behind different prefixes do not match.
    std::unordered_map<uint64_t, double> avail;
    for (const TraceRequest* r : reqs) {
      ++h.requests;
      h.input_tokens += r->input_tokens;
      h.total_blocks += r->hash_ids.size();
      const double done = r->t_s + std::max(0.0, r->api_time_s);
      uint64_t key = 0x9E3779B97F4A7C15ull;
      bool hitting = true;
      uint64_t hits = 0;
      for (uint64_t id : r->hash_ids) {
        key = (key ^ (id + 0x632BE59BD9B4E019ull + (key << 6) + (key >> 2))) * 0xFF51AFD7ED558CCDull;
        auto it = avail.find(key);
        if (hitting && it != avail.end() && it->second <= r->t_s) {
          ++hits;
        } else {
          hitting = false;
        }
        if (it == avail.end()) {
          avail.emplace(key, done);
        } else {
          it->second = std::min(it->second, done);
        }
      }
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
