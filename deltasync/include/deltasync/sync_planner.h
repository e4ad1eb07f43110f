// SyncPlanner: turns a delta into one write plan per engine rank, without ever building a
// dense tensor or reading model weights.
//
// Each shard object is fetched from the store once, in windows of whole frames (ranged reads of at
// most PlannerOptions::fetch_window_bytes unless one frame is larger, the first ones smaller), the
// next window fetched on a second thread while the current one decodes. Every frame is decoded by
// an XorDecoder into runs of nonzero XOR bytes; each run is split by the tensor's layout into
// per-rank pieces (rank, local offset, canonical offset) and handed to a PlanOutput. With
// decode_threads >= 2, walker threads decode frames (each its own, in frame order, across window
// boundaries), route each frame's runs into per-rank records themselves (WritePlanWriter::
// RecordsOnly) and queue those in chunks to the calling thread, which hands each chunk to the
// output as it arrives (PlanOutput::AddRecorded, in frame order) and decodes and routes frames
// itself whenever it has nothing to hand over, so fetching, walking and planning overlap and
// routing runs on every thread. Memory is bounded by two fetch windows,
// PlannerOptions::queued_chunk_bytes of chunks and what the output keeps: the planner never
// holds an object, a tensor or a plan.
// Tensors shorter than kFullVerifyBelowBytes are planned in full (every byte, XOR zero where
// unchanged) and flagged, so ranks can return full-checksum partial sums for them.
//
// Errors: InvalidArgument when the delta does not fit the engine (a tensor the engine did not
// register, a length or layout disagreement between ranks); DataLoss for corrupt frames or
// objects; whatever the store returns for fetch failures; ResourceExhausted when a rank's plan
// buffer is full. A failed plan leaves the writers in an unspecified state (the caller drops
// them).
//
// Thread-safety: one planner call at a time per set of writers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "deltasync/delta_manifest.h"
#include "deltasync/layout.h"
#include "deltasync/object_store.h"
#include "deltasync/write_plan.h"

namespace deltakv::deltasync {

// One canonical tensor as a rank registered it.
struct RankTensorEntry {
  uint32_t index = 0;  // the rank's registration index
  TensorLayout layout;
};

// name -> entry, one map per rank (index = rank).
using RankTensorTables = std::vector<std::map<std::string, RankTensorEntry, std::less<>>>;

struct PlanStats {
  uint64_t bytes_fetched = 0;
  uint64_t nonzero_bytes = 0;
  uint64_t tensors = 0;
  uint64_t frames = 0;
  double fetch_ms = 0;
  double decode_ms = 0;
};

// The plan tensor table shared by every rank's plan: one PlanTensor per manifest tensor,
// in manifest order (PlanTensor::rank_tensor is filled per rank). Checks that every rank
// registered every changed tensor with the same layout and the right canonical length, and that
// each layout spans `layout_world` ranks (0: ranks.size(); a node serving a slice of a larger
// group passes the group's world).
StatusOr<std::vector<std::vector<PlanTensor>>> PlanTensorTables(const DeltaManifest& m,
                                                                const RankTensorTables& ranks,
                                                                uint32_t layout_world = 0);

struct PlannerOptions {
  std::string decoder;  // "" = default XorDecoder
  uint32_t max_window_log = 27;
  // Frames are fetched in ranged reads of whole frames, up to a window (a larger frame alone).
  // The first window is first_fetch_window_bytes and each next one twice the one before, up
  // to this bound, so decoding starts after a short read whatever this bound.
  uint64_t fetch_window_bytes = 32ull << 20;
  uint64_t first_fetch_window_bytes = 1ull << 20;
  // Fetch the next window while the current one decodes.
  bool prefetch = true;
  // Threads the planner decodes on. 1: decode on the calling thread, straight into the output.
  // N >= 2: N - 1 walker threads decode frames (each with its own decoder, taking frames in
  // order, at most 4N ahead of the one being planned), route their runs into per-rank records
  // and queue those in chunks of at most 64 KiB per rank to the calling thread, which hands
  // them to the PlanOutput (AddRecorded); a fetch thread reads the windows. Whenever the
  // calling thread has no chunk to hand over, it decodes the next frame no walker has taken
  // itself, straight into the output, so all N threads decode and route. Walkers move on to the
  // next window's frames as soon as its bytes are in, without waiting for the window before to
  // be planned. An output error stops the walkers and is returned.
  unsigned decode_threads = 1;
  // With decode_threads >= 2: the most bytes of routed records waiting to be handed to the
  // output, all frames together (the frame being handed over may always have 4 chunks
  // waiting). This and two fetch windows bound the planner's memory.
  uint64_t queued_chunk_bytes = 8ull << 20;
  // Which frames to fetch: called with (manifest tensor index, frame's canonical offset, frame's
  // canonical length); a frame it rejects is neither read nor decoded (its pieces go nowhere).
  // A node serving a slice of a group keeps the frames that overlap its ranks' bytes. Objects
  // read only in part are not sha256-checked. Empty: every frame.
  using FrameFilter = std::function<bool(uint32_t tensor, uint64_t offset, uint64_t length)>;
  FrameFilter frame_filter;
  // Objects that also hold frames of tensors left out of the manifest given to the planner (a
  // pipeline stage's view of a delta): read in part, as objects frame_filter skips frames of
  // (only the listed frames' bytes are fetched; no sha256 check).
  std::set<std::string> partial_objects;
  // Called after each fetch window with (windows done, windows total).
  std::function<void(size_t, size_t)> progress;
  // Check every object's sha256 (when the manifest records one) over the bytes as they are
  // fetched; bytes no frame covers are read at the end (not for objects frame_filter reads in
  // part). A mismatch fails the call (DataLoss),
  // so a caller that commits only after BuildSyncPlans returns never commits unverified bytes.
  bool verify_sha256 = true;
};

// Where the planner puts the pieces: rank `rank`'s plan gets a record for plan tensor `tensor`
// (index into PlanTensorTables' tables). Pieces arrive in no particular order across tensors
// and frames; within one frame they arrive in increasing canonical order (with decode_threads
// >= 2 another frame's pieces may come between them), and the pieces of one run (one per rank
// that holds it) come together. An output that takes records (TakesRecorded) gets a walker
// thread's stretch of a frame rank by rank instead (AddRecorded). All calls come from the
// calling thread, except those to a WalkerView. An error stops the planner.
class PlanOutput {
 public:
  virtual ~PlanOutput() = default;
  virtual Status Add(uint32_t rank, uint32_t tensor, uint64_t local_offset,
                     uint64_t canonical_offset, std::span<const uint8_t> xor_bytes,
                     bool owner) = 0;
  // Add for a piece of 1 to WritePlanWriter::kShortBytes (64) bytes (most pieces of a sparse
  // delta) without building a Status:
  // true when the piece was taken; false, having done nothing, when the output cannot take it
  // this way (then the planner calls Add). The default takes nothing.
  virtual bool AddShort(uint32_t /*rank*/, uint32_t /*tensor*/, uint64_t /*local_offset*/,
                        uint64_t /*canonical_offset*/, std::span<const uint8_t> /*xor_bytes*/,
                        bool /*owner*/) {
    return false;
  }
  // The writer of rank `rank`'s open plan part, lent so that the planner appends short pieces
  // to it itself with WritePlanWriter::TryAddShort (exactly as AddShort would, without a call
  // per piece), or nullptr. A record appended so counts as taken by AddShort: the output
  // accounts for it from the writer. When TryAddShort refuses a piece (the part is full), the
  // planner calls AddShort, then Add, as usual. A lent writer stays valid while *LendGeneration()
  // keeps the value it had when the writer was lent; the output changes that value whenever it
  // opens or sends a part. LendGeneration returns nullptr when the output lends no writers
  // (the default).
  virtual WritePlanWriter* LendWriter(uint32_t /*rank*/) { return nullptr; }
  virtual const uint64_t* LendGeneration() { return nullptr; }
  // With decode_threads >= 2: true if walker threads may route their frames' pieces
  // themselves, into per-rank records that reach this output through AddRecorded (false, the
  // default: walkers hand their nonzero bytes to the calling thread, which routes them into
  // Add/AddShort as described above).
  virtual bool TakesRecorded() { return false; }
  // For an output that takes records: what a walker thread's routing hands its pieces to, a
  // view of this output ending in `records` (the walker's recorder), or nullptr (the default)
  // to hand them to `records` directly. The view is used by that walker thread alone, for one
  // frame. An output that transforms pieces before passing them on does the same in its view,
  // and AddRecorded then takes what the view passed on.
  virtual std::unique_ptr<PlanOutput> WalkerView(PlanOutput& /*records*/) { return nullptr; }
  // Rank `rank`'s pieces of a stretch of one frame, routed on a walker thread into `records`,
  // a WritePlanWriter::RecordsOnly writer in plan version 2 for as many tensors as the rank's
  // table: the pieces Add/AddShort would have received for that rank, in the same order. Called
  // on the calling thread, frame by frame in frame order, each stretch's ranks in increasing
  // order. An output that keeps plans appends them whole (WritePlanWriter::AppendFrom); the
  // default replays each piece through AddShort/Add.
  virtual Status AddRecorded(uint32_t rank, const WritePlanWriter& records);
};

// A PlanOutput into one WritePlanWriter per rank (whole plans in caller buffers).
class WriterPlanOutput final : public PlanOutput {
 public:
  explicit WriterPlanOutput(std::vector<WritePlanWriter>& writers) : writers_(writers) {}
  Status Add(uint32_t rank, uint32_t tensor, uint64_t local_offset, uint64_t canonical_offset,
             std::span<const uint8_t> xor_bytes, bool owner) override;
  bool AddShort(uint32_t rank, uint32_t tensor, uint64_t local_offset, uint64_t canonical_offset,
                std::span<const uint8_t> xor_bytes, bool owner) override {
    return rank < writers_.size() &&
           writers_[rank].TryAddShort(tensor, local_offset, canonical_offset, xor_bytes, owner);
  }
  // The writers never change: one generation.
  WritePlanWriter* LendWriter(uint32_t rank) override {
    return rank < writers_.size() ? &writers_[rank] : nullptr;
  }
  const uint64_t* LendGeneration() override { return &generation_; }
  bool TakesRecorded() override { return true; }
  Status AddRecorded(uint32_t rank, const WritePlanWriter& records) override;

 private:
  std::vector<WritePlanWriter>& writers_;
  const uint64_t generation_ = 0;
};

// Hands the delta's pieces to `out`.
StatusOr<PlanStats> BuildSyncPlans(const DeltaManifest& m, ObjectStore& store,
                                   const RankTensorTables& ranks, PlanOutput& out,
                                   const PlannerOptions& options);

// Fills `writers` (one per rank, built over PlanTensorTables' tables) with the delta's pieces.
StatusOr<PlanStats> BuildSyncPlans(const DeltaManifest& m, ObjectStore& store,
                                   const RankTensorTables& ranks,
                                   std::vector<WritePlanWriter>& writers,
                                   const PlannerOptions& options);

}  // namespace deltakv::deltasync
