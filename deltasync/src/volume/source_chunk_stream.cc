// SourceChunkStream: ranged reads in order, cut and hashed as they arrive.
#include "volume/source_chunk_stream.h"

#include <algorithm>

#include "base/le_bytes.h"
#include "deltasync/safetensors.h"
#include "volume/chunker.h"
#include "volume/records.h"

namespace deltakv::deltasync {

std::span<const uint8_t> ChunkBatch::ChunkBytes(size_t k) const {
  return Bytes(bytes).subspan(chunks[k].offset - offset, chunks[k].size);
}

SourceChunkStream::SourceChunkStream(FileSource& source, const ListedFile& file,
                                     uint64_t piece_size, uint64_t read_bytes, unsigned reads_ahead)
    : source_(source),
      file_(file),
      piece_size_(piece_size),
      read_bytes_(read_bytes),
      reads_ahead_(reads_ahead) {}

SourceChunkStream::~SourceChunkStream() {
  for (PendingRead& r : reads_) r.bytes.wait();
}

void SourceChunkStream::IssueReads() {
  while (reads_.size() < reads_ahead_ && next_read_ < file_.size) {
    const uint64_t offset = next_read_;
    const uint64_t length = std::min(read_bytes_, file_.size - offset);
    reads_.push_back({length, std::async(std::launch::async, [this, offset, length] {
                        return source_.ReadRange(file_, offset, length);
                      })});
    next_read_ += length;
  }
}

Status SourceChunkStream::Fill(uint64_t end) {
  while (BufferedEnd() < end) {
    IssueReads();
    PendingRead read = std::move(reads_.front());
    reads_.pop_front();
    StatusOr<std::string> bytes = read.bytes.get();
    if (!bytes.ok()) return bytes.status();
    if (bytes->size() != read.length) {
      return DataLoss(source_.Describe() + ": a read of " + std::to_string(read.length) +
                      " bytes at offset " + std::to_string(BufferedEnd()) + " of '" + file_.path +
                      "' returned " + std::to_string(bytes->size()));
    }
    sha256_.Update(Bytes(*bytes));
    buffer_.append(*bytes);
    IssueReads();
  }
  return Status::Ok();
}

// As ChunkFile: a file whose first 8 + N bytes hold a valid safetensors header is cut on tensor
// boundaries; any other with the content-defined chunker.
Status SourceChunkStream::ChooseChunking() {
  chunking_chosen_ = true;
  if (file_.size < 8) return Status::Ok();
  RETURN_IF_ERROR(Fill(8));
  const uint64_t n = LoadLE64(Bytes(buffer_).data());
  if (n > kDefaultMaxHeaderBytes || n > file_.size - 8) return Status::Ok();
  RETURN_IF_ERROR(Fill(8 + n));
  auto header = ParseSafetensorsHeader(Bytes(buffer_), file_.size);
  if (!header.ok()) return Status::Ok();
  safetensors_ = true;
  spans_ = SafetensorsChunks(*header, piece_size_);
  return Status::Ok();
}

StatusOr<ChunkBatch> SourceChunkStream::Next(uint64_t batch_bytes) {
  if (!chunking_chosen_) RETURN_IF_ERROR(ChooseChunking());
  ChunkBatch batch;
  batch.offset = cut_;
  uint64_t taken = 0;
  while (cut_ < file_.size && taken < batch_bytes) {
    uint64_t length = 0;
    if (safetensors_) {
      // The header validated: its tensors cover the data section exactly.
      if (next_span_ >= spans_.size() || spans_[next_span_].offset != cut_) {
        return Internal("'" + file_.path + "': safetensors chunks do not cover the file");
      }
      length = spans_[next_span_++].size;
      RETURN_IF_ERROR(Fill(cut_ + length));
    } else {
      RETURN_IF_ERROR(Fill(std::min(file_.size, cut_ + kCdcMaxChunk)));
      length = CdcCutLength(Bytes(buffer_).subspan(cut_ - buffer_start_));
    }
    batch.chunks.push_back({cut_, length});
    cut_ += length;
    taken += length;
  }
  // The batch takes the buffer up to the cut; the bytes read past it start the next buffer.
  std::string rest = buffer_.substr(cut_ - buffer_start_);
  buffer_.resize(cut_ - buffer_start_);
  batch.bytes = std::move(buffer_);
  buffer_ = std::move(rest);
  buffer_start_ = cut_;
  return batch;
}

std::string SourceChunkStream::FileSha256() { return sha256_.HexDigest(); }

}  // namespace deltakv::deltasync
