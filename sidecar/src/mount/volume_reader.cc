#include "mount/volume_reader.h"

#include <algorithm>

namespace deltakv::mount {

VolumeReader::VolumeReader(const deltasync::VolumeManifest& manifest, ChunkCache& cache,
                           Prefetcher* prefetcher, ReadaheadOptions readahead, ErrorSink errors)
    : manifest_(manifest),
      cache_(cache),
      prefetcher_(prefetcher),
      readahead_(readahead),
      errors_(std::move(errors)) {}

StatusOr<std::vector<ReadSlice>> VolumeReader::Read(size_t file_index, uint64_t offset,
                                                    uint64_t size, ReadStream* stream) {
  const deltasync::VolumeFile& file = manifest_.files[file_index];
  std::vector<ReadSlice> slices;
  if (offset >= file.size || size == 0) return slices;
  const uint64_t end = std::min(file.size, offset + std::min(size, file.size - offset));
  // The first chunk whose end is past `offset` (chunks cover the file back to back).
  auto first = std::upper_bound(
      file.chunks.begin(), file.chunks.end(), offset,
      [](uint64_t off, const deltasync::VolumeChunk& c) { return off < c.offset + c.size; });
  const size_t first_index = static_cast<size_t>(first - file.chunks.begin());
  size_t last_index = first_index;
  for (size_t i = first_index; i < file.chunks.size() && file.chunks[i].offset < end; ++i) {
    const deltasync::VolumeChunk& c = file.chunks[i];
    StatusOr<ChunkHandle> bytes = cache_.Get(c);
    if (!bytes.ok()) {
      Status st = bytes.status().WithPrefix(
          "read '" + file.path + "' [" + std::to_string(offset) + ", " + std::to_string(end) +
          "): chunk " + std::to_string(i) + " sha256:" + c.digest + " (offset " +
          std::to_string(c.offset) + ", size " + std::to_string(c.size) + ")");
      if (errors_) errors_(st.message());
      return st;
    }
    const uint64_t from = std::max(offset, c.offset);
    const uint64_t to = std::min(end, c.offset + c.size);
    slices.push_back({*bytes, static_cast<size_t>(from - c.offset), static_cast<size_t>(to - from)});
    last_index = i;
  }
  if (stream != nullptr && prefetcher_ != nullptr) {
    bool sequential;
    {
      std::lock_guard<std::mutex> lock(stream->mu_);
      sequential = offset == 0 || (stream->started_ && first_index >= stream->last_chunk_ &&
                                   first_index <= stream->last_chunk_ + 1);
      stream->started_ = true;
      stream->last_chunk_ = sequential ? std::max(stream->last_chunk_, last_index) : last_index;
    }
    if (sequential) ReadAhead(file, last_index);
  }
  return slices;
}

void VolumeReader::ReadAhead(const deltasync::VolumeFile& file, size_t after_chunk) {
  uint64_t chunks = 0, bytes = 0;
  for (size_t i = after_chunk + 1; i < file.chunks.size(); ++i) {
    if (readahead_.bytes > 0 ? bytes >= readahead_.bytes : chunks >= readahead_.chunks) break;
    prefetcher_->Schedule(file.chunks[i]);
    ++chunks;
    bytes += file.chunks[i].size;
  }
}

}  // namespace deltakv::mount
