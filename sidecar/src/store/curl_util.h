// Shared libcurl plumbing of the object stores (http_store.cc, s3_volume_store.cc): one-time
// global initialization, the classification of transfer errors into retried and final ones,
// header-line helpers, and a pool of easy handles.
//
// Thread-safety: CurlGlobalInit and CurlHandlePool are safe to call from several threads; a
// CurlHandle is used by one thread at a time.
#pragma once

#include <curl/curl.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace deltakv::sidecar {

// Sets up libcurl's global state once per process. Internal if libcurl cannot start.
Status CurlGlobalInit();

// Transport failures worth another try (resolve, connect, timeouts, broken transfers).
bool IsTransientCurlError(CURLcode rc);
// The server's certificate was refused: final, and worth a hint about the CA.
bool IsCertificateError(CURLcode rc);

bool StartsWithNoCase(std::string_view s, std::string_view prefix);
bool EqualsNoCase(std::string_view a, std::string_view b);
// A header value without surrounding blanks and the line's CR LF.
std::string_view TrimHeaderValue(std::string_view s);
// A whole string of decimal digits, or nullopt.
std::optional<uint64_t> ParseUint(std::string_view s);

// What every deltakv transfer sets on its easy handle, whatever the store.
struct CurlTransferSetup {
  const char* url = nullptr;
  char* errbuf = nullptr;                   // CURL_ERROR_SIZE bytes
  curl_write_callback on_header = nullptr;  // called with `user`
  curl_write_callback on_body = nullptr;    // called with `user`
  void* user = nullptr;
  long timeout_seconds = 30;  // connect timeout, and the stall window of the low-speed limit
  uint64_t low_speed_bytes_per_second = 1024;
  long total_timeout_seconds = 0;  // 0 = none
  const char* ca_file = nullptr;   // nullptr or "": the system CA store
};

// Sets the options of `s` on `c`: http(s) only, no signals, no redirects, the callbacks, the
// timeouts, and peer and host verification. Returns the first libcurl error, or CURLE_OK.
CURLcode SetCurlTransfer(CURL* c, const CurlTransferSetup& s);

struct CurlCleanup {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
using CurlHandle = std::unique_ptr<CURL, CurlCleanup>;

// Idle easy handles kept with their open connections, so later requests reuse them.
class CurlHandlePool {
 public:
  explicit CurlHandlePool(size_t max_idle = 8) : max_idle_(max_idle) {}
  // An idle handle, or a new one (null only if libcurl cannot allocate one).
  CurlHandle Acquire();
  // Takes a handle back with its options reset; its connections stay open.
  void Release(CurlHandle c);

 private:
  const size_t max_idle_;
  std::mutex mu_;
  std::vector<CurlHandle> idle_;  // GUARDED_BY(mu_)
};

}  // namespace deltakv::sidecar
