#include "shim/weight_checksum.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <thread>

namespace deltakv::shim {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxRangesPerBatch = 1 << 16;

struct Piece {
  uint64_t canonical = 0;
  uint64_t length = 0;
  uint64_t local = 0;
};

// One read of device bytes whose sums go to `target`.
struct Job {
  ChecksumRange range;
  deltasync::AdlerDelta* target;
};

// Runs the jobs in batches of at most chunk_bytes, pacing to the rate limit.
class JobRunner {
 public:
  JobRunner(DeviceBackend& backend, const ChecksumOptions& options)
      : backend_(backend), options_(options), start_(Clock::now()) {}

  Status Run(std::vector<Job>& jobs) {
    const uint64_t chunk = std::max<uint64_t>(options_.chunk_bytes, 4096);
    std::vector<ChecksumRange> batch;
    std::vector<deltasync::AdlerDelta*> targets;
    uint64_t batch_bytes = 0;
    auto flush = [&]() -> Status {
      if (batch.empty()) return Status::Ok();
      std::vector<deltasync::AdlerDelta> out(batch.size());
      RETURN_IF_ERROR(backend_.ChecksumRanges(batch, out));
      for (size_t i = 0; i < out.size(); ++i) targets[i]->Merge(out[i]);
      bytes_read_ += batch_bytes;
      batch.clear();
      targets.clear();
      batch_bytes = 0;
      return Pace();
    };
    for (Job& job : jobs) {
      for (uint64_t done = 0; done < job.range.bytes;) {
        const uint64_t n = std::min(job.range.bytes - done, chunk - batch_bytes);
        batch.push_back({static_cast<const uint8_t*>(job.range.device) + done, n,
                         job.range.position + done});
        targets.push_back(job.target);
        batch_bytes += n;
        done += n;
        // Bounded by bytes and by count (a layout of tiny pieces must not grow the batch).
        if (batch_bytes >= chunk || batch.size() >= kMaxRangesPerBatch) RETURN_IF_ERROR(flush());
      }
    }
    return flush();
  }

  uint64_t bytes_read() const { return bytes_read_; }

 private:
  Status Pace() {
    if (options_.keep_going && !options_.keep_going()) {
      return FailedPrecondition("the checksum pass was stopped");
    }
    if (options_.rate_bytes_per_s == 0) return Status::Ok();
    const auto due = start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                                  static_cast<double>(bytes_read_) /
                                  static_cast<double>(options_.rate_bytes_per_s)));
    // Sleep in short slices so a stop request is seen quickly.
    while (Clock::now() < due) {
      std::this_thread::sleep_for(std::min<Clock::duration>(due - Clock::now(),
                                                            std::chrono::milliseconds(50)));
      if (options_.keep_going && !options_.keep_going()) {
        return FailedPrecondition("the checksum pass was stopped");
      }
    }
    return Status::Ok();
  }

  DeviceBackend& backend_;
  const ChecksumOptions& options_;
  Clock::time_point start_;
  uint64_t bytes_read_ = 0;
};

// Sums for one tensor.
// Only ranks [node_lo, node_lo + node_count) count (the node's ranks); the owner of a byte is
// the lowest of them holding it, and other holders are named relative to node_lo.
Status ChecksumTensor(const LocalTensor& local, const deltasync::TensorLayout& layout,
                      uint32_t rank, uint32_t node_lo, uint32_t node_count, JobRunner& runner,
                      TensorSums* out) {
  std::vector<Piece> owned, replica;
  std::map<uint32_t, std::vector<Piece>> others;  // other ranks' non-owned pieces
  // Pieces come in (canonical offset, rank) order: the holders of one run are consecutive.
  bool any = false;
  uint64_t owner_offset = 0;
  RETURN_IF_ERROR(layout.ForEachPiece(0, layout.canonical_bytes(),
                                      [&](const deltasync::LayoutPiece& p) -> Status {
    if (p.rank < node_lo || p.rank - node_lo >= node_count) return Status::Ok();
    const bool owner = !any || p.canonical_offset != owner_offset;
    if (owner) {
      any = true;
      owner_offset = p.canonical_offset;
    }
    Piece piece{p.canonical_offset, p.length, p.local_offset};
    if (p.rank == rank) {
      if (p.local_offset > local.bytes || p.length > local.bytes - p.local_offset) {
        return Internal("layout piece outside the local tensor '" + local.name + "'");
      }
      (owner ? owned : replica).push_back(piece);
    } else if (!owner) {
      others[p.rank - node_lo].push_back(piece);
    }
    return Status::Ok();
  }));
  const auto* base = static_cast<const uint8_t*>(local.device);
  std::vector<deltasync::AdlerDelta> piece_sums(owned.size());
  std::deque<std::pair<uint32_t, deltasync::AdlerDelta>> partial_refs;  // stable addresses
  std::vector<std::pair<uint32_t, size_t>> whole_refs;                  // holder, owned piece
  std::vector<Job> jobs;
  for (size_t i = 0; i < owned.size(); ++i) {
    jobs.push_back({{base + owned[i].local, owned[i].length, owned[i].canonical}, &piece_sums[i]});
  }
  for (const Piece& p : replica) {
    jobs.push_back({{base + p.local, p.length, p.canonical}, &out->replica});
  }
  out->holds_replica = !replica.empty();
  // Each other rank's replica pieces against the pieces this rank owns (both sorted by
  // canonical offset and, within one rank, disjoint).
  for (const auto& [holder, pieces] : others) {
    for (const Piece& q : pieces) {
      const uint64_t q_end = q.canonical + q.length;
      auto it = std::upper_bound(owned.begin(), owned.end(), q.canonical,
                                 [](uint64_t c, const Piece& p) { return c < p.canonical; });
      if (it != owned.begin()) --it;
      for (; it != owned.end() && it->canonical < q_end; ++it) {
        const uint64_t begin = std::max(q.canonical, it->canonical);
        const uint64_t end = std::min(q_end, it->canonical + it->length);
        if (begin >= end) continue;
        const size_t index = static_cast<size_t>(it - owned.begin());
        if (begin == it->canonical && end == it->canonical + it->length) {
          whole_refs.push_back({holder, index});
        } else {
          partial_refs.push_back({holder, {}});
          jobs.push_back({{base + it->local + (begin - it->canonical), end - begin, begin},
                          &partial_refs.back().second});
        }
      }
    }
  }
  RETURN_IF_ERROR(runner.Run(jobs));
  for (const deltasync::AdlerDelta& d : piece_sums) out->owned.Merge(d);
  for (const auto& [holder, index] : whole_refs) out->refs[holder].Merge(piece_sums[index]);
  for (const auto& [holder, d] : partial_refs) out->refs[holder].Merge(d);
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<TensorSums>> ChecksumWeights(const std::vector<LocalTensor>& tensors,
                                                  const std::vector<deltasync::EngineTensor>& table,
                                                  uint32_t rank, DeviceBackend& backend,
                                                  const ChecksumOptions& options,
                                                  uint64_t* bytes_read, uint32_t node_lo,
                                                  uint32_t node_count) {
  if (tensors.size() != table.size()) return Internal("tensor lists disagree");
  JobRunner runner(backend, options);
  std::vector<TensorSums> sums(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    RETURN_IF_ERROR(ChecksumTensor(tensors[i], table[i].layout, rank, node_lo, node_count, runner,
                                   &sums[i])
                        .WithPrefix("tensor '" + tensors[i].name + "'"));
  }
  if (bytes_read != nullptr) *bytes_read = runner.bytes_read();
  return sums;
}

}  // namespace deltakv::shim
