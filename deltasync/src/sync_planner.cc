#include "deltasync/sync_planner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <set>
#include <mutex>
#include <thread>

#include "deltasync/applier.h"
#include "deltasync/xor_decoder.h"
#include "plan_sink.h"
#include "sha256.h"

namespace deltakv::deltasync {

namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct FrameRef {
  uint32_t tensor;
  const DeltaFrame* frame;
};

// Pipelined decode: walker threads walk frames and hand them to the planning thread in chunks,
// which it takes in frame order, so walking and planning overlap. For an output that takes
// records (PlanOutput::TakesRecorded) a walker routes each frame's pieces itself, per rank, into
// records (RecordsOutput: `ranks`), and the planning thread only appends them to its rank's
// plan (PlanOutput::AddRecorded), so routing runs on every walker thread and the planning
// thread's work per changed byte is a copy. Otherwise the walker streams its nonzero bytes
// (`entries` from a decoder that delivers them one by one, NonzeroSink::OnBytes; `runs` and
// `bytes` from one that delivers runs) and the planning thread routes them.
struct RunChunk {
  std::vector<RecordedRank> ranks;
  std::vector<std::pair<uint64_t, uint32_t>> runs;  // (position, length)
  std::vector<uint8_t> bytes;                       // the runs' bytes, back to back
  std::vector<uint64_t> entries;                    // position << 8 | value, base 0
  bool empty() const { return ranks.empty() && runs.empty() && entries.empty(); }
  uint64_t Bytes() const {
    uint64_t n = runs.size() * sizeof(runs[0]) + bytes.size() + entries.size() * sizeof(uint64_t);
    for (const RecordedRank& r : ranks) n += r.writer.records().size();
    return n;
  }
};

// The chunks of the frames in flight: each frame's produced by one walker thread, all consumed
// by the planning thread in frame order. Frame i uses slot i % slots (frames in flight lie in
// [front, front + slots)). Frames may queue chunks until all the queued chunks together reach
// `budget` bytes (the front frame, the one being planned, at least kFrontQueued), so a walker
// that runs ahead of the planner keeps walking a long frame instead of waiting for the frames
// before it to be planned. Cancel() releases every waiting producer.
class FrameQueues {
 public:
  static constexpr size_t kFrontQueued = 4;
  FrameQueues(size_t slots, uint64_t budget) : slots_(slots), budget_(budget) {}

  // Queues a chunk of `frame`; false when cancelled (the producer should stop).
  bool Push(size_t frame, RunChunk chunk) {
    const uint64_t size = chunk.Bytes();
    std::unique_lock<std::mutex> lock(mu_);
    Slot& s = slots_[frame % slots_.size()];
    cv_.wait(lock, [&] {
      return cancelled_ || queued_ + size <= budget_ || queued_ == 0 ||
             (frame == front_ && s.chunks.size() < kFrontQueued);
    });
    if (cancelled_) return false;
    queued_ += size;
    s.chunks.push_back(std::move(chunk));
    cv_.notify_all();
    return true;
  }
  void Finish(size_t frame, StatusOr<DecodeResult> result) {
    std::lock_guard<std::mutex> lock(mu_);
    Slot& s = slots_[frame % slots_.size()];
    s.result = std::move(result);
    s.done = true;
    cv_.notify_all();
  }
  enum class Next { kChunk, kDone, kNone };
  // The front frame's next chunk (kChunk, in *chunk); kDone once its producer finished and every
  // chunk was taken; without `wait`, kNone when no chunk is ready yet.
  Next Pop(RunChunk* chunk, bool wait) {
    std::unique_lock<std::mutex> lock(mu_);
    Slot& s = slots_[front_ % slots_.size()];
    if (wait) cv_.wait(lock, [&] { return !s.chunks.empty() || s.done; });
    if (s.chunks.empty()) return s.done ? Next::kDone : Next::kNone;
    *chunk = std::move(s.chunks.front());
    s.chunks.pop_front();
    queued_ -= chunk->Bytes();
    cv_.notify_all();
    return Next::kChunk;
  }
  // The front frame's result. REQUIRES: Pop returned kDone.
  const StatusOr<DecodeResult>& result() const { return slots_[front_ % slots_.size()].result; }
  // Moves on to the next frame; its slot is ready for frame front + slots. REQUIRES: Pop
  // returned kDone, or the front frame was decoded without the queues.
  void Advance() {
    std::lock_guard<std::mutex> lock(mu_);
    Slot& s = slots_[front_ % slots_.size()];
    s.done = false;
    s.result = DecodeResult{};
    ++front_;
    cv_.notify_all();
  }
  void Cancel() {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    cv_.notify_all();
  }

 private:
  struct Slot {
    std::deque<RunChunk> chunks;
    bool done = false;
    StatusOr<DecodeResult> result = DecodeResult{};
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;
  const uint64_t budget_;
  uint64_t queued_ = 0;  // bytes of every queued chunk
  size_t front_ = 0;
  bool cancelled_ = false;
};

// The walker's sink on a walker thread, for an output that takes no records: runs gathered into
// chunks of about kChunkBytes.
class StreamSink final : public NonzeroSink {
 public:
  static constexpr size_t kChunkBytes = 64 << 10;
  StreamSink(FrameQueues* queues, size_t frame) : queues_(queues), frame_(frame) {}
  Status OnRun(uint64_t pos, std::span<const uint8_t> bytes) override {
    if (!chunk_.entries.empty()) RETURN_IF_ERROR(Send());  // a chunk holds one kind
    chunk_.runs.push_back({pos, static_cast<uint32_t>(bytes.size())});
    chunk_.bytes.insert(chunk_.bytes.end(), bytes.begin(), bytes.end());
    if (chunk_.bytes.size() >= kChunkBytes || chunk_.runs.size() >= kChunkBytes / 4) {
      return Send();
    }
    return Status::Ok();
  }
  // The walker's bytes as they come (no runs built on this thread), rebased to position 0.
  bool TakesBytes() const override { return true; }
  Status OnBytes(const uint64_t* entries, size_t count, uint64_t base) override {
    if (!chunk_.runs.empty()) RETURN_IF_ERROR(Send());
    const size_t at = chunk_.entries.size();
    chunk_.entries.resize(at + count);
    uint64_t* out = chunk_.entries.data() + at;
    if (base == 0) {
      std::memcpy(out, entries, count * sizeof(uint64_t));
    } else {
      for (size_t i = 0; i < count; ++i) out[i] = entries[i] + (base << 8);
    }
    if (chunk_.entries.size() >= kChunkBytes / sizeof(uint64_t)) return Send();
    return Status::Ok();
  }
  Status Send() {
    if (chunk_.empty()) return Status::Ok();
    if (!queues_->Push(frame_, std::move(chunk_))) return Internal("planning stopped");
    chunk_ = RunChunk();
    return Status::Ok();
  }

 private:
  FrameQueues* queues_;
  size_t frame_;
  RunChunk chunk_;
};

// One ranged read: [offset, offset + length) of an object, covering whole frames.
struct FetchWindow {
  std::string object;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::vector<FrameRef> frames;
};

// Frames grouped by object (each object read once, front to back) and cut into windows.
// Frames `keep` rejects are left out (and the objects holding them named in *partial); a gap
// between kept frames starts a new window, so skipped bytes are never read.
std::vector<FetchWindow> PlanWindows(const DeltaManifest& m, uint64_t window_bytes,
                                     uint64_t first_window_bytes,
                                     const PlannerOptions::FrameFilter& keep,
                                     std::set<std::string>* partial) {
  std::map<std::string, std::vector<FrameRef>> by_object;
  for (uint32_t i = 0; i < m.tensors.size(); ++i) {
    for (const DeltaFrame& f : m.tensors[i].frames) {
      if (keep && !keep(i, f.offset, f.length)) {
        partial->insert(f.object);
        continue;
      }
      by_object[f.object].push_back({i, &f});
    }
  }
  std::vector<FetchWindow> out;
  // The first window is small so that decoding starts after a short read; each next one may be
  // twice the last, up to window_bytes (it is fetched while the one before it decodes).
  uint64_t limit = std::min(window_bytes, std::max<uint64_t>(first_window_bytes, 1));
  for (auto& [object, frames] : by_object) {
    std::sort(frames.begin(), frames.end(), [](const FrameRef& a, const FrameRef& b) {
      return a.frame->object_offset < b.frame->object_offset;
    });
    FetchWindow* w = nullptr;
    for (const FrameRef& fr : frames) {
      const uint64_t begin = fr.frame->object_offset;
      const uint64_t end = begin + fr.frame->compressed_length;
      if (w == nullptr || begin < w->offset || end - w->offset > limit ||
          (!partial->empty() && begin > w->offset + w->length)) {
        if (w != nullptr) limit = limit > window_bytes / 2 ? window_bytes : limit * 2;
        out.push_back({object, begin, 0, {}});
        w = &out.back();
      }
      w->length = std::max(w->length, end - w->offset);
      w->frames.push_back(fr);
    }
  }
  return out;
}

// SHA-256 of each object that records one, fed with the fetch windows in object order (the
// windows of one object come front to back); gaps between windows and the tail after the last
// are read from the store, so every byte of the object is hashed exactly once.
class StreamDigests {
 public:
  StreamDigests(const DeltaManifest& m, ObjectStore& store, bool enabled,
                const std::set<std::string>& skip)
      : store_(store) {
    if (!enabled) return;
    for (const DeltaObject& o : m.objects) {
      if (!o.sha256.empty() && skip.count(o.name) == 0) objects_.emplace(o.name, Digest{&o, std::make_unique<Sha256>(), 0});
    }
  }

  // `bytes` are [offset, offset + size) of `object`. Returns the gap bytes it had to read.
  StatusOr<uint64_t> Add(const std::string& object, uint64_t offset, std::string_view bytes) {
    auto it = objects_.find(object);
    if (it == objects_.end()) return uint64_t{0};
    Digest& d = it->second;
    uint64_t read = 0;
    if (offset > d.next) {
      ASSIGN_OR_RETURN(read, HashFromStore(d, offset));
    }
    const uint64_t end = offset + bytes.size();
    if (end > d.next) {
      std::string_view rest = bytes.substr(d.next - offset);
      d.sha->Update({reinterpret_cast<const uint8_t*>(rest.data()), rest.size()});
      d.next = end;
    }
    return read;
  }

  // Hashes what is left of every object and compares. DataLoss names the object.
  StatusOr<uint64_t> Finish() {
    uint64_t read = 0;
    for (auto& [name, d] : objects_) {
      ASSIGN_OR_RETURN(uint64_t n, HashFromStore(d, d.object->size));
      read += n;
      const std::string actual = d.sha->HexDigest();
      if (actual != d.object->sha256) {
        return DataLoss("delta object '" + name + "': sha256 mismatch: expected " +
                        d.object->sha256 + ", actual " + actual);
      }
    }
    return read;
  }

 private:
  struct Digest {
    const DeltaObject* object;
    std::unique_ptr<Sha256> sha;
    uint64_t next;  // bytes [0, next) are hashed
  };

  StatusOr<uint64_t> HashFromStore(Digest& d, uint64_t until) {
    uint64_t read = 0;
    while (d.next < until) {
      const uint64_t n = std::min<uint64_t>(until - d.next, 16ull << 20);
      ASSIGN_OR_RETURN(std::string bytes, store_.ReadRange(d.object->name, d.next, n));
      d.sha->Update({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
      d.next += n;
      read += n;
    }
    return read;
  }

  ObjectStore& store_;
  std::map<std::string, Digest, std::less<>> objects_;
};

// The compressed bytes of frame `f`, from the fetched bytes of its window `w`.
std::span<const uint8_t> FrameInput(const FetchWindow& w, const std::string& bytes,
                                    const DeltaFrame& f) {
  return {reinterpret_cast<const uint8_t*>(bytes.data()) + (f.object_offset - w.offset),
          f.compressed_length};
}

// Frame decoding with decode_threads >= 2, as one pipeline over all windows: a fetch thread
// reads the windows in order (holding the bytes of at most two: the window being planned and
// the next; one without prefetch); decode_threads - 1 walker threads decode frames in frame
// order across window boundaries (a frame is claimed once its window is fetched and at most
// `ahead` frames beyond the one being planned) and queue their chunks; the calling thread plans
// each walker's frame in frame order as its chunks arrive and, whenever the frame it is on has
// no chunk ready, decodes the next frame nobody has claimed itself, straight into the output
// (out of frame order), so on N CPUs all N threads decode. There is no barrier at the end of a
// window: walkers go on into the next window while the last frames of one are still planned.
template <typename Fetch, typename Where, typename SinkFor, typename Account, typename PlanFrame>
Status DecodePipelined(const std::vector<FetchWindow>& windows, const PlannerOptions& opt,
                       XorDecoder& decoder, PlanOutput& out, uint32_t ranks, uint32_t tensors,
                       Fetch& fetch, Where& where, SinkFor& sink_for, Account& account,
                       PlanFrame& plan_frame, PlanStats* stats) {
  struct Item {
    size_t window;
    FrameRef ref;
  };
  std::vector<Item> frames;
  for (size_t k = 0; k < windows.size(); ++k) {
    for (const FrameRef& fr : windows[k].frames) frames.push_back({k, fr});
  }
  if (frames.empty()) return Status::Ok();
  const size_t walkers = std::min<size_t>(opt.decode_threads - 1, frames.size());
  const bool records = out.TakesRecorded();
  // Record buffers come back once appended: as many as the queues may hold, and the walkers'
  // open ones.
  RecordBufferPool buffers(opt.queued_chunk_bytes / RecordsOutput::kChunkBytes +
                           4 * ranks * (walkers + 1));
  // Walkers claim frames up to `ahead` beyond the one being planned, so one that finishes a
  // short frame goes on to the next while another still walks a long one.
  const size_t ahead = 4 * (walkers + 1);
  const size_t held = opt.prefetch ? 2 : 1;
  FrameQueues queues(ahead, std::max<uint64_t>(opt.queued_chunk_bytes, 1));
  std::vector<std::string> bytes(windows.size());
  std::vector<Status> fetch_errors(windows.size());
  std::mutex mu;
  std::condition_variable cv;
  size_t fetched = 0;   // windows [0, fetched) have their bytes or their error
  size_t released = 0;  // windows [0, released) are planned and their bytes freed
  size_t next_frame = 0, planning = 0;
  bool stop = false;
  auto fetch_main = [&] {
    for (size_t k = 0; k < windows.size(); ++k) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || k < released + held; });
        if (stop) return;
      }
      StatusOr<std::string> got = fetch(windows[k]);
      std::lock_guard<std::mutex> lock(mu);
      if (got.ok()) {
        bytes[k] = std::move(got).value();
      } else {
        fetch_errors[k] = got.status();
      }
      fetched = k + 1;
      cv.notify_all();
      if (!got.ok()) return;
    }
  };
  auto walker_main = [&] {
    auto d = MakeXorDecoder(opt.decoder);
    for (;;) {
      size_t i;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] {
          return stop || next_frame >= frames.size() ||
                 (next_frame < planning + ahead && frames[next_frame].window < fetched);
        });
        if (stop || next_frame >= frames.size()) return;
        i = next_frame++;
      }
      const Item& item = frames[i];
      if (!d.ok()) {
        queues.Finish(i, d.status());
        continue;
      }
      if (!fetch_errors[item.window].ok()) {  // written before `fetched` passed the window
        queues.Finish(i, fetch_errors[item.window]);
        continue;
      }
      const DeltaFrame& f = *item.ref.frame;
      const std::span<const uint8_t> input =
          FrameInput(windows[item.window], bytes[item.window], f);
      StatusOr<DecodeResult> r = DecodeResult{};
      if (records) {
        // Routed here, into records (through the output's walker view, if it has one).
        RecordsOutput recorded(
            ranks, tensors,
            [&](std::vector<RecordedRank> chunk_ranks) {
              RunChunk chunk;
              chunk.ranks = std::move(chunk_ranks);
              if (!queues.Push(i, std::move(chunk))) return Internal("planning stopped");
              return Status::Ok();
            },
            &buffers);
        std::unique_ptr<PlanOutput> view = out.WalkerView(recorded);
        PlanSink sink = sink_for(item.ref, view ? *view : recorded);
        r = DecodeDeltaFrame(**d, input, f.length, opt.max_window_log, sink, where(item.ref),
                             f.xor_digest);
        if (r.ok()) {
          Status s = sink.Flush();
          if (s.ok()) s = recorded.Send();
          if (!s.ok()) r = s;
        }
      } else {
        StreamSink sink(&queues, i);
        r = DecodeDeltaFrame(**d, input, f.length, opt.max_window_log, sink, where(item.ref),
                             f.xor_digest);
        if (r.ok()) {
          if (Status s = sink.Send(); !s.ok()) r = s;
        }
      }
      queues.Finish(i, std::move(r));
    }
  };
  std::thread fetcher(fetch_main);
  std::vector<std::thread> pool;
  for (size_t t = 0; t < walkers; ++t) pool.emplace_back(walker_main);
  // Stops and joins every thread on every way out (an error returns from the loop below).
  struct Joiner {
    std::thread& fetcher;
    std::vector<std::thread>& pool;
    FrameQueues& queues;
    std::mutex& mu;
    std::condition_variable& cv;
    bool& stop;
    ~Joiner() {
      {
        std::lock_guard<std::mutex> lock(mu);
        stop = true;
        cv.notify_all();
      }
      queues.Cancel();
      for (std::thread& t : pool) t.join();
      fetcher.join();
    }
  } joiner{fetcher, pool, queues, mu, cv, stop};
  // Decodes frame j on this thread, straight into its sink; a failed fetch of its window is
  // returned instead. REQUIRES: j's window is fetched (or failed) and not released.
  auto plan_here = [&](size_t j) -> Status {
    const Item& item = frames[j];
    if (!fetch_errors[item.window].ok()) return fetch_errors[item.window];
    return plan_frame(
        decoder, FrameInput(windows[item.window], bytes[item.window], *item.ref.frame), item.ref);
  };
  std::vector<bool> self_planned(frames.size(), false);
  size_t i = 0;
  for (size_t k = 0; k < windows.size(); ++k) {
    const auto t0 = Clock::now();
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return fetched > k; });
    }
    stats->fetch_ms += MsSince(t0);
    if (!fetch_errors[k].ok()) return fetch_errors[k];
    stats->bytes_fetched += bytes[k].size();
    const auto t1 = Clock::now();
    for (; i < frames.size() && frames[i].window == k; ++i) {
      if (!self_planned[i]) {
        bool mine = false;  // no walker has taken this frame: decode it here
        {
          std::lock_guard<std::mutex> lock(mu);
          if (next_frame == i) {
            ++next_frame;
            mine = true;
          }
        }
        if (mine) {
          RETURN_IF_ERROR(plan_here(i));
        } else {
          PlanSink sink = sink_for(frames[i].ref, out);  // for bytes streamed (no records)
          RunChunk chunk;
          for (;;) {
            FrameQueues::Next next = queues.Pop(&chunk, /*wait=*/false);
            if (next == FrameQueues::Next::kNone) {
              // Nothing to plan yet: walk a frame no walker has taken (planned now, out of
              // frame order), or wait for the next chunk.
              size_t j = frames.size();
              {
                std::lock_guard<std::mutex> lock(mu);
                if (next_frame < frames.size() && frames[next_frame].window < fetched) {
                  j = next_frame++;
                }
              }
              if (j < frames.size()) {
                RETURN_IF_ERROR(plan_here(j));
                self_planned[j] = true;
                continue;
              }
              next = queues.Pop(&chunk, /*wait=*/true);
            }
            if (next == FrameQueues::Next::kDone) break;
            for (RecordedRank& r : chunk.ranks) {
              RETURN_IF_ERROR(out.AddRecorded(r.rank, r.writer));
              buffers.Give(std::move(r));
            }
            if (!chunk.entries.empty()) {
              RETURN_IF_ERROR(sink.OnBytes(chunk.entries.data(), chunk.entries.size(), 0));
            }
            uint64_t at = 0;
            for (const auto& [pos, len] : chunk.runs) {
              RETURN_IF_ERROR(
                  sink.OnRun(pos, std::span<const uint8_t>(chunk.bytes.data() + at, len)));
              at += len;
            }
          }
          if (!queues.result().ok()) return queues.result().status();
          RETURN_IF_ERROR(sink.Flush());
          account(*queues.result());
        }
      }
      queues.Advance();
      std::lock_guard<std::mutex> lock(mu);
      planning = i + 1;
      cv.notify_all();
    }
    std::string().swap(bytes[k]);  // no walker reads a planned window
    {
      std::lock_guard<std::mutex> lock(mu);
      released = k + 1;
      cv.notify_all();
    }
    stats->decode_ms += MsSince(t1);
    if (opt.progress) opt.progress(k + 1, windows.size());
  }
  return Status::Ok();
}

}  // namespace

Status WriterPlanOutput::Add(uint32_t rank, uint32_t tensor, uint64_t local_offset,
                             uint64_t canonical_offset, std::span<const uint8_t> xor_bytes,
                             bool owner) {
  if (rank >= writers_.size()) return Internal("layout names rank beyond the plan writers");
  return writers_[rank].Add(tensor, local_offset, canonical_offset, xor_bytes, owner);
}

Status PlanOutput::AddRecorded(uint32_t rank, const WritePlanWriter& records) {
  return WritePlanWriter::ForEachRecorded(
      records.records(), records.version(),
      [&](uint32_t tensor, uint64_t local, uint64_t canonical, std::span<const uint8_t> bytes,
          bool owner) {
        if (AddShort(rank, tensor, local, canonical, bytes, owner)) return Status::Ok();
        return Add(rank, tensor, local, canonical, bytes, owner);
      });
}

Status WriterPlanOutput::AddRecorded(uint32_t rank, const WritePlanWriter& records) {
  if (rank < writers_.size() && writers_[rank].AppendFrom(records)) return Status::Ok();
  return PlanOutput::AddRecorded(rank, records);
}

StatusOr<std::vector<std::vector<PlanTensor>>> PlanTensorTables(const DeltaManifest& m,
                                                                const RankTensorTables& ranks,
                                                                uint32_t layout_world) {
  if (layout_world == 0) layout_world = static_cast<uint32_t>(ranks.size());
  if (ranks.empty()) return FailedPrecondition("no engine ranks are registered");
  std::vector<std::vector<PlanTensor>> out(ranks.size());
  for (const DeltaTensor& t : m.tensors) {
    const RankTensorEntry* first = nullptr;
    for (size_t r = 0; r < ranks.size(); ++r) {
      auto it = ranks[r].find(t.name);
      if (it == ranks[r].end()) {
        return InvalidArgument("the delta changes tensor '" + t.name + "', which engine rank " +
                               std::to_string(r) + " did not register");
      }
      const RankTensorEntry& e = it->second;
      if (first == nullptr) {
        first = &e;
        if (e.layout.canonical_bytes() != t.length) {
          return InvalidArgument("tensor '" + t.name + "': the delta has " +
                                 std::to_string(t.length) + " bytes, the engine's layout " +
                                 std::to_string(e.layout.canonical_bytes()));
        }
        if (e.layout.world() != layout_world) {
          return InvalidArgument("tensor '" + t.name + "': layout spans " +
                                 std::to_string(e.layout.world()) + " ranks, the group has " +
                                 std::to_string(layout_world));
        }
      } else if (!(e.layout.spec() == first->layout.spec())) {
        return InvalidArgument("tensor '" + t.name + "': ranks registered different layouts");
      }
      uint32_t flags = t.length < kFullVerifyBelowBytes ? kPlanTensorFullVerify : 0;
      out[r].push_back({e.index, flags, t.length, t.parent_adler32, t.adler32});
    }
  }
  return out;
}

StatusOr<PlanStats> BuildSyncPlans(const DeltaManifest& m, ObjectStore& store,
                                   const RankTensorTables& ranks, PlanOutput& out,
                                   const PlannerOptions& opt) {
  PlanStats stats;
  stats.tensors = m.tensors.size();
  ASSIGN_OR_RETURN(std::unique_ptr<XorDecoder> decoder, MakeXorDecoder(opt.decoder));
  std::vector<const TensorLayout*> layouts;
  std::map<uint32_t, std::vector<uint8_t>> dense;  // small tensors, decoded whole
  for (uint32_t i = 0; i < m.tensors.size(); ++i) {
    const DeltaTensor& t = m.tensors[i];
    layouts.push_back(&ranks[0].find(t.name)->second.layout);
    if (t.length < kFullVerifyBelowBytes) dense[i].assign(t.length, 0);
  }
  // Objects shorter than the manifest says fail here, with a clear message, before any read.
  for (const DeltaObject& o : m.objects) {
    auto t0 = Clock::now();
    ASSIGN_OR_RETURN(uint64_t size, store.Size(o.name));
    stats.fetch_ms += MsSince(t0);
    if (size != o.size) {
      return DataLoss("delta object '" + o.name + "' is " + std::to_string(size) +
                      " bytes but the manifest says " + std::to_string(o.size) +
                      (size < o.size ? " (truncated)" : ""));
    }
  }
  std::set<std::string> partial = opt.partial_objects;
  const std::vector<FetchWindow> windows =
      PlanWindows(m, std::max<uint64_t>(opt.fetch_window_bytes, 1), opt.first_fetch_window_bytes,
                  opt.frame_filter, &partial);
  // Windows are fetched one at a time (at most one prefetch in flight), so the digests are fed
  // in window order, each call ordered after the previous by the future's get(). An object read
  // only in part has no digest to check (the ranks' Adler-32 sums cover what is applied).
  StreamDigests digests(m, store, opt.verify_sha256, partial);
  std::atomic<uint64_t> gap_bytes{0};
  auto fetch = [&store, &digests, &gap_bytes](const FetchWindow& w) -> StatusOr<std::string> {
    ASSIGN_OR_RETURN(std::string bytes, store.ReadRange(w.object, w.offset, w.length));
    ASSIGN_OR_RETURN(uint64_t gap, digests.Add(w.object, w.offset, bytes));
    gap_bytes += gap;
    return bytes;
  };
  auto where = [&](const FrameRef& fr) {
    return "tensor '" + m.tensors[fr.tensor].name + "' frame at offset " +
           std::to_string(fr.frame->offset);
  };
  // The frame's sink into `into` (the output, or a walker thread's RecordingOutput).
  auto sink_for = [&](const FrameRef& fr, PlanOutput& into) {
    auto it = dense.find(fr.tensor);
    return PlanSink(*layouts[fr.tensor], fr.tensor, fr.frame->offset, into,
                    it == dense.end() ? nullptr : &it->second);
  };
  auto account = [&](const DecodeResult& r) {
    stats.nonzero_bytes += r.nonzero_bytes;
    ++stats.frames;
  };
  // Decodes frame `fr` (its compressed bytes `input`) with `d` on this thread, straight into
  // the output.
  auto plan_frame = [&](XorDecoder& d, std::span<const uint8_t> input,
                        const FrameRef& fr) -> Status {
    PlanSink sink = sink_for(fr, out);
    ASSIGN_OR_RETURN(DecodeResult r,
                     DecodeDeltaFrame(d, input, fr.frame->length, opt.max_window_log, sink,
                                      where(fr), fr.frame->xor_digest));
    RETURN_IF_ERROR(sink.Flush());
    account(r);
    return Status::Ok();
  };
  if (opt.decode_threads >= 2) {
    RETURN_IF_ERROR(DecodePipelined(windows, opt, *decoder, out,
                                    static_cast<uint32_t>(ranks.size()),
                                    static_cast<uint32_t>(m.tensors.size()), fetch, where, sink_for,
                                    account, plan_frame, &stats));
  } else {
    std::future<StatusOr<std::string>> next;
    if (!windows.empty() && opt.prefetch) next = std::async(std::launch::async, fetch, windows[0]);
    for (size_t wi = 0; wi < windows.size(); ++wi) {
      const FetchWindow& w = windows[wi];
      auto t0 = Clock::now();
      StatusOr<std::string> got = opt.prefetch ? next.get() : fetch(w);
      stats.fetch_ms += MsSince(t0);
      if (!got.ok()) return got.status();
      if (opt.prefetch && wi + 1 < windows.size()) {
        next = std::async(std::launch::async, fetch, windows[wi + 1]);
      }
      // A failed decode below returns while the next fetch runs; the future's destructor waits.
      const std::string& bytes = *got;
      stats.bytes_fetched += bytes.size();
      auto t1 = Clock::now();
      for (const FrameRef& fr : w.frames) {
        RETURN_IF_ERROR(plan_frame(*decoder, FrameInput(w, bytes, *fr.frame), fr));
      }
      stats.decode_ms += MsSince(t1);
      if (opt.progress) opt.progress(wi + 1, windows.size());
    }
  }
  {
    auto t0 = Clock::now();
    ASSIGN_OR_RETURN(uint64_t tail, digests.Finish());
    stats.fetch_ms += MsSince(t0);
    stats.bytes_fetched += tail + gap_bytes.load();
  }
  // Small tensors: plan every byte so ranks can verify a full checksum.
  for (const auto& [index, bytes] : dense) {
    if (bytes.empty()) continue;
    RETURN_IF_ERROR(PlanSink::Route(*layouts[index], index, 0, bytes, out)
                        .WithPrefix("tensor '" + m.tensors[index].name + "'"));
  }
  return stats;
}

StatusOr<PlanStats> BuildSyncPlans(const DeltaManifest& m, ObjectStore& store,
                                   const RankTensorTables& ranks,
                                   std::vector<WritePlanWriter>& writers,
                                   const PlannerOptions& opt) {
  WriterPlanOutput out(writers);
  ASSIGN_OR_RETURN(PlanStats stats, BuildSyncPlans(m, store, ranks, out, opt));
  for (WritePlanWriter& w : writers) RETURN_IF_ERROR(w.status());
  return stats;
}

}  // namespace deltakv::deltasync
