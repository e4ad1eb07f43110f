// S3Client: one signed, retried HTTP request at a time per curl handle (s3_client.h).
#include "store/s3_client.h"

#include <openssl/evp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "base/percent_encode.h"
#include "store/s3_xml.h"

namespace deltakv::sidecar {
namespace {

constexpr char kEmptySha256[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr uint64_t kMaxErrorBody = 64 << 10;  // bytes of an error answer kept for its message

bool IsBucketChar(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

bool IsUnreserved(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.' || c == '~';
}

std::string Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr) != 1) return "";
  std::string out;
  char buf[3];
  for (unsigned i = 0; i < len; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", md[i]);
    out += buf;
  }
  return out;
}

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* r = static_cast<S3Response*>(user);
  const size_t bytes = size * count;
  std::string_view line(data, bytes);
  if (StartsWithNoCase(line, "HTTP/")) {  // each response, 1xx included, starts with one
    r->status = 0;
    r->content_length.reset();
    r->etag.clear();
    r->content_range.clear();
    const size_t sp = line.find(' ');
    if (sp != std::string_view::npos) {
      if (auto code = ParseUint(line.substr(sp + 1, 3))) r->status = static_cast<long>(*code);
    }
    return bytes;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) {  // the end of the headers
    if (r->get && r->ok() && r->content_length && *r->content_length > r->cap) {
      r->over_cap = true;
      return 0;
    }
    return bytes;
  }
  std::string_view name = line.substr(0, colon);
  std::string_view value = TrimHeaderValue(line.substr(colon + 1));
  if (EqualsNoCase(name, "Content-Length")) {
    r->content_length = ParseUint(value);
  } else if (EqualsNoCase(name, "ETag")) {
    r->etag = std::string(value);
  } else if (EqualsNoCase(name, "Content-Range")) {
    r->content_range = std::string(value);
  }
  return bytes;
}

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* r = static_cast<S3Response*>(user);
  const size_t bytes = size * count;
  const uint64_t cap = r->ok() ? r->cap : kMaxErrorBody;
  if (r->body.size() + bytes > cap) {
    if (r->ok()) {
      r->over_cap = true;
      return 0;
    }
    r->body.append(data, cap - r->body.size());
    return bytes;
  }
  if (r->body.empty() && r->ok() && r->content_length) {
    r->body.reserve(std::min(*r->content_length, cap));
  }
  r->body.append(data, bytes);
  return bytes;
}

struct SlistFree {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using Slist = std::unique_ptr<curl_slist, SlistFree>;

}  // namespace

StatusOr<S3Location> ParseS3Url(const std::string& url) {
  if (url.rfind("s3://", 0) != 0) return InvalidArgument("'" + url + "' is not an s3:// URL");
  std::string rest = url.substr(5);
  const size_t slash = rest.find('/');
  S3Location loc;
  loc.bucket = rest.substr(0, slash);
  std::string prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  const std::string& b = loc.bucket;
  bool bucket_ok =
      b.size() >= 3 && b.size() <= 63 && IsBucketChar(b.front()) && IsBucketChar(b.back());
  for (char c : b) bucket_ok = bucket_ok && (IsBucketChar(c) || c == '.' || c == '-');
  if (!bucket_ok) {
    return InvalidArgument("'" + url + "': bucket '" + b +
                           "' is not 3-63 characters of a-z 0-9 . - starting and ending with a "
                           "letter or digit");
  }
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (!prefix.empty()) {
    for (char c : prefix) {
      if (!IsUnreserved(c) && c != '/') {
        return InvalidArgument("'" + url + "': prefix '" + prefix +
                               "' has a character other than A-Z a-z 0-9 - _ . ~ /");
      }
    }
    for (size_t start = 0; start <= prefix.size();) {
      size_t end = prefix.find('/', start);
      if (end == std::string::npos) end = prefix.size();
      std::string_view part(prefix.data() + start, end - start);
      if (part.empty() || part == "." || part == "..") {
        return InvalidArgument("'" + url + "': prefix has an empty, '.' or '..' component");
      }
      start = end + 1;
    }
  }
  loc.prefix = prefix;
  return loc;
}

std::string S3EncodeKey(std::string_view key) {
  std::string out;
  size_t start = 0;
  while (true) {
    const size_t slash = key.find('/', start);
    out += PercentEncode(key.substr(start, slash - start));
    if (slash == std::string_view::npos) return out;
    out += '/';
    start = slash + 1;
  }
}

std::optional<uint64_t> S3ContentRangeTotal(std::string_view value) {
  const size_t slash = value.rfind('/');
  if (value.rfind("bytes ", 0) != 0 || slash == std::string_view::npos) return std::nullopt;
  return ParseUint(value.substr(slash + 1));
}

std::string S3EncodeQueryValue(std::string_view value) { return PercentEncode(value); }

void S3Response::Clear() {
  status = 0;
  content_length.reset();
  etag.clear();
  content_range.clear();
  body.clear();
  over_cap = false;
}

S3Client::S3Client(std::string bucket, S3Config config, S3ClientOptions options)
    : bucket_(std::move(bucket)), config_(std::move(config)), opt_(options) {
  const size_t host_at = config_.endpoint.find("://") + 3;
  if (config_.path_style) {
    base_ = config_.endpoint + "/" + bucket_;
  } else {
    base_ = config_.endpoint.substr(0, host_at) + bucket_ + "." + config_.endpoint.substr(host_at);
  }
  sigv4_ = "aws:amz:" + config_.region + ":s3";
}

std::string S3Client::Url(const S3Request& q) const {
  std::string url = base_ + (config_.path_style && q.object.empty() ? "" : "/") + q.object;
  if (!q.query.empty()) url += "?" + q.query;
  return url;
}

Status S3Client::Failure(const std::string& where, const std::string& op,
                         const S3Response& r) const {
  const std::string code = XmlElement(r.body, "Code").value_or("");
  const std::string message = XmlElement(r.body, "Message").value_or("");
  std::string text = where + ": " + op + ": HTTP " + std::to_string(r.status);
  if (!code.empty()) text += " " + code;
  if (!message.empty()) text += ": " + message;
  if (code.empty() && r.status == 403) {
    text += " (no error document; check the credentials, region and bucket permissions)";
  }
  // Only a missing object is NotFound; a missing bucket (NoSuchBucket) is the store's fault,
  // and a 404 that S3 did not send (no error code) says nothing about the object.
  if (r.status == 404 && (code == "NoSuchKey" || r.head)) return NotFound(text);
  if (r.status == 404 && code.empty()) {
    text += " (no S3 error document: is " + config_.endpoint + " an S3 endpoint?)";
  }
  if (r.status == 412) return FailedPrecondition(text);
  return IoError(text);
}

Status S3Client::Configure(CURL* c, const S3Request& q, const std::string& url, curl_slist* headers,
                           S3Response& r, char* errbuf) const {
  CURLcode rc = SetCurlTransfer(
      c, {url.c_str(), errbuf, OnHeader, OnBody, static_cast<void*>(&r), opt_.timeout_seconds,
          opt_.low_speed_bytes_per_second, opt_.total_timeout_seconds, config_.ca_file.c_str()});
  auto set = [&rc](CURLcode v) {
    if (rc == CURLE_OK) rc = v;
  };
  set(curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4_.c_str()));
  set(curl_easy_setopt(c, CURLOPT_USERNAME, config_.access_key_id.c_str()));
  set(curl_easy_setopt(c, CURLOPT_PASSWORD, config_.secret_access_key.c_str()));
  set(curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers));
  const std::string_view method = q.method;
  if (method == "HEAD") {
    set(curl_easy_setopt(c, CURLOPT_NOBODY, 1L));
  } else if (method == "PUT" || method == "POST") {
    // The body from memory: libcurl's signer and the service see the same bytes.
    set(curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(q.body.size())));
    set(curl_easy_setopt(c, CURLOPT_POSTFIELDS, q.body.data()));
    set(curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, q.method));
  } else if (method != "GET") {
    set(curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, q.method));
  }
  if (rc != CURLE_OK) {
    return Internal(std::string("libcurl refused an option: ") + curl_easy_strerror(rc) +
                    " (libcurl " + curl_version_info(CURLVERSION_NOW)->version + ")");
  }
  return Status::Ok();
}

Status S3Client::Perform(const S3Request& q, S3Response& r) {
  RETURN_IF_ERROR(CurlGlobalInit());
  CurlHandle handle = pool_.Acquire();
  if (!handle) return Internal("curl_easy_init failed");
  Status s = Perform(handle.get(), q, r);
  pool_.Release(std::move(handle));
  return s;
}

Status S3Client::Perform(CURL* c, const S3Request& q, S3Response& r) const {
  const std::string url = Url(q);
  const std::string what = std::string(q.method) + " " + url;
  const bool has_body = std::string_view(q.method) == "PUT" || std::string_view(q.method) == "POST";
  std::string payload_hash = kEmptySha256;
  if (has_body) payload_hash = opt_.sign_payload ? Sha256Hex(q.body) : "UNSIGNED-PAYLOAD";
  if (payload_hash.empty()) return Internal("sha256 of the request body failed");
  Slist headers;
  auto add = [&headers](const std::string& h) {
    curl_slist* l = curl_slist_append(headers.get(), h.c_str());
    if (l == nullptr) return false;
    if (!headers) headers.reset(l);  // the first entry; later ones keep the same head
    return true;
  };
  bool ok = add("x-amz-content-sha256: " + payload_hash);
  if (!config_.session_token.empty())
    ok = ok && add("x-amz-security-token: " + config_.session_token);
  bool has_type = false;
  for (const std::string& h : q.headers) {
    has_type = has_type || StartsWithNoCase(h, "Content-Type:");
    ok = ok && add(h);
  }
  if (has_body && !has_type) ok = ok && add("Content-Type: application/octet-stream");
  if (!ok) return Internal("curl_slist_append failed");

  r.cap = q.cap;
  r.get = std::string_view(q.method) == "GET";
  r.head = std::string_view(q.method) == "HEAD";
  char errbuf[CURL_ERROR_SIZE];
  RETURN_IF_ERROR(Configure(c, q, url, headers.get(), r, errbuf));

  const int attempts = std::max(1, opt_.attempts);
  int backoff_ms = std::max(0, opt_.initial_backoff_ms);
  std::string last;
  for (int attempt = 1; attempt <= attempts; ++attempt) {
    r.Clear();
    errbuf[0] = '\0';
    const CURLcode rc = curl_easy_perform(c);
    if (r.over_cap)
      return ResourceExhausted(what + ": answer above " + std::to_string(q.cap) + " bytes");
    if (rc == CURLE_OK) {
      const bool conflict = r.status == 409 &&
                            XmlElement(r.body, "Code").value_or("") == "ConditionalRequestConflict";
      if (r.status < 500 && !conflict) return Status::Ok();
      last = "HTTP " + std::to_string(r.status) + " " + XmlElement(r.body, "Code").value_or("");
    } else {
      last = errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc);
      if (IsCertificateError(rc)) {
        return IoError(what + ": TLS: the server's certificate was not accepted (" + last +
                       "); set AWS_CA_BUNDLE to the CA that signed it");
      }
      if (!IsTransientCurlError(rc)) return IoError(what + ": " + last);
    }
    if (attempt < attempts) {
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
      backoff_ms = std::min(backoff_ms * 2, 20000);
    }
  }
  return IoError(what + ": " + last + " (after " + std::to_string(attempts) +
                 (attempts == 1 ? " try)" : " tries)"));
}

}  // namespace deltakv::sidecar
