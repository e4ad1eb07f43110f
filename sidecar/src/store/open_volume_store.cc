#include "store/open_volume_store.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "store/http_volume_store.h"

namespace deltakv::sidecar {

namespace {

// The directory a directory-store URL names ("" where deltasync::OpenVolumeStore refuses the
// URL: its own error then).
std::string DirectoryOf(const std::string& url) {
  if (url.empty()) return url;
  for (const char* scheme : {"dir://", "file://"}) {
    if (url.rfind(scheme, 0) != 0) continue;
    std::string path = url.substr(std::strlen(scheme));
    return path.starts_with('/') ? path : std::string();
  }
  return url.find("://") == std::string::npos ? url : std::string();
}

}  // namespace

StatusOr<std::unique_ptr<deltasync::VolumeStore>> OpenVolumeStoreUrl(const std::string& url,
                                                                     StoreDir dir,
                                                                     const S3StoreOptions& s3) {
  if (url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0) {
    return OpenHttpVolumeStore(url);
  }
  if (url.rfind("s3://", 0) != 0) {
    const std::string path = DirectoryOf(url);
    if (dir == StoreDir::kMustExist && !path.empty()) {
      struct stat st;
      if (stat(path.c_str(), &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) {
          return NotFound("volume store '" + url + "': no such directory");
        }
        return IoError("volume store '" + url + "': " + std::strerror(errno));
      }
      if (!S_ISDIR(st.st_mode)) {
        return InvalidArgument("volume store '" + url + "' is not a directory");
      }
    }
    return deltasync::OpenVolumeStore(url);
  }
  ASSIGN_OR_RETURN(S3Location where, ParseS3Url(url));
  ASSIGN_OR_RETURN(S3Config config, ResolveS3Config());
  return MakeS3VolumeStore(where, std::move(config), s3);
}

}  // namespace deltakv::sidecar
