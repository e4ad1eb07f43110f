// ObjectStore over HTTP and HTTPS, on libcurl: HEAD for sizes, Range GETs, whole-object GETs
// under a byte cap. Connection errors, timeouts, stalls and 5xx answers are retried with
// exponential backoff; 4xx answers and certificate failures are final.
//
// A call takes a curl easy handle for itself from the store's pool and gives it back after, so
// one store serves several threads at once and later calls reuse open connections. libcurl's
// global state is set up once per process.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "deltasync/delta_manifest.h"
#include "deltasync/volume_delta.h"
#include "deltasync/volume_files.h"
#include "store/curl_util.h"
#include "store/open_volume_store.h"
#include "store/open_store.h"
#include "store/s3_object_store.h"

namespace deltakv::sidecar {
namespace {

// "bytes 100-199/1000" -> 100.
std::optional<uint64_t> ContentRangeStart(std::string_view value) {
  if (!StartsWithNoCase(value, "bytes ")) return std::nullopt;
  value.remove_prefix(6);
  return ParseUint(value.substr(0, value.find('-')));
}

enum class Want { kHead, kRange, kObject };

// Why the callbacks ended a transfer early (libcurl then reports CURLE_WRITE_ERROR).
enum class Stop {
  kNone,
  kErrorStatus,  // a non-2xx answer: its body is not read
  kHaveRange,    // a 200 answer to a Range GET: the asked bytes are in, the rest is not read
  kOverCap,      // the object is larger than the caller's cap
  kOverRange,    // a 206 answer longer than the asked range
};

// One request and what came back, shared with the libcurl callbacks.
struct Transfer {
  Want want = Want::kObject;
  uint64_t offset = 0;  // kRange
  uint64_t length = 0;  // kRange
  uint64_t cap = 0;     // kObject

  // Filled in by the callbacks; cleared before each try.
  long status = 0;
  std::optional<uint64_t> content_length;
  std::string content_range;
  uint64_t received = 0;  // body bytes the server sent, kept or not
  std::string body;
  Stop stop = Stop::kNone;

  void Clear() {
    status = 0;
    content_length.reset();
    content_range.clear();
    received = 0;
    body.clear();
    stop = Stop::kNone;
  }
};

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * count;
  std::string_view line(data, bytes);
  if (StartsWithNoCase(line, "HTTP/")) {  // a status line starts each response (1xx included)
    t->status = 0;
    t->content_length.reset();
    t->content_range.clear();
    size_t sp = line.find(' ');
    if (sp != std::string_view::npos) {
      if (auto code = ParseUint(line.substr(sp + 1, 3))) t->status = static_cast<long>(*code);
    }
    return bytes;
  }
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) {  // the blank line that ends the headers
    if (t->want == Want::kObject && t->status == 200 && t->content_length &&
        *t->content_length > t->cap) {
      t->stop = Stop::kOverCap;
      return 0;
    }
    return bytes;
  }
  std::string_view name = line.substr(0, colon);
  std::string_view value = TrimHeaderValue(line.substr(colon + 1));
  if (EqualsNoCase(name, "Content-Length")) {
    t->content_length = ParseUint(value);
  } else if (EqualsNoCase(name, "Content-Range")) {
    t->content_range = std::string(value);
  }
  return bytes;
}

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * count;
  const uint64_t at = t->received;  // where `data` starts in the response body
  t->received += bytes;
  if (t->status != 200 && t->status != 206) {
    t->stop = Stop::kErrorStatus;
    return 0;
  }
  if (at == 0) {
    uint64_t expect = t->want == Want::kRange ? t->length : t->content_length.value_or(0);
    t->body.reserve(std::min<uint64_t>(expect, t->want == Want::kObject ? t->cap : expect));
  }
  switch (t->want) {
    case Want::kHead:
      return bytes;
    case Want::kObject:
      if (t->body.size() + bytes > t->cap) {
        t->stop = Stop::kOverCap;
        return 0;
      }
      t->body.append(data, bytes);
      return bytes;
    case Want::kRange: {
      if (t->status == 206) {
        if (t->body.size() + bytes > t->length) {
          t->stop = Stop::kOverRange;
          return 0;
        }
        t->body.append(data, bytes);
        return bytes;
      }
      // 200: the server ignored the Range header and sends the whole object.
      const uint64_t end = t->offset + t->length;
      const uint64_t lo = std::max(at, t->offset);
      const uint64_t hi = std::min(at + bytes, end);
      if (lo < hi) t->body.append(data + (lo - at), hi - lo);
      if (at + bytes >= end) {
        t->stop = Stop::kHaveRange;
        return 0;
      }
      return bytes;
    }
  }
  return bytes;
}

class HttpStore final : public deltasync::ObjectStore {
 public:
  // `base` is what libcurl fetches (credentials included); `shown` is the same location with
  // the credentials replaced, for messages.
  HttpStore(std::string base, std::string shown, std::string secret, HttpStoreOptions opt)
      : base_(std::move(base)),
        shown_(std::move(shown)),
        secret_(std::move(secret)),
        opt_(std::move(opt)) {}

  StatusOr<uint64_t> Size(const std::string& name) override {
    Transfer t;
    t.want = Want::kHead;
    RETURN_IF_ERROR(Fetch(name, t));
    if (t.status != 200) return Unexpected(name, t);
    if (!t.content_length) return IoError(Url(name) + ": no Content-Length in the HEAD answer");
    return *t.content_length;
  }

  StatusOr<std::string> ReadRange(const std::string& name, uint64_t offset,
                                  uint64_t length) override {
    if (length == 0) return std::string();
    if (offset > std::numeric_limits<uint64_t>::max() - length) {
      return InvalidArgument(Url(name) + ": range [" + std::to_string(offset) + ", +" +
                             std::to_string(length) + ") overflows");
    }
    Transfer t;
    t.want = Want::kRange;
    t.offset = offset;
    t.length = length;
    RETURN_IF_ERROR(Fetch(name, t));
    if (t.status == 206) {
      std::optional<uint64_t> start = ContentRangeStart(t.content_range);
      if (!start || *start != offset) {
        return IoError(Url(name) + ": asked for bytes from " + std::to_string(offset) +
                       ", the server answered Content-Range '" + t.content_range + "'");
      }
    } else if (t.status != 200) {
      return Unexpected(name, t);
    }
    if (t.body.size() < length) {
      const uint64_t ends = t.status == 206 ? offset + t.body.size() : t.received;
      return DataLoss(Url(name) + ": the object ends at byte " + std::to_string(ends) +
                      ", before byte " + std::to_string(offset + length) + " (truncated object?)");
    }
    return std::move(t.body);
  }

  StatusOr<std::string> ReadObject(const std::string& name, uint64_t max_bytes) override {
    Transfer t;
    t.want = Want::kObject;
    t.cap = max_bytes;
    RETURN_IF_ERROR(Fetch(name, t));
    if (t.status != 200) return Unexpected(name, t);
    return std::move(t.body);
  }

  std::string Describe() const override { return shown_; }

 private:
  std::string Url(const std::string& name) const { return shown_ + "/" + name; }

  // libcurl's messages do not carry the URL's credentials, but make sure.
  std::string Scrub(std::string text) const {
    if (secret_.empty()) return text;
    for (size_t at = text.find(secret_); at != std::string::npos; at = text.find(secret_, at)) {
      text.replace(at, secret_.size(), "***");
    }
    return text;
  }

  Status Unexpected(const std::string& name, const Transfer& t) const {
    return IoError(Url(name) + ": unexpected HTTP " + std::to_string(t.status) + " answer");
  }

  Status Configure(CURL* c, const std::string& url, const std::string& range, Transfer& t,
                   char* errbuf) const {
    CURLcode rc = SetCurlTransfer(
        c, {url.c_str(), errbuf, OnHeader, OnBody, static_cast<void*>(&t), opt_.timeout_seconds,
            opt_.low_speed_bytes_per_second, opt_.total_timeout_seconds, opt_.ca_file.c_str()});
    auto set = [&rc](CURLcode r) {
      if (rc == CURLE_OK) rc = r;
    };
    if (t.want == Want::kHead) set(curl_easy_setopt(c, CURLOPT_NOBODY, 1L));
    if (!range.empty()) set(curl_easy_setopt(c, CURLOPT_RANGE, range.c_str()));
    if (rc != CURLE_OK) {
      return Internal(std::string("libcurl refused an option: ") + curl_easy_strerror(rc) +
                      " (libcurl " + curl_version_info(CURLVERSION_NOW)->version + ")");
    }
    return Status::Ok();
  }

  // A safe object name, or with opt_.object_paths a '/'-separated path of safe names.
  bool SafeName(const std::string& name) const {
    if (!opt_.object_paths) return deltasync::IsSafeObjectName(name);
    size_t start = 0;
    while (true) {
      const size_t slash = name.find('/', start);
      const std::string_view part =
          std::string_view(name).substr(start, slash == std::string::npos ? std::string::npos
                                                                          : slash - start);
      if (!deltasync::IsSafeObjectName(part)) return false;
      if (slash == std::string::npos) return true;
      start = slash + 1;
    }
  }

  std::string CaHint() const {
    if (opt_.ca_file.empty()) {
      return "checked against the system CA store; set the CA that signed it with "
             "--http-ca-file (config: http_ca_file)";
    }
    return "checked against the CA file '" + opt_.ca_file + "'";
  }

  // Runs the request, retrying transient failures. OK means a 200 or 206 answer is in `t`.
  Status Fetch(const std::string& name, Transfer& t) {
    if (!SafeName(name)) return InvalidArgument("unsafe object name '" + name + "'");
    RETURN_IF_ERROR(CurlGlobalInit());
    CurlHandle handle = pool_.Acquire();
    if (!handle) return Internal("curl_easy_init failed");
    Status s = Fetch(handle.get(), name, t);
    pool_.Release(std::move(handle));
    return s;
  }

  Status Fetch(CURL* curl, const std::string& name, Transfer& t) const {
    const std::string url = base_ + "/" + name;
    const std::string range = t.want == Want::kRange ? std::to_string(t.offset) + "-" +
                                                           std::to_string(t.offset + t.length - 1)
                                                     : std::string();
    char errbuf[CURL_ERROR_SIZE];
    RETURN_IF_ERROR(Configure(curl, url, range, t, errbuf));

    const int attempts = std::max(1, opt_.attempts);
    int backoff_ms = std::max(0, opt_.initial_backoff_ms);
    std::string last;
    bool cut_short = false;  // the last try's body ended before its Content-Length
    for (int attempt = 1; attempt <= attempts; ++attempt) {
      t.Clear();
      errbuf[0] = '\0';
      CURLcode rc = curl_easy_perform(curl);
      if (rc == CURLE_WRITE_ERROR && t.stop != Stop::kNone) rc = CURLE_OK;  // we ended it
      if (rc == CURLE_OK) {
        if (t.stop == Stop::kOverCap) {
          return ResourceExhausted(Url(name) + " is larger than " + std::to_string(t.cap) +
                                   " bytes");
        }
        if (t.stop == Stop::kOverRange) {
          return IoError(Url(name) + ": the server sent more than the " + std::to_string(t.length) +
                         " bytes asked for");
        }
        if (t.status == 200 || t.status == 206) return Status::Ok();
        if (t.status == 404) return NotFound(Url(name) + ": HTTP 404 not found");
        if (t.status == 416) {
          return DataLoss(Url(name) + ": HTTP 416: the object ends before byte " +
                          std::to_string(t.offset) + " (truncated object?)");
        }
        last = "HTTP " + std::to_string(t.status);
        cut_short = false;
        if (t.status < 500) {
          return IoError(
              Url(name) + ": " + last +
              (t.status >= 300 && t.status < 400 ? " (redirects are not followed)" : ""));
        }
      } else {
        last = Scrub(errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc));
        if (IsCertificateError(rc)) {
          return IoError(Url(name) + ": TLS: the server's certificate was not accepted (" + last +
                         "); " + CaHint());
        }
        if (!IsTransientCurlError(rc)) return IoError(Url(name) + ": " + last);
        cut_short = rc == CURLE_PARTIAL_FILE;
      }
      if (attempt < attempts) {
        std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
        backoff_ms = std::min(backoff_ms * 2, 30000);
      }
    }
    const std::string tries = std::to_string(attempts) + (attempts == 1 ? " try" : " tries");
    if (cut_short) {
      std::string announced =
          t.content_length ? " of the " + std::to_string(*t.content_length) + " announced" : "";
      return DataLoss(Url(name) + ": truncated: the server sent " + std::to_string(t.received) +
                      announced + " bytes and closed the connection (" + tries + ")");
    }
    return IoError(Url(name) + ": " + last + " (after " + tries + ")");
  }

  std::string base_;
  std::string shown_;
  std::string secret_;
  HttpStoreOptions opt_;
  CurlHandlePool pool_;
};

StatusOr<std::unique_ptr<deltasync::ObjectStore>> OpenHttpStore(const std::string& location,
                                                                const HttpStoreOptions& opt,
                                                                std::string_view what) {
  const size_t scheme_end = location.find("://") + 3;
  const bool https = location.rfind("https://", 0) == 0;
  const size_t query = location.find_first_of("?#");
  const std::string url = location.substr(0, query);
  const size_t slash = url.find('/', scheme_end);
  const std::string authority = url.substr(scheme_end, slash - scheme_end);
  std::string prefix = slash == std::string::npos ? "" : url.substr(slash);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  const size_t at = authority.rfind('@');
  const std::string userinfo = at == std::string::npos ? "" : authority.substr(0, at);
  const std::string host = at == std::string::npos ? authority : authority.substr(at + 1);
  const std::string scheme = url.substr(0, scheme_end);
  const std::string shown = scheme + (userinfo.empty() ? "" : "***@") + host + prefix;

  if (query != std::string::npos) {
    return InvalidArgument(std::string(what) + " '" + RedactLocation(location) +
                           "' has a query or fragment; objects are read as <location>/<name>");
  }
  if (host.empty() || host[0] == ':') {
    return InvalidArgument(std::string(what) + " '" + RedactLocation(location) + "' has no host");
  }
  for (char c : url) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) {
      return InvalidArgument(std::string(what) + " '" + RedactLocation(location) +
                             "' has a space or control character (percent-encode it)");
    }
  }
  if (https && !opt.ca_file.empty() && access(opt.ca_file.c_str(), R_OK) != 0) {
    return InvalidArgument("HTTP CA file '" + opt.ca_file + "': " + std::strerror(errno));
  }
  // The secret to keep out of messages: the password, or a user-only token.
  const size_t colon = userinfo.find(':');
  std::string secret = colon == std::string::npos ? userinfo : userinfo.substr(colon + 1);
  return std::unique_ptr<deltasync::ObjectStore>(
      new HttpStore(scheme + authority + prefix, shown, std::move(secret), opt));
}

}  // namespace

StatusOr<std::unique_ptr<deltasync::ObjectStore>> OpenStore(const std::string& location,
                                                            const HttpStoreOptions& http,
                                                            const std::string& volume_store,
                                                            VolumeView view,
                                                            std::string_view what) {
  if (location.rfind("vol://", 0) == 0) {
    if (volume_store.empty()) {
      return FailedPrecondition(std::string(what) + " '" + location +
                                "' names a volume but the sidecar has no --volume-store");
    }
    ASSIGN_OR_RETURN(deltasync::VolumeRef ref, deltasync::ParseVolumeRef(location.substr(6)));
    ASSIGN_OR_RETURN(auto store, OpenVolumeStoreUrl(volume_store));
    if (view == VolumeView::kFiles) return deltasync::OpenVolumeFiles(std::move(store), ref);
    return deltasync::OpenVolumeDelta(std::move(store), ref);
  }
  if (location.rfind("file://", 0) == 0) return deltasync::MakeFileStore(location.substr(7));
  if (!location.empty() && location[0] == '/') return deltasync::MakeFileStore(location);
  if (location.rfind("s3://", 0) == 0) {
    ASSIGN_OR_RETURN(S3Location where, ParseS3Url(location));
    ASSIGN_OR_RETURN(S3Config config, ResolveS3Config());
    S3ClientOptions s3;
    s3.attempts = http.attempts;
    s3.initial_backoff_ms = http.initial_backoff_ms;
    s3.timeout_seconds = http.timeout_seconds;
    s3.low_speed_bytes_per_second = http.low_speed_bytes_per_second;
    s3.total_timeout_seconds = http.total_timeout_seconds;
    return MakeS3ObjectStore(std::move(where), std::move(config), s3);
  }
  if (location.rfind("http://", 0) == 0 || location.rfind("https://", 0) == 0) {
    return OpenHttpStore(location, http, what);
  }
  return InvalidArgument(std::string(what) + " '" + RedactLocation(location) +
                         "' must be an absolute path, file://..., http://..., https://..., "
                         "s3://... or vol://...");
}

std::string RedactCredentials(std::string_view text) {
  std::string out;
  size_t done = 0;  // text before it is in `out`
  for (size_t sep = text.find("://"); sep != std::string_view::npos;
       sep = text.find("://", sep + 3)) {
    if (sep >= 3 && text.substr(sep - 3, 3) == "vol") continue;  // '@' names a digest there
    const size_t start = sep + 3;
    if (start < done) continue;
    // The URL ends where its quote or the word does; its authority at the path, query or
    // fragment.
    const size_t url_end = std::min(text.find_first_of("'\" \n\t", start), text.size());
    const size_t authority_end = std::min(text.find_first_of("/?#", start), url_end);
    size_t at = text.substr(start, authority_end - start).rfind('@');
    if (at == 0) at = std::string_view::npos;  // no user info to hide
    const size_t query = std::min(text.find_first_of("?#", start), url_end);
    if (at == std::string_view::npos && query == url_end) continue;
    out.append(text.substr(done, start - done));
    if (at != std::string_view::npos) out.append("***");
    const size_t keep = at == std::string_view::npos ? start : start + at;  // from the '@' on
    out.append(text.substr(keep, query - keep));
    if (query < url_end) out.append("...");  // a query or fragment may carry a signature
    done = url_end;
  }
  out.append(text.substr(done));
  return out;
}

std::string RedactLocation(const std::string& location) { return RedactCredentials(location); }

}  // namespace deltakv::sidecar
