#include "store/http_volume_store.h"

#include <cstring>

namespace deltakv::sidecar {
namespace {

constexpr char kDirStoreMagic[4] = {'D', 'K', 'V', 'G'};
constexpr size_t kDirStoreHeader = 12;

class HttpVolumeStore : public deltasync::VolumeStore {
 public:
  explicit HttpVolumeStore(std::unique_ptr<deltasync::ObjectStore> objects)
      : objects_(std::move(objects)) {}

  Status Put(const std::string& key, std::span<const uint8_t>) override { return ReadOnly(key); }
  Status PutIfAbsent(const std::string& key, std::span<const uint8_t>) override {
    return ReadOnly(key);
  }
  StatusOr<std::string> Get(const std::string& key, uint64_t max_bytes) override {
    return objects_->ReadObject(key, max_bytes);
  }
  StatusOr<bool> Exists(const std::string& key) override {
    auto size = objects_->Size(key);
    if (size.status().code() == StatusCode::kNotFound) return false;
    if (!size.ok()) return size.status();
    return true;
  }
  StatusOr<uint64_t> Size(const std::string& key) override { return objects_->Size(key); }
  StatusOr<std::vector<std::string>> List(const std::string& prefix) override {
    return Unimplemented("volume store " + Describe() + " cannot list '" + prefix +
                         "': an http(s) store is read by key only (ls and gc need a "
                         "directory or s3:// store)");
  }
  Status Delete(const std::string& key) override { return ReadOnly(key); }
  StatusOr<deltasync::VersionedObject> GetVersioned(const std::string& key,
                                                    uint64_t max_bytes) override {
    ASSIGN_OR_RETURN(std::string data, objects_->ReadObject(key, max_bytes + kDirStoreHeader));
    if (data.size() >= kDirStoreHeader && std::memcmp(data.data(), kDirStoreMagic, 4) == 0) {
      uint64_t generation = 0;
      for (int i = 0; i < 8; ++i) {
        generation |= uint64_t{static_cast<uint8_t>(data[4 + i])} << (8 * i);
      }
      return deltasync::VersionedObject{data.substr(kDirStoreHeader), std::to_string(generation)};
    }
    if (data.size() > max_bytes) {
      return ResourceExhausted("object '" + key + "' of " + Describe() + " is above " +
                               std::to_string(max_bytes) + " bytes");
    }
    return deltasync::VersionedObject{std::move(data), ""};
  }
  StatusOr<std::string> PutIfGeneration(const std::string& key, std::span<const uint8_t>,
                                        const std::string&) override {
    return ReadOnly(key);
  }
  std::string Describe() const override { return objects_->Describe(); }

 private:
  // Unimplemented, not FailedPrecondition: to PutIfGeneration's callers that means "someone
  // else wrote it first" (a gc would report another gc's marker).
  Status ReadOnly(const std::string& key) const {
    return Unimplemented("volume store " + Describe() +
                         " is read-only (http/https): " + "cannot write '" + key + "'");
  }

  std::unique_ptr<deltasync::ObjectStore> objects_;
};

}  // namespace

StatusOr<std::unique_ptr<deltasync::VolumeStore>> OpenHttpVolumeStore(
    const std::string& url, const HttpStoreOptions& http) {
  if (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0) {
    return InvalidArgument("'" + url + "' is not an http:// or https:// volume store");
  }
  HttpStoreOptions options = http;
  options.object_paths = true;
  ASSIGN_OR_RETURN(std::unique_ptr<deltasync::ObjectStore> objects,
                   OpenStore(url, options, "", VolumeView::kDelta, "volume store"));
  return std::unique_ptr<deltasync::VolumeStore>(new HttpVolumeStore(std::move(objects)));
}

}  // namespace deltakv::sidecar
