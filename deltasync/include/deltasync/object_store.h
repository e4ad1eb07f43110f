// ObjectStore: where published deltas and checkpoints are read from (a directory here; an HTTP
// server, an S3 bucket and sealed volumes in the sidecar's stores). Objects are named relative
// to the store's root, e.g. "manifest.json", "shard-00000.zst".
//
// Implementations retry transient failures themselves; a returned error is final. Errors:
// NotFound (no such object), IoError (the store could not be reached or read), DataLoss (the
// store returned fewer bytes than asked for), ResourceExhausted (object above the caller's cap).
//
// Thread-safety: implementations are safe to call from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace deltakv::deltasync {

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;
  // Returns the object's size in bytes.
  virtual StatusOr<uint64_t> Size(const std::string& name) = 0;
  // Returns bytes [offset, offset + length) of the object; DataLoss if it is shorter.
  virtual StatusOr<std::string> ReadRange(const std::string& name, uint64_t offset,
                                          uint64_t length) = 0;
  // Returns the whole object; ResourceExhausted if it is larger than max_bytes.
  virtual StatusOr<std::string> ReadObject(const std::string& name, uint64_t max_bytes) = 0;
  // "file:///data/deltas/v2", for messages.
  virtual std::string Describe() const = 0;
};

// A store rooted at a local directory.
std::unique_ptr<ObjectStore> MakeFileStore(const std::string& dir);

}  // namespace deltakv::deltasync
