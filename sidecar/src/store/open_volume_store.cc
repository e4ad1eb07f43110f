#include "store/open_volume_store.h"

#include "store/http_volume_store.h"

namespace deltakv::sidecar {

StatusOr<std::unique_ptr<deltasync::VolumeStore>> OpenVolumeStoreUrl(const std::string& url,
                                                                     StoreDir dir,
                                                                     const S3StoreOptions& s3) {
  if (url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0) {
    return OpenHttpVolumeStore(url);
  }
  if (url.rfind("s3://", 0) != 0) return deltasync::OpenVolumeStore(url, dir == StoreDir::kCreate);
  ASSIGN_OR_RETURN(S3Location where, ParseS3Url(url));
  ASSIGN_OR_RETURN(S3Config config, ResolveS3Config());
  return MakeS3VolumeStore(where, std::move(config), s3);
}

}  // namespace deltakv::sidecar
