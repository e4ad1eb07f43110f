// A read-only volume store over HTTP(S): a directory store or an S3 bucket served under a URL
// prefix by any web server (objects are read as <prefix>/<key>). Enough to show, pull, mount,
// copy from (`volume sync --from https://...`) and sync live from (`vol://`) versions named by
// digest or tag; not to list, push, tag, remove or gc.
//
// Get, Exists and Size are GET and HEAD through the HTTP object store (store/open_store.h:
// retries, byte caps, TLS verification, basic auth). GetVersioned reads a tag record in either
// form a store writes it: a directory store's file ("DKVG", u64 little-endian generation, then
// the data; deltasync/VOLUME.md 2.2) or plain data (S3; the generation is then empty). List is
// Unimplemented and every write is FailedPrecondition ("read-only"), naming the store.
//
// Thread-safety: as the HTTP object store, safe from several threads.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "deltasync/volume.h"
#include "store/open_store.h"

namespace deltakv::sidecar {

// `url` is http://... or https://...; errors as OpenStore for those schemes.
StatusOr<std::unique_ptr<deltasync::VolumeStore>> OpenHttpVolumeStore(
    const std::string& url, const HttpStoreOptions& http = {});

}  // namespace deltakv::sidecar
