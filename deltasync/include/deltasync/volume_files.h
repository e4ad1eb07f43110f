// A sealed volume version read as a plain object store of its files.
//
// OpenVolumeFiles presents the files of one version as objects named by their paths in the
// manifest ("manifest.json", "model-00001-of-00002.safetensors", "tokenizer/vocab.json"): Size
// is the manifest's file size, ReadRange fetches only the chunks that overlap the range, and
// every chunk is verified (Volumes::ReadChunk: digest checked, parent-XOR chains resolved)
// before a byte of it is returned. It lets a checkpoint kept in a volume be named wherever a
// checkpoint location is read, e.g. the sidecar's startup verify against `vol://NS/NAME:TAG`.
//
// Ownership: the returned store owns `store`. Thread-safety: as ObjectStore.
#pragma once

#include <memory>

#include "base/status.h"
#include "deltasync/object_store.h"
#include "deltasync/volume.h"

namespace deltakv::deltasync {

// Errors: as Volumes::Show for the version. Reads: NotFound for a path the version lacks,
// DataLoss for a range past the file's end or a chunk that does not verify, ResourceExhausted
// for a whole-object read above the caller's cap.
StatusOr<std::unique_ptr<ObjectStore>> OpenVolumeFiles(std::unique_ptr<VolumeStore> store,
                                                       const VolumeRef& ref,
                                                       const VolumesOptions& options = {});

}  // namespace deltakv::deltasync
