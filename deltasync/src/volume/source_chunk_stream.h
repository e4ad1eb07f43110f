// Private: one file of a FileSource (deltasync/volume_source.h) cut into the chunks ChunkFile
// cuts from the same bytes, for Volumes::PushFrom.
//
// The stream reads the file front to back in ranged reads of read_bytes, keeping up to
// reads_ahead of them in flight, and hashes the whole file as the bytes arrive. It decides
// between tensor-boundary and content-defined chunking from the first 8 + N bytes exactly as
// ChunkFile does (a safetensors header is read whole, at most kDefaultMaxHeaderBytes), and
// hands the chunks out in batches that own their bytes. It holds at most one batch, the bytes
// read past it (less than read_bytes plus the largest chunk) and the reads in flight.
//
// Thread-safety: one thread uses a stream. Its reads run on threads of their own (std::async);
// the destructor waits for those still in flight.
#pragma once

#include <cstdint>
#include <deque>
#include <future>
#include <string>
#include <vector>

#include "base/status.h"
#include "deltasync/volume.h"
#include "deltasync/volume_source.h"
#include "sha256.h"

namespace deltakv::deltasync {

// Consecutive chunks of a file with their bytes.
struct ChunkBatch {
  uint64_t offset = 0;            // of bytes[0] in the file: the first chunk's offset
  std::string bytes;              // the file's bytes [offset, offset + bytes.size())
  std::vector<ChunkSpan> chunks;  // back to back from `offset`, covering `bytes`

  std::span<const uint8_t> ChunkBytes(size_t k) const;
};

class SourceChunkStream {
 public:
  // REQUIRES: piece_size > 0, read_bytes > 0, reads_ahead > 0.
  SourceChunkStream(FileSource& source, const ListedFile& file, uint64_t piece_size,
                    uint64_t read_bytes, unsigned reads_ahead);
  SourceChunkStream(const SourceChunkStream&) = delete;
  SourceChunkStream& operator=(const SourceChunkStream&) = delete;
  ~SourceChunkStream();

  // Returns the next chunks of the file in order, at least batch_bytes together unless the
  // file ends first; a batch without chunks once the whole file was returned. Errors are the
  // source's (FailedPrecondition for a file that changed since it was listed), or DataLoss if
  // a read returned another number of bytes than asked for; the stream is unusable after one.
  StatusOr<ChunkBatch> Next(uint64_t batch_bytes);

  // The sha256 (64 hex) of the whole file. REQUIRES: Next returned a batch without chunks.
  std::string FileSha256();

 private:
  struct PendingRead {
    uint64_t length;
    std::future<StatusOr<std::string>> bytes;
  };

  uint64_t BufferedEnd() const { return buffer_start_ + buffer_.size(); }
  void IssueReads();
  // Reads until the buffer holds the file up to `end`. REQUIRES: end <= file size.
  Status Fill(uint64_t end);
  // Reads the header if the file may be a safetensors file and picks the chunking.
  Status ChooseChunking();

  FileSource& source_;
  const ListedFile file_;
  const uint64_t piece_size_;
  const uint64_t read_bytes_;
  const unsigned reads_ahead_;
  std::deque<PendingRead> reads_;  // in file order
  uint64_t next_read_ = 0;         // offset of the next read to issue
  std::string buffer_;             // file bytes [buffer_start_, BufferedEnd())
  uint64_t buffer_start_ = 0;
  uint64_t cut_ = 0;  // where the next chunk starts
  bool chunking_chosen_ = false;
  bool safetensors_ = false;
  std::vector<ChunkSpan> spans_;  // the chunks of a safetensors file
  size_t next_span_ = 0;
  Sha256 sha256_;
};

}  // namespace deltakv::deltasync
