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

// Errors: as ParseS3Url, ResolveS3Config and MakeS3VolumeStore for s3://, as
// OpenHttpVolumeStore for http(s)://, as deltasync::OpenVolumeStore otherwise.
StatusOr<std::unique_ptr<deltasync::VolumeStore>> OpenVolumeStoreUrl(const std::string& url,
                                                                     const S3StoreOptions& s3 = {});

}  // namespace deltakv::sidecar
