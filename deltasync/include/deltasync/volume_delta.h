// A sealed volume version read as a delta: `vol://` syncs.
//
// A version pushed with `--parent` (deltasync/VOLUME.md, section 5.1) stores each changed tensor
// piece as a delta object whose payload is zstd(parent piece XOR new piece): exactly the frames
// of a delta `parent -> version` (FORMAT.md, section 2). OpenVolumeDelta presents such a version
// as an ObjectStore holding a delta: "manifest.json" is a delta manifest built from the two
// versions' checkpoint manifests (the file "manifest.json" of each, FORMAT.md 1.2), and each
// changed piece is one frame in an object named "xchunk-<sha256 of the delta object>"; every
// object is checked against that sha256 whenever it is read, so nothing unverified reaches a
// decoder. Unchanged pieces (same digest in both versions) are left out.
//
// Ownership: the returned store owns `store`. Thread-safety: as ObjectStore (the VolumeStore
// must be safe to call from several threads, which every VolumeStore is).
#pragma once

#include <memory>

#include "base/status.h"
#include "deltasync/object_store.h"
#include "deltasync/volume.h"

namespace deltakv::deltasync {

// Builds the delta of the version `ref` names against its parent. Errors: as for
// Volumes::Show (the version and its parent must be live); FailedPrecondition if the version
// has no parent, or a changed piece is stored whole rather than as a delta against the parent's
// piece (push with --parent and without --no-xor to sync it live); InvalidArgument if either
// version lacks a valid checkpoint manifest.json, a tensor is missing from the parent or has
// another length there, or the pieces of a tensor are not cut the same way in both versions;
// DataLoss if a tensor's checksums differ but none of its pieces do.
StatusOr<std::unique_ptr<ObjectStore>> OpenVolumeDelta(std::unique_ptr<VolumeStore> store,
                                                       const VolumeRef& ref,
                                                       const VolumesOptions& options = {});

}  // namespace deltakv::deltasync
