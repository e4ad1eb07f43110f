// Volumes::ReadChunk: fetch one chunk, resolving its parent-XOR chain, and verify it.
#include "deltasync/volume.h"
#include "sha256.h"
#include "volume/chunk_object.h"
#include "volume/names.h"
#include "volume/records.h"

namespace deltakv::deltasync {

StatusOr<std::string> ReadDeltaObject(VolumeStore& store, const std::string& hex,
                                      uint64_t chunk_size) {
  const std::string key = keys::XorChunk(hex);
  ASSIGN_OR_RETURN(std::string object, store.Get(key, MaxChunkObjectBytes(chunk_size)));
  const std::string actual = Sha256Hex(Bytes(object));
  if (actual != hex) {
    return DataLoss("delta object '" + key + "': sha256 of its bytes is " + actual);
  }
  return object;
}

StatusOr<std::string> Volumes::ReadChunk(const VolumeChunk& chunk) {
  if (chunk.xor_chain.empty()) {
    const std::string key = keys::Chunk(chunk.digest);
    ASSIGN_OR_RETURN(std::string object, store_.Get(key, MaxChunkObjectBytes(chunk.size)));
    return DecodeChunkObject(key, object, chunk.size, chunk.digest);
  }
  // The last base is stored whole; each link, from the end back to the first, turns the bytes
  // of its base into the bytes of the chunk one step nearer.
  const std::string& last = chunk.xor_chain.back().base;
  const std::string last_key = keys::Chunk(last);
  ASSIGN_OR_RETURN(std::string object, store_.Get(last_key, MaxChunkObjectBytes(chunk.size)));
  ASSIGN_OR_RETURN(std::string bytes, DecodeChunkObject(last_key, object, chunk.size, last));
  for (size_t i = chunk.xor_chain.size(); i-- > 0;) {
    const std::string& delta = chunk.xor_chain[i].delta;
    ASSIGN_OR_RETURN(object, ReadDeltaObject(store_, delta, chunk.size));
    ASSIGN_OR_RETURN(bytes, ApplyXorChunkObject(keys::XorChunk(delta), object, bytes));
  }
  const std::string actual = Sha256Hex(Bytes(bytes));
  if (actual != chunk.digest) {
    return DataLoss("chunk " + chunk.digest + " rebuilt through " +
                    std::to_string(chunk.xor_chain.size()) + " XOR link(s) has sha256 " + actual);
  }
  return bytes;
}

}  // namespace deltakv::deltasync
