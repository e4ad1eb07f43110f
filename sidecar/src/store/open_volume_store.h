// OpenVolumeStoreUrl: the volume store a URL names, for the deltakv CLI.
//   "s3://BUCKET[/PREFIX]"              -> an S3 store (s3_volume_store.h), configured from the
//                                          environment and the AWS shared files (s3_config.h)
//   "http://..." or "https://..."       -> a read-only store over HTTP (http_volume_store.h)
//   "dir:///abs/path" or a plain path   -> deltasync::OpenVolumeStore (a directory store)
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "deltasync/volume.h"
#include "store/s3_volume_store.h"

namespace deltakv::sidecar {

// Whether opening a directory store may create its directory: only commands that write a
// version (push, sync into a store, tag) do; readers of a path that does not exist (a typo)
// get NotFound instead of an empty store.
enum class StoreDir { kMustExist, kCreate };

// Errors: as ParseS3Url, ResolveS3Config and MakeS3VolumeStore for s3://, as
// OpenHttpVolumeStore for http(s)://, as deltasync::OpenVolumeStore otherwise; with
// StoreDir::kMustExist, NotFound for a directory store whose directory does not exist and
// InvalidArgument for one whose path is not a directory.
StatusOr<std::unique_ptr<deltasync::VolumeStore>> OpenVolumeStoreUrl(
    const std::string& url, StoreDir dir = StoreDir::kMustExist, const S3StoreOptions& s3 = {});

}  // namespace deltakv::sidecar
