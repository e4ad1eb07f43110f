// SparseZstdWalker: assembles input chunks into units (magic, frame header, block header,
// block body, checksum), drives the frame state machine, and adapts the walker to XorDecoder.
#include "deltasync/zstd_walker.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "walker/block_decoder.h"
#include "walker/frame_header.h"
#include "walker/frame_output.h"
#include "walker/nonzero_index.h"
#include "walker/run_emitter.h"

namespace deltakv::deltasync {

using walker::BlockDecoder;
using walker::BlockStats;
using walker::FrameHeader;
using walker::FrameOutput;
using walker::RunEmitter;

namespace {

uint32_t LoadLE32(const uint8_t* p) {
  return p[0] | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

class SparseZstdWalker::Impl {
 public:
  Impl(NonzeroSink& sink, const WalkerOptions& options)
      : options_(options), emitter_(sink, options.merge_gap), output_(emitter_) {
    output_.StartDigest(options.limits.compute_digest);
  }

  Status Feed(std::span<const uint8_t> chunk);
  Status Finish();
  const WalkStats& stats() const { return stats_; }
  std::optional<XorDigest> digest() const {
    if (!options_.limits.compute_digest) return std::nullopt;
    return output_.digest();
  }
  // A fresh walk with `sink`; the buffers (index, bitmap, runs, tables) keep their memory.
  void Restart(NonzeroSink& sink, const WalkerOptions& options) {
    options_ = options;
    emitter_.Restart(sink, options.merge_gap);
    output_.StartDigest(options.limits.compute_digest);
    stats_ = WalkStats();
    status_ = Status::Ok();
    state_ = State::kMagic;
    pending_.clear();
    consumed_ = unit_offset_ = skip_left_ = 0;
    header_rest_ = 0;
    header_descriptor_ = 0;
    frame_ = FrameHeader();
    frame_index_ = frame_start_ = 0;
    block_last_ = false;
    block_type_ = 0;
    block_size_ = 0;
  }

 private:
  enum class State {
    kMagic,
    kSkippableSize,
    kSkipping,
    kHeaderDescriptor,
    kHeaderRest,
    kBlockHeader,
    kBlockBody,
    kChecksum,
  };

  size_t Need() const;
  Status ProcessUnit(std::span<const uint8_t> unit);
  Status StartFrame(std::span<const uint8_t> header);
  Status DecodeBlock(std::span<const uint8_t> body);
  Status EndFrame(const uint8_t* checksum);
  std::string Where() const {
    return "zstd frame " + std::to_string(frame_index_) + " at input offset " +
           std::to_string(unit_offset_);
  }
  Status Fail(Status status) {
    status_ = status;
    return status;
  }

  WalkerOptions options_;
  RunEmitter emitter_;
  FrameOutput output_;
  BlockDecoder blocks_;
  WalkStats stats_;
  Status status_;

  State state_ = State::kMagic;
  std::vector<uint8_t> pending_;  // bytes of an incomplete unit
  uint64_t consumed_ = 0;         // input offset of the next unit
  uint64_t unit_offset_ = 0;      // input offset of the unit being processed
  uint64_t skip_left_ = 0;
  size_t header_rest_ = 0;
  uint8_t header_descriptor_ = 0;
  FrameHeader frame_;
  uint64_t frame_index_ = 0;
  uint64_t frame_start_ = 0;  // global position of the current frame's first byte
  // Current block.
  bool block_last_ = false;
  unsigned block_type_ = 0;
  uint64_t block_size_ = 0;
};

size_t SparseZstdWalker::Impl::Need() const {
  switch (state_) {
    case State::kMagic:
    case State::kSkippableSize:
    case State::kChecksum:
      return 4;
    case State::kHeaderDescriptor:
      return 1;
    case State::kHeaderRest:
      return header_rest_;
    case State::kBlockHeader:
      return 3;
    case State::kBlockBody:
      return block_type_ == 1 ? 1 : static_cast<size_t>(block_size_);
    case State::kSkipping:
      return 0;
  }
  return 0;
}

Status SparseZstdWalker::Impl::Feed(std::span<const uint8_t> chunk) {
  if (!status_.ok()) return status_;
  stats_.input_bytes += chunk.size();
  for (;;) {
    if (state_ == State::kSkipping) {
      const uint64_t take = std::min<uint64_t>(skip_left_, chunk.size());
      skip_left_ -= take;
      consumed_ += take;
      chunk = chunk.subspan(static_cast<size_t>(take));
      if (skip_left_ > 0) return Status::Ok();
      state_ = State::kMagic;
      continue;
    }
    const size_t need = Need();
    std::span<const uint8_t> unit;
    if (pending_.empty() && chunk.size() >= need) {
      unit = chunk.first(need);
      chunk = chunk.subspan(need);
    } else {
      if (chunk.empty()) return Status::Ok();
      const size_t take = std::min(need - pending_.size(), chunk.size());
      pending_.insert(pending_.end(), chunk.begin(), chunk.begin() + static_cast<ptrdiff_t>(take));
      chunk = chunk.subspan(take);
      if (pending_.size() < need) return Status::Ok();
      unit = pending_;
    }
    unit_offset_ = consumed_;
    consumed_ += need;
    Status s = ProcessUnit(unit);
    pending_.clear();
    if (!s.ok()) return Fail(std::move(s));
    if (chunk.empty() && state_ != State::kSkipping && Need() > 0) return Status::Ok();
  }
}

Status SparseZstdWalker::Impl::ProcessUnit(std::span<const uint8_t> unit) {
  switch (state_) {
    case State::kMagic: {
      const uint32_t magic = LoadLE32(unit.data());
      if (magic == walker::kZstdMagic) {
        state_ = State::kHeaderDescriptor;
      } else if ((magic & walker::kSkippableMagicMask) == walker::kSkippableMagic) {
        state_ = State::kSkippableSize;
      } else if (magic >= walker::kLegacyMagicFirst && magic <= walker::kLegacyMagicLast) {
        return Unimplemented("legacy zstd (v0.x) frame at input offset " +
                             std::to_string(unit_offset_) + " is not supported");
      } else {
        return DataLoss("unknown frame magic " + Hex(magic) + " at input offset " +
                        std::to_string(unit_offset_));
      }
      return Status::Ok();
    }
    case State::kSkippableSize:
      skip_left_ = LoadLE32(unit.data());
      ++stats_.skippable_frames;
      state_ = State::kSkipping;
      return Status::Ok();
    case State::kSkipping:
      return Internal("walker: skipping state has no unit");
    case State::kHeaderDescriptor: {
      header_descriptor_ = unit[0];
      Status s = walker::FrameHeaderSize(header_descriptor_, &header_rest_);
      if (!s.ok()) return s.WithPrefix(Where());
      header_rest_ -= 1;
      state_ = State::kHeaderRest;
      return Status::Ok();
    }
    case State::kHeaderRest: {
      uint8_t header[16];
      header[0] = header_descriptor_;
      std::memcpy(header + 1, unit.data(), unit.size());
      return StartFrame(std::span<const uint8_t>(header, unit.size() + 1));
    }
    case State::kBlockHeader: {
      const uint32_t bh = unit[0] | (uint32_t{unit[1]} << 8) | (uint32_t{unit[2]} << 16);
      block_last_ = (bh & 1) != 0;
      block_type_ = (bh >> 1) & 3;
      block_size_ = bh >> 3;
      if (block_type_ == 3) return DataLoss(Where() + ": reserved block type");
      if (block_type_ == 2 && block_size_ > walker::kMaxBlockSize) {
        return DataLoss(Where() + ": compressed block of " + std::to_string(block_size_) +
                        " bytes above 128 KiB");
      }
      if (block_size_ > frame_.block_max) {
        return DataLoss(Where() + ": block of " + std::to_string(block_size_) +
                        " bytes above Block_Maximum_Size " + std::to_string(frame_.block_max) +
                        " (libzstd tolerates)");
      }
      state_ = State::kBlockBody;
      return Status::Ok();
    }
    case State::kBlockBody: {
      RETURN_IF_ERROR(DecodeBlock(unit));
      if (block_last_) {
        if (frame_.has_checksum) {
          state_ = State::kChecksum;
        } else {
          RETURN_IF_ERROR(EndFrame(nullptr));
        }
      } else {
        state_ = State::kBlockHeader;
      }
      return Status::Ok();
    }
    case State::kChecksum:
      return EndFrame(unit.data());
  }
  return Internal("walker: bad state");
}

Status SparseZstdWalker::Impl::StartFrame(std::span<const uint8_t> header) {
  const std::string where = Where();
  RETURN_IF_ERROR(walker::ParseFrameHeader(header, &frame_).WithPrefix(where));
  if (frame_.dictionary_id != 0) {
    return Unimplemented(where + ": frame needs dictionary " +
                         std::to_string(frame_.dictionary_id) + "; dictionaries are not supported");
  }
  const uint32_t max_log = std::min<uint32_t>(options_.limits.max_window_log, 63);
  if (frame_.window_size > (uint64_t{1} << max_log)) {
    return ResourceExhausted(where + ": window of " + std::to_string(frame_.window_size) +
                             " bytes above the limit 2^" + std::to_string(max_log));
  }
  frame_start_ = stats_.decoded_length;
  output_.StartFrame(
      frame_start_, frame_.window_size,
      frame_.has_checksum && options_.limits.verify_checksum && !options_.decode_only);
  blocks_.ResetFrame();
  state_ = State::kBlockHeader;
  return Status::Ok();
}

Status SparseZstdWalker::Impl::DecodeBlock(std::span<const uint8_t> body) {
  const uint64_t before_pos = output_.position();
  const uint64_t before_nonzeros = output_.nonzeros();
  const uint64_t global = frame_start_ + before_pos;
  const uint64_t room =
      options_.limits.max_output > global ? options_.limits.max_output - global : 0;
  uint64_t work = 1;
  output_.BeginBlock(walker::kMaxBlockSize);
  if (block_type_ != 2) {
    if (block_size_ > room) {
      return ResourceExhausted(std::string(kOutputLimitMessage) + ": more than " +
                               std::to_string(options_.limits.max_output) + " bytes in " + Where());
    }
    if (options_.decode_only) {
      output_.Skip(block_size_);
    } else if (block_type_ == 0) {
      output_.AppendBytes(body.data(), body.size());
      work += body.size();
    } else {
      output_.AppendRepeated(body[0], block_size_);
    }
    ++(block_type_ == 0 ? stats_.raw_blocks : stats_.rle_blocks);
  } else {
    walker::SequenceLimits limits;
    limits.window = frame_.window_size;
    limits.block_max = frame_.block_max;
    limits.output_room = room;
    limits.execute = !options_.decode_only;
    BlockStats block;
    Status s = blocks_.Decode(body, limits, &output_, &block);
    if (!s.ok()) {
      if (!emitter_.status().ok()) return emitter_.status();
      // The output-limit error keeps its documented prefix (IsOutputLimitError).
      if (IsOutputLimitError(s)) return ResourceExhausted(s.message() + " in " + Where());
      return s.WithPrefix(Where() + " (compressed block)");
    }
    stats_.sequences += block.sequences;
    stats_.compat_flags |= block.compat_flags;
    work += block.sequences + block.literal_bytes;
  }
  output_.EndBlock();
  ++stats_.blocks;
  const uint64_t new_nonzeros = output_.nonzeros() - before_nonzeros;
  stats_.nonzero_bytes += new_nonzeros;
  work += new_nonzeros;
  stats_.work += work;
  stats_.runs = emitter_.runs();
  if (!emitter_.status().ok()) return emitter_.status();
  const uint64_t pos = output_.position();
  if (frame_.has_content_size && pos > frame_.content_size) {
    return DataLoss(Where() + ": frame output exceeds Frame_Content_Size " +
                    std::to_string(frame_.content_size));
  }
  if (pos > walker::NonzeroIndex::kMaxPosition) {
    return ResourceExhausted(Where() + ": frame longer than 2^56 bytes");
  }
  if (stats_.work > options_.max_work) {
    return ResourceExhausted(Where() + ": work limit of " + std::to_string(options_.max_work) +
                             " units exceeded");
  }
  (void)before_pos;
  output_.PruneToWindow();
  return Status::Ok();
}

Status SparseZstdWalker::Impl::EndFrame(const uint8_t* checksum) {
  const uint64_t size = output_.position();
  if (frame_.has_content_size && size != frame_.content_size) {
    return DataLoss(Where() + ": frame decoded to " + std::to_string(size) +
                    " bytes but Frame_Content_Size is " + std::to_string(frame_.content_size));
  }
  if (checksum != nullptr) {
    if (options_.limits.verify_checksum && !options_.decode_only) {
      const uint32_t expected = LoadLE32(checksum);
      const uint32_t actual = static_cast<uint32_t>(output_.FinishHash());
      if (expected != actual) {
        return DataLoss(Where() + ": content checksum mismatch: frame says " + Hex(expected) +
                        ", content hashes to " + Hex(actual));
      }
      ++stats_.checksums_verified;
    } else {
      ++stats_.checksums_skipped;
    }
  }
  stats_.decoded_length += size;
  ++stats_.frames;
  ++frame_index_;
  state_ = State::kMagic;
  return Status::Ok();
}

Status SparseZstdWalker::Impl::Finish() {
  if (!status_.ok()) return status_;
  if (state_ != State::kMagic || !pending_.empty()) {
    const char* what = "a frame";
    switch (state_) {
      case State::kMagic:
        what = "a frame magic number";
        break;
      case State::kSkipping:
      case State::kSkippableSize:
        what = "a skippable frame";
        break;
      case State::kHeaderDescriptor:
      case State::kHeaderRest:
        what = "a frame header";
        break;
      case State::kBlockHeader:
        what = "a block header";
        break;
      case State::kBlockBody:
        what = "a block";
        break;
      case State::kChecksum:
        what = "a content checksum";
        break;
    }
    return Fail(DataLoss("zstd input truncated inside " + std::string(what) +
                         " starting at input offset " + std::to_string(consumed_) + " (frame " +
                         std::to_string(frame_index_) + ")"));
  }
  emitter_.Flush();
  stats_.runs = emitter_.runs();
  if (!emitter_.status().ok()) return Fail(emitter_.status());
  return Status::Ok();
}

SparseZstdWalker::SparseZstdWalker(NonzeroSink& sink, const WalkerOptions& options)
    : impl_(std::make_unique<Impl>(sink, options)) {}
SparseZstdWalker::~SparseZstdWalker() = default;

void SparseZstdWalker::Restart(NonzeroSink& sink, const WalkerOptions& options) {
  impl_->Restart(sink, options);
}
Status SparseZstdWalker::Feed(std::span<const uint8_t> chunk) { return impl_->Feed(chunk); }
Status SparseZstdWalker::Finish() { return impl_->Finish(); }
const WalkStats& SparseZstdWalker::stats() const { return impl_->stats(); }
DecodeResult SparseZstdWalker::result() const {
  const WalkStats& s = impl_->stats();
  return DecodeResult{s.decoded_length, s.frames, s.nonzero_bytes, impl_->digest()};
}

StatusOr<WalkStats> WalkZstd(std::span<const uint8_t> input, const WalkerOptions& options,
                             NonzeroSink& sink) {
  SparseZstdWalker walker(sink, options);
  RETURN_IF_ERROR(walker.Feed(input));
  RETURN_IF_ERROR(walker.Finish());
  return walker.stats();
}

namespace {

class SparseWalkerDecoder final : public XorDecoder {
 public:
  std::string_view name() const override { return "sparse-walker"; }
  bool computes_digest() const override { return true; }
  // One walker for every input this decoder sees: a delta of many frames allocates (and
  // page-faults) its index and bitmap once, not once per frame.
  StatusOr<DecodeResult> Decode(std::span<const uint8_t> input, const DecodeLimits& limits,
                                NonzeroSink& sink) override {
    WalkerOptions options;
    options.limits = limits;
    if (walker_ == nullptr) {
      walker_ = std::make_unique<SparseZstdWalker>(sink, options);
    } else {
      walker_->Restart(sink, options);
    }
    RETURN_IF_ERROR(walker_->Feed(input));
    RETURN_IF_ERROR(walker_->Finish());
    return walker_->result();
  }

 private:
  std::unique_ptr<SparseZstdWalker> walker_;
};

}  // namespace

std::unique_ptr<XorDecoder> MakeSparseWalkerDecoder() {
  return std::make_unique<SparseWalkerDecoder>();
}

}  // namespace deltakv::deltasync
