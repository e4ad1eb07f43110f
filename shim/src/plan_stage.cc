#include "shim/plan_stage.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "backends.h"
#include "base/le_bytes.h"

namespace deltakv::shim {

using deltasync::AdlerDelta;
using deltasync::kAdlerModulus;
using deltasync::PlanRecord;
using deltasync::PlanTensor;

namespace {

// StageRecord (the byte path): records shorter than this (almost all of a sparse delta's: a
// few bytes each) have their sums added inline; longer ones go through AdlerDelta::AddXorRun's
// vectorized kernels.
constexpr uint32_t kInlineSumBytes = 64;
// The host path stages records of up to this many bytes a word at a time (StageWords): the
// runs the planner merges across gaps of zeros reach a few hundred bytes at denser deltas.
constexpr uint32_t kWordRecordBytes = 256;
// Inline terms |(i mod M) * d| are below 2^24; reducing after 2^32 of them keeps the sums
// far from overflow.
constexpr uint64_t kReduceAfterTerms = uint64_t{1} << 32;

int64_t ReduceMod(int64_t v) {
  const int64_t r = v % static_cast<int64_t>(kAdlerModulus);
  return r < 0 ? r + kAdlerModulus : r;
}

// One plan tensor's sums over a part, merged into the caller's StagedTensor once the whole part
// has staged (a failed part leaves the caller's sums as they were).
struct PartSums {
  int64_t s1 = 0;  // inline terms of the change new - old over owned positions
  int64_t s2 = 0;
  uint64_t terms = 0;
  StagedTensor staged;  // long records' sums, full-verify sums, bytes changed

  // Adds one record's inline terms (`n` changed positions), reducing now and then.
  void AddInline(int64_t d1, int64_t d2, uint32_t n) {
    s1 += d1;
    s2 += d2;
    terms += n;
    if (terms >= kReduceAfterTerms) {
      s1 = ReduceMod(s1);
      s2 = ReduceMod(s2);
      terms = 0;
    }
  }
  void MergeInto(StagedTensor& out) {
    staged.delta.Merge(AdlerDelta::FromSums(static_cast<uint32_t>(ReduceMod(s1)),
                                            static_cast<uint32_t>(ReduceMod(s2))));
    out.Merge(staged);
  }
};

// Turns the XOR bytes `x` of a record of `n` bytes at `canonical_offset` into new bytes, written
// back to `x` and to `packed`, from its `old` bytes (`old` may alias `packed`: each byte is read
// before it is written), and adds the record's sums.
inline void StageRecord(uint32_t n, uint64_t canonical_offset, bool owner, bool full_verify,
                        const uint8_t* old, uint8_t* x, uint8_t* packed, PartSums& sums) {
  sums.staged.bytes_changed += n;
  const uint64_t position = canonical_offset % kAdlerModulus;
  if (!owner) {
    for (uint32_t i = 0; i < n; ++i) packed[i] = x[i] = static_cast<uint8_t>(old[i] ^ x[i]);
  } else if (n < kInlineSumBytes && position + n <= kAdlerModulus) {
    int64_t s1 = 0, s2 = 0;
    for (uint32_t i = 0; i < n; ++i) {
      const uint8_t o = old[i];
      const uint8_t v = static_cast<uint8_t>(o ^ x[i]);
      packed[i] = x[i] = v;
      const int64_t d = int64_t{v} - int64_t{o};
      s1 += d;
      s2 += static_cast<int64_t>(position + i) * d;
    }
    sums.AddInline(s1, s2, n);
  } else {
    sums.staged.delta.AddXorRun(canonical_offset, {old, n}, {x, n});
    for (uint32_t i = 0; i < n; ++i) packed[i] = x[i] = static_cast<uint8_t>(old[i] ^ x[i]);
  }
  if (owner && full_verify) sums.staged.full.AddBytes(canonical_offset, {x, n});
}

// Sums of the byte differences d_i = new_i - old_i of two words: plain (sum of d_i) and
// weighted (sum of i * d_i), from three multiplies over 16-bit lanes. Each lane holds a
// difference biased by 256 (1 to 511: no lane borrows from or carries into the next), and the
// biases' constant share is taken off at the end.
struct ByteSums {
  int64_t plain;
  int64_t weighted;
};
inline ByteSums SumDifferences(uint64_t new_word, uint64_t old_word) {
  constexpr uint64_t kLanes = 0x00FF00FF00FF00FFull;
  constexpr uint64_t kBias = 0x0100010001000100ull;                         // 256 in every lane
  const uint64_t even = (new_word & kLanes) + kBias - (old_word & kLanes);  // d_2k + 256
  const uint64_t odd = ((new_word >> 8) & kLanes) + kBias - ((old_word >> 8) & kLanes);
  const uint64_t pairs = even + odd;                  // d_2k + d_2k+1 + 512 <= 1022
  constexpr uint64_t kAll = 0x0001000100010001ull;    // top lane: sum of the lanes
  constexpr uint64_t kIndex = 0x0000000100020003ull;  // top lane: sum of k * lane k
  // sum d_i = sum of pairs - 4 * 512; sum i * d_i = 2 * sum k * (d_2k + d_2k+1) + sum d_2k+1,
  // whose biases are 2 * 512 * (0 + 1 + 2 + 3) and 4 * 256.
  return {static_cast<int64_t>((pairs * kAll) >> 48) - 2048,
          2 * (static_cast<int64_t>((pairs * kIndex) >> 48) - 3072) +
              (static_cast<int64_t>((odd * kAll) >> 48) - 1024)};
}

// StageRecord for a record of 1 to kWordRecordBytes bytes, a word at a time, returning the
// inline terms of an owner record (`kSums`; zero otherwise) for PartSums::AddInline: `x`
// (padded to a multiple of 8 bytes in the plan, the padding left zero), `old` and `packed` have
// room for the length rounded up to 8 bytes. REQUIRES: 1 <= n <= kWordRecordBytes,
// position + n <= M.
template <bool kSums>
[[gnu::always_inline]] inline ByteSums StageWords(uint32_t n, uint64_t position, const uint8_t* old,
                                                  uint8_t* x, uint8_t* packed) {
  int64_t d1 = 0, d2 = 0;
  for (uint32_t k = 0; k < n; k += 8) {
    const uint64_t mask = n - k >= 8 ? ~uint64_t{0} : ~uint64_t{0} >> (64 - 8 * (n - k));
    const uint64_t o = LoadLE64(old + k);
    const uint64_t v = o ^ (LoadLE64(x + k) & mask);  // equal to `o` past the record's n bytes
    const uint64_t new_bytes = v & mask;
    StoreLE64(x + k, new_bytes);
    StoreLE64(packed + k, new_bytes);  // bytes past n are rewritten by the next record
    if constexpr (kSums) {
      // Bytes past n are the same in v and o, so their terms cancel.
      const ByteSums w = SumDifferences(v, o);
      d1 += w.plain;
      d2 += static_cast<int64_t>(position + k) * w.plain + w.weighted;
    }
  }
  return {d1, d2};
}

// AppendTouchedRegions one record at a time, looking the list up where the plan tensor changes
// (a tensor's records come in a row).
class RegionCursor {
 public:
  RegionCursor(TouchedRegions* regions, std::span<const PlanTensor> plan_tensors)
      : regions_(regions), plan_tensors_(plan_tensors) {}
  // REQUIRES: rec.tensor < plan_tensors.size() (the reader checks it).
  [[gnu::always_inline]] void Add(const PlanRecord& rec) {
    if (rec.tensor != tensor_) [[unlikely]] {
      tensor_ = rec.tensor;
      list_ = &(*regions_)[plan_tensors_[rec.tensor].rank_tensor];
    }
    if (!list_->empty() && list_->back().offset + list_->back().length == rec.local_offset) {
      list_->back().length += rec.length;
    } else {
      list_->push_back({rec.local_offset, rec.length});
    }
  }

 private:
  TouchedRegions* regions_;
  std::span<const PlanTensor> plan_tensors_;
  uint32_t tensor_ = UINT32_MAX;
  std::vector<deltakv_region>* list_ = nullptr;
};

// The ops a host staging walk writes, one or more per record, through a local pointer and
// count (grown should the header's record count be short), trimmed at Finish.
// CopyOps (ScatterBatch): one per record, {device, host, length}.
class CopyOpList {
 public:
  CopyOpList(std::vector<CopyOp>& ops, uint8_t* data) : ops_(ops), data_(data) {}
  void Start(uint64_t estimate) {
    ops_.resize(estimate);
    p_ = ops_.data();
    room_ = ops_.size();
  }
  [[gnu::always_inline]] void Add(uint8_t* device, uint64_t at, uint32_t length) {
    if (n_ == room_) [[unlikely]]
      Grow();
    p_[n_++] = {device, data_ + at, length};
  }
  void Finish() { ops_.resize(n_); }
  const std::vector<CopyOp>& ops() const { return ops_; }

 private:
  void Grow() {
    ops_.resize(2 * n_ + 16);
    p_ = ops_.data();
    room_ = ops_.size();
  }
  std::vector<CopyOp>& ops_;
  uint8_t* const data_;
  CopyOp* p_ = nullptr;
  size_t n_ = 0, room_ = 0;
};

// Packed ops (PackedBatch): one word per op, a record longer than kPackedMaxLength split into
// several, and the data offset of every kPackedMarkEvery-th op.
class PackedOpList {
 public:
  explicit PackedOpList(PackedBatch& batch) : batch_(batch) {}
  void Start(uint64_t estimate) {
    batch_.ops.resize(estimate);
    batch_.marks.clear();
    batch_.ranges = 0;
    p_ = batch_.ops.data();
    room_ = batch_.ops.size();
  }
  [[gnu::always_inline]] void Add(uint8_t* device, uint64_t at, uint32_t length) {
    ++batch_.ranges;
    if (length > kPackedMaxLength) [[unlikely]]
      return AddLong(device, at, length);
    Put(PackOp(device, length), at);
  }
  void Finish() { batch_.ops.resize(n_); }

 private:
  [[gnu::always_inline]] void Put(uint64_t op, uint64_t at) {
    if (n_ == room_) [[unlikely]]
      Grow();
    if (n_ % kPackedMarkEvery == 0) [[unlikely]]
      batch_.marks.push_back(at);
    p_[n_++] = op;
  }
  [[gnu::noinline]] void AddLong(uint8_t* device, uint64_t at, uint32_t length) {
    for (uint32_t done = 0; done < length;) {
      const uint32_t n = std::min<uint32_t>(length - done, kPackedMaxLength);
      Put(PackOp(device + done, n), at + done);
      done += n;
    }
  }
  void Grow() {
    batch_.ops.resize(2 * n_ + 16);
    p_ = batch_.ops.data();
    room_ = batch_.ops.size();
  }
  PackedBatch& batch_;
  uint64_t* p_ = nullptr;
  size_t n_ = 0, room_ = 0;
};

}  // namespace

Status AppendTouchedRegions(const deltasync::WritePlanReader& plan, TouchedRegions* regions) {
  RegionCursor cursor(regions, plan.tensors());
  return plan.ForEach([&](const PlanRecord& rec, std::span<uint8_t>) {
    cursor.Add(rec);
    return Status::Ok();
  });
}

bool PackedAddressable(const std::vector<LocalTensor>& tensors) {
  for (const LocalTensor& t : tensors) {
    const uint64_t base = reinterpret_cast<uintptr_t>(t.device);
    if (base > kPackedAddressLimit || t.bytes > kPackedAddressLimit - base) return false;
  }
  return true;
}

Status CheckPlanRecord(const PlanRecord& rec, std::span<const PlanTensor> plan_tensors,
                       const std::vector<LocalTensor>& tensors) {
  if (rec.tensor >= plan_tensors.size()) {
    return InvalidArgument("plan record names plan tensor #" + std::to_string(rec.tensor) +
                           ", the plan has " + std::to_string(plan_tensors.size()));
  }
  uint32_t t = plan_tensors[rec.tensor].rank_tensor;
  if (t >= tensors.size()) {
    return InvalidArgument("plan names tensor #" + std::to_string(t) + ", this rank registered " +
                           std::to_string(tensors.size()));
  }
  const LocalTensor& lt = tensors[t];
  if (rec.local_offset > lt.bytes || rec.length > lt.bytes - rec.local_offset) {
    return InvalidArgument("plan writes [" + std::to_string(rec.local_offset) + ", +" +
                           std::to_string(rec.length) + ") outside tensor '" + lt.name + "' of " +
                           std::to_string(lt.bytes) + " local bytes");
  }
  return Status::Ok();
}

std::vector<PartTarget> PartTargets(std::span<const PlanTensor> plan_tensors,
                                    const std::vector<LocalTensor>& tensors) {
  std::vector<PartTarget> targets(plan_tensors.size());
  for (size_t i = 0; i < plan_tensors.size(); ++i) {
    const uint32_t t = plan_tensors[i].rank_tensor;
    if (t >= tensors.size()) continue;  // a record naming it fails CheckPlanRecord
    targets[i] = {static_cast<uint8_t*>(tensors[t].device), tensors[t].bytes, true,
                  (plan_tensors[i].flags & deltasync::kPlanTensorFullVerify) != 0};
  }
  return targets;
}

namespace {

// StagePartToBatch and StagePartPacked: stages into `data` (its capacity kept, contents
// dropped) and the op list made by make_ops(data pointer), which must be a CopyOpList when
// `gather` is set.
template <class MakeOps>
Status StageInto(const deltasync::WritePlanReader& plan, const std::vector<LocalTensor>& tensors,
                 DeviceBackend* gather, std::vector<StagedTensor>* sums,
                 std::vector<uint8_t>& data_buffer, MakeOps make_ops, TouchedRegions* regions) {
  if (sums->size() != plan.tensors().size()) return Internal("one sum per plan tensor");
  const std::span<const PlanTensor> plan_tensors = plan.tensors();
  // Each plan tensor's destination, resolved once.
  const std::vector<PartTarget> targets = PartTargets(plan_tensors, tensors);
  // The packed bytes of record k start at the sum of the lengths before it. data_bytes() is
  // exact after Open and an upper bound after OpenLazy (whose walk below checks the records);
  // the walks stop at it should the plan not be the one Open counted.
  const uint64_t data_bytes = plan.data_bytes();
  data_buffer.clear();
  // The packed bytes, with room for 7 bytes past the last record's (StageWords). The capacity
  // is reserved up front, so pointers into the data stay valid, and the size (zero filled) grows
  // with the records, so an upper bound costs no fill; trimmed to the bytes staged at the end.
  constexpr uint64_t kGrowBytes = uint64_t{1} << 18;
  data_buffer.reserve(data_bytes + 8);
  data_buffer.resize(std::min(data_bytes + 8, kGrowBytes));
  uint64_t data_size = data_buffer.size();  // kept in a local: byte stores alias the vector's
  // True if record `rec`'s packed bytes at `at` fit, the data grown to cover them.
  auto fits = [&](uint64_t at, const PlanRecord& rec) {
    if (rec.length > data_bytes - at) return false;
    const uint64_t end = at + rec.length + 8;
    if (end > data_size) [[unlikely]] {
      data_buffer.resize(std::min(data_bytes + 8, std::max(end, data_size + kGrowBytes)));
      data_size = data_buffer.size();
    }
    return true;
  };
  // Every record has at least one byte; after OpenLazy the count is the header's claim.
  const uint64_t op_estimate = std::min(plan.record_count(), data_bytes);
  std::vector<PartSums> part(plan_tensors.size());
  RegionCursor region_cursor(regions, plan_tensors);
  uint8_t* const data = data_buffer.data();
  auto ops = make_ops(data);
  uint64_t at = 0;
  if (gather == nullptr) {
    // Host-addressable weights: one walk checks, reads the old bytes in place and stages. The
    // weight lines a sparse part reads are scattered over the tensors and seldom in the first
    // level cache: each record's line is prefetched as the walk reaches it, and a full batch of
    // kBatch records is staged once the next batch has been queued too, so every record's load
    // has the walk over a whole batch to arrive and the staging loop runs on cached lines.
    // Batches are staged in order (a record's word stores reach into the next one's bytes).
    struct Staging {
      const uint8_t* old;
      uint8_t* x;
      uint8_t* packed;
      uint64_t canonical_offset;
      uint32_t length;
      uint32_t tensor;
      uint32_t position;  // canonical_offset mod M
      bool owner;
      bool words;  // a record StageWords takes
    };
    constexpr size_t kBatch = 32;
    Staging queues[2][kBatch];
    Staging* pending = queues[0];  // filling
    Staging* ready = queues[1];    // full, prefetched a batch ago, staged when `pending` fills
    bool have_ready = false;
    size_t queued = 0;
    ops.Start(op_estimate);
    // Stages the queued records. The inline sums and byte counts of a run of records of one
    // tensor add up in registers and go into its PartSums once per run.
    auto stage_queued = [&](const Staging* queue, size_t count) __attribute__((always_inline)) {
      uint32_t tensor = queue[0].tensor;
      int64_t d1 = 0, d2 = 0;
      uint64_t owned = 0, bytes = 0;
      auto flush = [&] {
        PartSums& into = part[tensor];
        into.AddInline(d1, d2, owned);
        into.staged.bytes_changed += bytes;
        d1 = d2 = 0;
        owned = bytes = 0;
      };
      for (size_t i = 0; i < count; ++i) {
        const Staging& e = queue[i];
        if (e.tensor != tensor) {
          flush();
          tensor = e.tensor;
        }
        if (!e.words) {
          StageRecord(e.length, e.canonical_offset, e.owner, targets[e.tensor].full_verify, e.old,
                      e.x, e.packed, part[e.tensor]);
        } else if (e.owner) {
          const ByteSums w = StageWords<true>(e.length, e.position, e.old, e.x, e.packed);
          d1 += w.plain;
          d2 += w.weighted;
          owned += e.length;
          bytes += e.length;
        } else {
          StageWords<false>(e.length, 0, e.old, e.x, e.packed);
          bytes += e.length;
        }
      }
      flush();
    };
    // Checks a record, prefetches its old bytes and queues it (inlined into the walk).
    auto take = [&](const PlanRecord& rec, std::span<uint8_t> x) __attribute__((always_inline)) {
      const PartTarget& target = targets[rec.tensor];
      if (!target.Holds(rec)) return CheckPlanRecord(rec, plan_tensors, tensors);
      if (!fits(at, rec)) return Internal("plan changed after it was opened");
      uint8_t* const device = target.base + rec.local_offset;
      __builtin_prefetch(device);
      if (regions != nullptr) region_cursor.Add(rec);
      const bool owner = rec.flags & deltasync::kPlanRecordOwner;
      const uint64_t position = rec.canonical_offset % kAdlerModulus;
      // Words read the old bytes up to the next multiple of 8: they must lie in the tensor.
      const bool words =
          rec.length - 1 < kWordRecordBytes &&
          target.bytes - rec.local_offset >= ((uint64_t{rec.length} + 7) & ~7ull) &&
          (!owner || (!target.full_verify && position + rec.length <= kAdlerModulus));
      Staging& e = pending[queued++];
      e = {device,
           x.data(),
           data + at,
           rec.canonical_offset,
           rec.length,
           rec.tensor,
           static_cast<uint32_t>(position),
           owner,
           words};
      if (queued == kBatch) {
        if (have_ready) stage_queued(ready, kBatch);
        std::swap(pending, ready);
        have_ready = true;
        queued = 0;
      }
      ops.Add(device, at, rec.length);
      at += rec.length;
      return Status::Ok();
    };
    RETURN_IF_ERROR(plan.ForEach(take));
    if (have_ready) stage_queued(ready, kBatch);
    if (queued > 0) stage_queued(pending, queued);
    ops.Finish();
  } else if constexpr (std::is_same_v<decltype(ops), CopyOpList>) {
    // One walk checks and lays out the batch, one Gather brings every old byte into it (a
    // device backend moves them in a few launches), one walk stages in place.
    ops.Start(op_estimate);
    RETURN_IF_ERROR(plan.ForEach([&](const PlanRecord& rec, std::span<uint8_t>) -> Status {
      const PartTarget& target = targets[rec.tensor];
      if (!target.Holds(rec)) return CheckPlanRecord(rec, plan_tensors, tensors);
      if (!fits(at, rec)) return Internal("plan changed after it was opened");
      if (regions != nullptr) region_cursor.Add(rec);
      ops.Add(target.base + rec.local_offset, at, rec.length);
      at += rec.length;
      return Status::Ok();
    }));
    ops.Finish();
    RETURN_IF_ERROR(gather->Gather(ops.ops()));
    at = 0;
    RETURN_IF_ERROR(plan.ForEach([&](const PlanRecord& rec, std::span<uint8_t> x) -> Status {
      if (!fits(at, rec)) return Internal("plan changed after it was opened");
      StageRecord(rec.length, rec.canonical_offset, rec.flags & deltasync::kPlanRecordOwner,
                  targets[rec.tensor].full_verify, data + at, x.data(), data + at,
                  part[rec.tensor]);
      at += rec.length;
      return Status::Ok();
    }));
  } else {
    return Internal("a device gather stages into CopyOps");
  }
  data_buffer.resize(at);
  for (size_t t = 0; t < part.size(); ++t) part[t].MergeInto((*sums)[t]);
  return Status::Ok();
}

}  // namespace

StatusOr<ScatterBatch> StagePartToBatch(const deltasync::WritePlanReader& plan,
                                        const std::vector<LocalTensor>& tensors,
                                        DeviceBackend* gather, std::vector<StagedTensor>* sums,
                                        ScatterBatch recycled, TouchedRegions* regions) {
  ScatterBatch batch = std::move(recycled);
  batch.ops.clear();
  RETURN_IF_ERROR(StageInto(
      plan, tensors, gather, sums, batch.data,
      [&](uint8_t* data) { return CopyOpList(batch.ops, data); }, regions));
  return batch;
}

StatusOr<PackedBatch> StagePartPacked(const deltasync::WritePlanReader& plan,
                                      const std::vector<LocalTensor>& tensors,
                                      std::vector<StagedTensor>* sums, PackedBatch recycled,
                                      TouchedRegions* regions) {
  PackedBatch batch = std::move(recycled);  // PackedOpList::Start empties its op lists
  RETURN_IF_ERROR(StageInto(
      plan, tensors, nullptr, sums, batch.data, [&](uint8_t*) { return PackedOpList(batch); },
      regions));
  return batch;
}

StatusOr<std::vector<StagedTensor>> StagePlan(const deltasync::WritePlanReader& plan,
                                              const std::vector<LocalTensor>& tensors,
                                              DeviceBackend& backend) {
  std::vector<StagedTensor> staged(plan.tensors().size());
  RETURN_IF_ERROR(StagePartToBatch(plan, tensors, &backend, &staged).status());
  return staged;
}

StatusOr<ScatterBatch> PackScatter(const deltasync::WritePlanReader& plan,
                                   const std::vector<LocalTensor>& tensors) {
  ScatterBatch batch;
  RETURN_IF_ERROR(plan.ForEach([&](const PlanRecord& rec, std::span<uint8_t>) -> Status {
    return CheckPlanRecord(rec, plan.tensors(), tensors);
  }));
  batch.data.resize(plan.data_bytes());
  batch.ops.reserve(plan.record_count());
  uint8_t* out = batch.data.data();
  RETURN_IF_ERROR(plan.ForEach([&](const PlanRecord& rec, std::span<uint8_t> bytes) -> Status {
    if (bytes.size() > batch.data.size() - static_cast<size_t>(out - batch.data.data())) {
      return Internal("plan changed after it was opened");
    }
    const LocalTensor& lt = tensors[plan.tensors()[rec.tensor].rank_tensor];
    std::memcpy(out, bytes.data(), bytes.size());
    batch.ops.push_back({static_cast<uint8_t*>(lt.device) + rec.local_offset, out, rec.length});
    out += bytes.size();
    return Status::Ok();
  }));
  batch.data.resize(static_cast<size_t>(out - batch.data.data()));  // data_bytes() may be a bound
  return batch;
}

}  // namespace deltakv::shim
