// ObjectStore over HTTP: GET with Range headers, retries with exponential backoff on
// connection errors and 5xx, no retry on 4xx.
#include <httplib.h>

#include <chrono>
#include <thread>

#include "deltasync/delta_manifest.h"
#include "store/open_store.h"

namespace deltakv::sidecar {
namespace {

class HttpStore final : public deltasync::ObjectStore {
 public:
  HttpStore(std::string origin, std::string prefix, HttpStoreOptions opt)
      : origin_(std::move(origin)), prefix_(std::move(prefix)), opt_(opt) {}

  StatusOr<uint64_t> Size(const std::string& name) override {
    ASSIGN_OR_RETURN(auto res, Get(name, "", /*head=*/true));
    auto it = res.headers.find("Content-Length");
    if (it == res.headers.end()) return IoError(Url(name) + ": no Content-Length");
    return std::stoull(it->second);
  }

  StatusOr<std::string> ReadRange(const std::string& name, uint64_t offset,
                                  uint64_t length) override {
    if (length == 0) return std::string();
    std::string range =
        "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + length - 1);
    ASSIGN_OR_RETURN(auto res, Get(name, range, false));
    if (res.status == 200) {  // server ignored the range
      if (res.body.size() < offset + length) return Short(name, offset, length);
      return res.body.substr(offset, length);
    }
    if (res.body.size() != length) return Short(name, offset, length);
    return std::move(res.body);
  }

  StatusOr<std::string> ReadObject(const std::string& name, uint64_t max_bytes) override {
    ASSIGN_OR_RETURN(auto res, Get(name, "", false));
    if (res.body.size() > max_bytes) {
      return ResourceExhausted(Url(name) + " is larger than " + std::to_string(max_bytes) +
                               " bytes");
    }
    return std::move(res.body);
  }

  std::string Describe() const override { return origin_ + prefix_; }

 private:
  std::string Url(const std::string& name) const { return origin_ + prefix_ + "/" + name; }

  Status Short(const std::string& name, uint64_t offset, uint64_t length) const {
    return DataLoss(Url(name) + ": fewer bytes than [" + std::to_string(offset) + ", +" +
                    std::to_string(length) + ") (truncated object?)");
  }

  StatusOr<httplib::Response> Get(const std::string& name, const std::string& range, bool head) {
    if (!deltasync::IsSafeObjectName(name))
      return InvalidArgument("unsafe object name '" + name + "'");
    httplib::Client client(origin_);
    client.set_connection_timeout(opt_.timeout_seconds, 0);
    client.set_read_timeout(opt_.timeout_seconds, 0);
    httplib::Headers headers;
    if (!range.empty()) headers.emplace("Range", range);
    const std::string path = prefix_ + "/" + name;
    int backoff = opt_.initial_backoff_ms;
    std::string last;
    for (int attempt = 1; attempt <= opt_.attempts; ++attempt) {
      auto res = head ? client.Head(path, headers) : client.Get(path, headers);
      if (res) {
        if (res->status == 200 || res->status == 206) return *res;
        if (res->status == 404) return NotFound(Url(name) + ": 404 not found");
        last = "HTTP " + std::to_string(res->status);
        if (res->status < 500) return IoError(Url(name) + ": " + last);
      } else {
        last = httplib::to_string(res.error());
      }
      if (attempt < opt_.attempts) {
        std::this_thread::sleep_for(std::chrono::milliseconds(backoff));
        backoff *= 2;
      }
    }
    return IoError(Url(name) + ": " + last + " after " + std::to_string(opt_.attempts) + " tries");
  }

  std::string origin_;
  std::string prefix_;
  HttpStoreOptions opt_;
};

}  // namespace

StatusOr<std::unique_ptr<deltasync::ObjectStore>> OpenStore(const std::string& location,
                                                            const HttpStoreOptions& http) {
  if (location.rfind("file://", 0) == 0) return deltasync::MakeFileStore(location.substr(7));
  if (!location.empty() && location[0] == '/') return deltasync::MakeFileStore(location);
  if (location.rfind("http://", 0) == 0) {
    size_t slash = location.find('/', 7);
    std::string origin = slash == std::string::npos ? location : location.substr(0, slash);
    std::string prefix = slash == std::string::npos ? "" : location.substr(slash);
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    return std::unique_ptr<deltasync::ObjectStore>(new HttpStore(origin, prefix, http));
  }
  if (location.rfind("https://", 0) == 0) {
    return InvalidArgument(
        "https:// delta locations are not supported by this build; use http:// "
        "behind a TLS terminator or file://");
  }
  return InvalidArgument("delta location '" + location +
                         "' must be an absolute path, file://..., or http://...");
}

}  // namespace deltakv::sidecar
