#include "deltasync/sync_planner.h"

#include <chrono>
#include <cstring>

#include "deltasync/applier.h"
#include "deltasync/xor_decoder.h"

namespace deltakv::deltasync {

namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Runs separated by at most this many zero bytes are planned as one record: a record header
// costs 32 bytes, so bridging a shorter gap with zero XOR bytes (which change nothing and add
// nothing to the checksum sums) makes the plan smaller.
constexpr uint64_t kMergeGap = 32;

// Routes decoded runs of one frame to the ranks' plans, merging nearby runs.
class PlanSink final : public NonzeroSink {
 public:
  PlanSink(const TensorLayout& layout, uint32_t plan_tensor, uint64_t frame_offset,
           std::vector<WritePlanWriter>& writers, std::vector<uint8_t>* dense)
      : layout_(layout),
        tensor_(plan_tensor),
        base_(frame_offset),
        writers_(writers),
        dense_(dense) {}

  Status OnRun(uint64_t pos, std::span<const uint8_t> bytes) override {
    const uint64_t canonical = base_ + pos;
    if (dense_ != nullptr) {  // small tensor: collected, planned in full later
      if (canonical > dense_->size() || bytes.size() > dense_->size() - canonical) {
        return DataLoss("decoded bytes fall outside the tensor");
      }
      std::memcpy(dense_->data() + canonical, bytes.data(), bytes.size());
      return Status::Ok();
    }
    if (!pending_.empty() && canonical - pending_end() <= kMergeGap) {
      pending_.resize(canonical - pending_start_, 0);
      pending_.insert(pending_.end(), bytes.begin(), bytes.end());
      return Status::Ok();
    }
    RETURN_IF_ERROR(Flush());
    pending_start_ = canonical;
    pending_.assign(bytes.begin(), bytes.end());
    return Status::Ok();
  }

  // Routes the run still held back. Call once after the frame decoded.
  Status Flush() {
    if (pending_.empty()) return Status::Ok();
    Status s = Route(layout_, tensor_, pending_start_, pending_, writers_);
    pending_.clear();
    return s;
  }

  static Status Route(const TensorLayout& layout, uint32_t tensor, uint64_t canonical,
                      std::span<const uint8_t> bytes, std::vector<WritePlanWriter>& writers) {
    return layout.ForEachPiece(canonical, bytes.size(), [&](const LayoutPiece& p) -> Status {
      if (p.rank >= writers.size()) return Internal("layout names rank beyond the plan writers");
      return writers[p.rank].Add(tensor, p.local_offset, p.canonical_offset,
                                 bytes.subspan(p.canonical_offset - canonical, p.length), p.owner);
    });
  }

 private:
  const TensorLayout& layout_;
  uint32_t tensor_;
  uint64_t base_;
  std::vector<WritePlanWriter>& writers_;
  std::vector<uint8_t>* dense_;
  uint64_t pending_start_ = 0;
  std::vector<uint8_t> pending_;
  uint64_t pending_end() const { return pending_start_ + pending_.size(); }
};

}  // namespace

StatusOr<std::vector<std::vector<PlanTensor>>> PlanTensorTables(const DeltaManifest& m,
                                                                const RankTensorTables& ranks) {
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
        if (e.layout.world() != ranks.size()) {
          return InvalidArgument("tensor '" + t.name + "': layout spans " +
                                 std::to_string(e.layout.world()) + " ranks, " +
                                 std::to_string(ranks.size()) + " are registered");
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
                                   const RankTensorTables& ranks,
                                   std::vector<WritePlanWriter>& writers,
                                   const PlannerOptions& opt) {
  PlanStats stats;
  stats.tensors = m.tensors.size();
  ASSIGN_OR_RETURN(std::unique_ptr<XorDecoder> decoder, MakeXorDecoder(opt.decoder));
  // Frames grouped by object, so each object is fetched once.
  struct FrameRef {
    uint32_t tensor;
    const DeltaFrame* frame;
  };
  std::map<std::string, std::vector<FrameRef>> by_object;
  std::vector<const TensorLayout*> layouts;
  std::map<uint32_t, std::vector<uint8_t>> dense;  // small tensors, decoded whole
  for (uint32_t i = 0; i < m.tensors.size(); ++i) {
    const DeltaTensor& t = m.tensors[i];
    layouts.push_back(&ranks[0].find(t.name)->second.layout);
    if (t.length < kFullVerifyBelowBytes) dense[i].assign(t.length, 0);
    for (const DeltaFrame& f : t.frames) by_object[f.object].push_back({i, &f});
  }
  size_t done = 0;
  for (const auto& [object, frames] : by_object) {
    auto t0 = Clock::now();
    ASSIGN_OR_RETURN(std::string bytes, store.ReadObject(object, opt.max_object_bytes));
    const DeltaObject* meta = m.FindObject(object);
    if (meta != nullptr && bytes.size() != meta->size) {
      return DataLoss("delta object '" + object + "' is " + std::to_string(bytes.size()) +
                      " bytes but the manifest says " + std::to_string(meta->size) +
                      (bytes.size() < meta->size ? " (truncated)" : ""));
    }
    stats.bytes_fetched += bytes.size();
    stats.fetch_ms += MsSince(t0);
    auto t1 = Clock::now();
    for (const FrameRef& fr : frames) {
      const DeltaTensor& t = m.tensors[fr.tensor];
      const DeltaFrame& f = *fr.frame;
      auto it = dense.find(fr.tensor);
      PlanSink sink(*layouts[fr.tensor], fr.tensor, f.offset, writers,
                    it == dense.end() ? nullptr : &it->second);
      std::span<const uint8_t> input(
          reinterpret_cast<const uint8_t*>(bytes.data()) + f.object_offset, f.compressed_length);
      ASSIGN_OR_RETURN(DecodeResult r,
                       DecodeDeltaFrame(*decoder, input, f.length, opt.max_window_log, sink,
                                        "tensor '" + t.name + "' frame at offset " +
                                            std::to_string(f.offset)));
      RETURN_IF_ERROR(sink.Flush());
      stats.nonzero_bytes += r.nonzero_bytes;
      ++stats.frames;
    }
    stats.decode_ms += MsSince(t1);
    if (opt.progress) opt.progress(++done, by_object.size());
  }
  // Small tensors: plan every byte so ranks can verify a full checksum.
  for (const auto& [index, bytes] : dense) {
    if (bytes.empty()) continue;
    RETURN_IF_ERROR(PlanSink::Route(*layouts[index], index, 0, bytes, writers)
                        .WithPrefix("tensor '" + m.tensors[index].name + "'"));
  }
  for (WritePlanWriter& w : writers) RETURN_IF_ERROR(w.status());
  return stats;
}

}  // namespace deltakv::deltasync
