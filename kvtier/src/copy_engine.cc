#include "kvtier/copy_engine.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>

namespace deltakv::kvtier {
namespace {

bool Overlaps(const uint8_t* a, const uint8_t* b, uint64_t n) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x < y + n && y < x + n;
}

// One batch of the cpu engine, split into `pieces` byte ranges of the regions' concatenation.
class CpuCopyEvent final : public CopyEvent {
 public:
  CpuCopyEvent(std::vector<CopyRegion> regions, uint64_t total, uint32_t pieces)
      : regions_(std::move(regions)), total_(total), pieces_(pieces), remaining_(pieces) {
    timing_.submit_ns = CopyClockNs();
    starts_.reserve(regions_.size());
    uint64_t offset = 0;
    for (const CopyRegion& r : regions_) {
      starts_.push_back(offset);
      offset += r.bytes;
    }
  }

  bool Done() const override { return done_.load(std::memory_order_acquire); }

  Status Wait() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_.load(std::memory_order_acquire); });
    return Status::Ok();
  }

  bool WaitFor(std::chrono::nanoseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [this] { return done_.load(std::memory_order_acquire); });
  }

  CopyTiming Timing() const override {
    CopyTiming t = timing_;
    t.done_ns = Done() ? done_ns_.load(std::memory_order_relaxed) : 0;
    return t;
  }

  uint32_t pieces() const { return pieces_; }
  uint64_t PieceBegin(uint32_t piece) const { return total_ * piece / pieces_; }
  uint64_t PieceBytes(uint32_t piece) const { return PieceBegin(piece + 1) - PieceBegin(piece); }

  // Copies piece `piece`; the last piece to finish completes the batch.
  void RunPiece(uint32_t piece) {
    uint64_t begin = PieceBegin(piece);
    const uint64_t end = PieceBegin(piece + 1);
    size_t r = std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin() - 1;
    while (begin < end && r < regions_.size()) {
      const CopyRegion& region = regions_[r];
      const uint64_t offset = begin - starts_[r];
      const uint64_t n = std::min(region.bytes - offset, end - begin);
      if (n > 0) std::memcpy(region.dst + offset, region.src + offset, n);
      begin += n;
      ++r;
    }
    // acq_rel: the last finisher's release of `done_` carries every piece's writes.
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) Complete();
  }

  void Complete() {
    done_ns_.store(CopyClockNs(), std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
  }

 private:
  const std::vector<CopyRegion> regions_;
  std::vector<uint64_t> starts_;  // offset of each region in the concatenation
  const uint64_t total_;
  const uint32_t pieces_;
  std::atomic<uint32_t> remaining_;
  CopyTiming timing_;
  std::atomic<uint64_t> done_ns_{0};
  std::atomic<bool> done_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

struct PieceTask {
  std::shared_ptr<CpuCopyEvent> event;
  uint32_t piece = 0;
};

}  // namespace

std::string_view CopyDirectionName(CopyDirection direction) {
  switch (direction) {
    case CopyDirection::kToPool:
      return "to_pool";
    case CopyDirection::kFromPool:
      return "from_pool";
  }
  return "unknown";
}

uint64_t CopyClockNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

StatusOr<uint64_t> ValidateCopyRegions(const std::vector<CopyRegion>& regions) {
  uint64_t total = 0;
  for (size_t i = 0; i < regions.size(); ++i) {
    const CopyRegion& r = regions[i];
    if (r.bytes == 0) continue;
    const std::string where = "copy region " + std::to_string(i) + " of " +
                              std::to_string(regions.size()) + " (" + std::to_string(r.bytes) +
                              " bytes)";
    if (r.src == nullptr || r.dst == nullptr) {
      return InvalidArgument(where + ": null source or destination");
    }
    if (Overlaps(r.src, r.dst, r.bytes)) {
      return InvalidArgument(where + ": source and destination overlap");
    }
    if (total + r.bytes < total) return InvalidArgument(where + ": total byte count overflows");
    total += r.bytes;
  }
  return total;
}

// ---- CpuCopyEngine ---------------------------------------------------------------------------

class CpuCopyEngine::Impl {
 public:
  explicit Impl(const CpuCopyEngineOptions& options) : options_(options) {}

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : workers_) t.join();  // workers drain the queue before exiting
  }

  Status Start() {
    try {
      for (uint32_t i = 0; i < options_.threads; ++i) workers_.emplace_back([this] { Work(); });
    } catch (const std::system_error& e) {
      return IoError(std::string("cpu copy engine: cannot start a worker thread: ") + e.what());
    }
    return Status::Ok();
  }

  StatusOr<CopyCompletion> Submit(std::vector<CopyRegion> regions) {
    ASSIGN_OR_RETURN(uint64_t total, ValidateCopyRegions(regions));
    const uint64_t by_size = std::max<uint64_t>(1, total / options_.min_piece_bytes);
    const auto pieces = static_cast<uint32_t>(
        std::clamp<uint64_t>(by_size, 1, std::max<uint32_t>(1, options_.threads)));
    auto event = std::make_shared<CpuCopyEvent>(std::move(regions), total, pieces);
    if (options_.threads == 0 || total == 0) {
      for (uint32_t p = 0; p < pieces; ++p) event->RunPiece(p);
      return CopyCompletion(std::move(event));
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (options_.max_queued_bytes > 0) {
        space_cv_.wait(lock, [&] {
          return queued_bytes_ == 0 || queued_bytes_ + total <= options_.max_queued_bytes;
        });
      }
      queued_bytes_ += total;
      for (uint32_t p = 0; p < pieces; ++p) queue_.push_back(PieceTask{event, p});
    }
    if (pieces == 1) {
      work_cv_.notify_one();
    } else {
      work_cv_.notify_all();
    }
    return CopyCompletion(std::move(event));
  }

  uint32_t threads() const { return options_.threads; }

 private:
  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      PieceTask task = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      const uint64_t bytes = task.event->PieceBytes(task.piece);
      task.event->RunPiece(task.piece);
      task.event.reset();
      lock.lock();
      queued_bytes_ -= bytes;
      if (options_.max_queued_bytes > 0) space_cv_.notify_all();
    }
  }

  const CpuCopyEngineOptions options_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable space_cv_;
  std::deque<PieceTask> queue_;  // GUARDED_BY(mu_)
  uint64_t queued_bytes_ = 0;    // GUARDED_BY(mu_)
  bool stop_ = false;            // GUARDED_BY(mu_)
};

CpuCopyEngine::CpuCopyEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CpuCopyEngine::~CpuCopyEngine() = default;

StatusOr<std::unique_ptr<CpuCopyEngine>> CpuCopyEngine::Create(
    const CpuCopyEngineOptions& options) {
  if (options.min_piece_bytes == 0) {
    return InvalidArgument("cpu copy engine: min_piece_bytes must be at least 1");
  }
  auto impl = std::make_unique<Impl>(options);
  RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<CpuCopyEngine>(new CpuCopyEngine(std::move(impl)));
}

StatusOr<CopyCompletion> CpuCopyEngine::Submit(CopyDirection /*direction*/,
                                               std::vector<CopyRegion> regions) {
  return impl_->Submit(std::move(regions));
}

uint32_t CpuCopyEngine::threads() const { return impl_->threads(); }

}  // namespace deltakv::kvtier
