// S3 VolumeStore: each call is one or a few signed HTTP requests (s3_volume_store.h).
#include "store/s3_volume_store.h"

#include <openssl/evp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <string_view>
#include <thread>
#include <vector>

#include "base/percent_encode.h"
#include "store/curl_util.h"
#include "store/s3_xml.h"

namespace deltakv::sidecar {
namespace {

using deltasync::VersionedObject;

constexpr char kEmptySha256[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr uint64_t kMaxErrorBody = 64 << 10;  // bytes of an error answer kept for its message

bool IsUnreserved(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.' || c == '~';
}

// AWS's URI encoding of a query value: every byte but the unreserved ones as %XX.
std::string QueryEncode(std::string_view s) {
  return PercentEncode(s);
}

Status CheckChars(std::string_view what, std::string_view s) {
  for (char c : s) {
    if (!IsUnreserved(c) && c != '/') {
      return InvalidArgument(std::string(what) + " '" + std::string(s) +
                             "' has a character other than A-Z a-z 0-9 - _ . ~ /");
    }
  }
  return Status::Ok();
}

Status CheckKey(const std::string& key) {
  RETURN_IF_ERROR(CheckChars("key", key));
  if (key.empty()) return InvalidArgument("empty key");
  size_t start = 0;
  while (start <= key.size()) {
    size_t end = key.find('/', start);
    if (end == std::string::npos) end = key.size();
    std::string_view part(key.data() + start, end - start);
    if (part.empty() || part[0] == '.') {
      return InvalidArgument("key '" + key + "' has an empty or dot-led component");
    }
    start = end + 1;
  }
  return Status::Ok();
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

struct Request {
  const char* method = "GET";  // GET, HEAD, PUT, POST, DELETE
  std::string object;          // the full object key; "" for the bucket
  std::string query;           // canonical: names sorted, values QueryEncode'd
  std::vector<std::string> headers;
  std::string_view body;
  uint64_t cap = std::numeric_limits<uint64_t>::max();  // bytes of a 2xx body kept
};

struct Response {
  // Set by the callbacks, cleared before each try.
  long status = 0;
  std::optional<uint64_t> content_length;
  std::string etag;
  std::string body;
  bool over_cap = false;
  uint64_t cap = 0;
  bool get = false;

  void Clear() {
    status = 0;
    content_length.reset();
    etag.clear();
    body.clear();
    over_cap = false;
  }
  bool ok() const { return status >= 200 && status < 300; }
};

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* r = static_cast<Response*>(user);
  const size_t bytes = size * count;
  std::string_view line(data, bytes);
  if (StartsWithNoCase(line, "HTTP/")) {  // each response, 1xx included, starts with one
    r->status = 0;
    r->content_length.reset();
    r->etag.clear();
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
  }
  return bytes;
}

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* r = static_cast<Response*>(user);
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

class S3VolumeStore final : public deltasync::VolumeStore {
 public:
  S3VolumeStore(S3Location where, S3Config config, S3StoreOptions opt)
      : where_(std::move(where)), config_(std::move(config)), opt_(opt) {
    const size_t host_at = config_.endpoint.find("://") + 3;
    if (config_.path_style) {
      base_ = config_.endpoint + "/" + where_.bucket;
    } else {
      base_ = config_.endpoint.substr(0, host_at) + where_.bucket + "." +
              config_.endpoint.substr(host_at);
    }
    sigv4_ = "aws:amz:" + config_.region + ":s3";
  }

  Status Put(const std::string& key, std::span<const uint8_t> data) override {
    return Write(key, data, "");
  }

  Status PutIfAbsent(const std::string& key, std::span<const uint8_t> data) override {
    return Write(key, data, "If-None-Match: *");
  }

  StatusOr<std::string> Get(const std::string& key, uint64_t max_bytes) override {
    ASSIGN_OR_RETURN(VersionedObject o, Read(key, max_bytes));
    return std::move(o.data);
  }

  StatusOr<bool> Exists(const std::string& key) override {
    Response r;
    RETURN_IF_ERROR(Head(key, r));
    if (r.status == 404) return false;
    if (!r.ok()) return Failure("HEAD", key, r);
    return true;
  }

  StatusOr<uint64_t> Size(const std::string& key) override {
    Response r;
    RETURN_IF_ERROR(Head(key, r));
    if (!r.ok()) return Failure("HEAD", key, r);
    if (!r.content_length) return IoError(Where(key) + ": HEAD answer without Content-Length");
    return *r.content_length;
  }

  StatusOr<std::vector<std::string>> List(const std::string& prefix) override {
    RETURN_IF_ERROR(CheckChars("list prefix", prefix));
    const std::string full = where_.prefix.empty() ? prefix : where_.prefix + "/" + prefix;
    const size_t strip = where_.prefix.empty() ? 0 : where_.prefix.size() + 1;
    std::vector<std::string> keys;
    std::string token;
    for (int page = 0;; ++page) {
      Request q;
      q.method = "GET";
      q.query = (token.empty() ? "" : "continuation-token=" + QueryEncode(token) + "&") +
                "list-type=2&max-keys=" + std::to_string(opt_.max_keys) +
                "&prefix=" + QueryEncode(full);
      Response r;
      RETURN_IF_ERROR(Perform(q, r));
      if (!r.ok()) return Failure("LIST", prefix + "*", r);
      for (std::string& k : XmlElements(r.body, "Key")) {
        if (k.size() < strip || k.compare(0, full.size(), full) != 0) {
          return IoError(Where(prefix) + "*: the listing holds key '" + k +
                         "', outside the asked prefix");
        }
        keys.push_back(k.substr(strip));
      }
      const std::string truncated = XmlElement(r.body, "IsTruncated").value_or("false");
      if (truncated != "true") break;
      std::optional<std::string> next = XmlElement(r.body, "NextContinuationToken");
      if (!next || next->empty() || *next == token) {
        return IoError(Where(prefix) + "*: a truncated listing without a new continuation token");
      }
      token = std::move(*next);
    }
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    return keys;
  }

  Status Delete(const std::string& key) override {
    RETURN_IF_ERROR(CheckKey(key));
    Request q;
    q.method = "DELETE";
    q.object = Object(key);
    Response r;
    RETURN_IF_ERROR(Perform(q, r));
    if (r.ok() || r.status == 404) return Status::Ok();
    return Failure("DELETE", key, r);
  }

  StatusOr<VersionedObject> GetVersioned(const std::string& key, uint64_t max_bytes) override {
    ASSIGN_OR_RETURN(VersionedObject o, Read(key, max_bytes));
    if (o.generation.empty()) return IoError(Where(key) + ": GET answer without an ETag");
    return o;
  }

  StatusOr<std::string> PutIfGeneration(const std::string& key, std::span<const uint8_t> data,
                                        const std::string& expected) override {
    RETURN_IF_ERROR(CheckKey(key));
    if (data.size() > kS3MaxSinglePut) {
      return InvalidArgument(Where(key) + ": a versioned object is at most 5 GiB");
    }
    for (char c : expected) {
      if (static_cast<unsigned char>(c) < ' ' || c == 0x7f) {
        return InvalidArgument(Where(key) + ": generation with a control character");
      }
    }
    const std::string cond = expected.empty() ? "If-None-Match: *" : "If-Match: " + expected;
    Response r;
    RETURN_IF_ERROR(PutObject(key, AsView(data), cond, r));
    // If-Match on an absent object is 404 in S3.
    const bool no_such_key =
        r.status == 404 && XmlElement(r.body, "Code").value_or("NoSuchKey") == "NoSuchKey";
    if (r.status == 412 || (no_such_key && !expected.empty())) {
      return FailedPrecondition(Where(key) + ": generation is not " +
                                (expected.empty() ? "absent" : expected) + " (it is " +
                                CurrentGeneration(key) + "); nothing written");
    }
    if (!r.ok()) return Failure("PUT", key, r);
    if (r.etag.empty()) return IoError(Where(key) + ": PUT answer without an ETag");
    return r.etag;
  }

  std::string Describe() const override {
    return "s3://" + where_.bucket + (where_.prefix.empty() ? "" : "/" + where_.prefix) + " (" +
           config_.Describe() + ")";
  }

 private:
  static std::string_view AsView(std::span<const uint8_t> d) {
    return {reinterpret_cast<const char*>(d.data()), d.size()};
  }
  std::string Object(const std::string& key) const {
    return where_.prefix.empty() ? key : where_.prefix + "/" + key;
  }
  std::string Where(const std::string& key) const {
    return "s3://" + where_.bucket + "/" + Object(key);
  }
  std::string Url(const Request& q) const {
    std::string url = base_ + (config_.path_style && q.object.empty() ? "" : "/") + q.object;
    if (!q.query.empty()) url += "?" + q.query;
    return url;
  }

  // The error an answer means: 404 NotFound, 412 FailedPrecondition, else IoError with S3's
  // error code and message.
  Status Failure(const std::string& op, const std::string& key, const Response& r) const {
    const std::string code = XmlElement(r.body, "Code").value_or("");
    const std::string message = XmlElement(r.body, "Message").value_or("");
    std::string text = Where(key) + ": " + op + ": HTTP " + std::to_string(r.status);
    if (!code.empty()) text += " " + code;
    if (!message.empty()) text += ": " + message;
    if (code.empty() && r.status == 403) {
      text += " (no error document; check the credentials, region and bucket permissions)";
    }
    // Only a missing object is NotFound; a missing bucket (NoSuchBucket) is the store's fault.
    if (r.status == 404 && (code.empty() || code == "NoSuchKey")) return NotFound(text);
    if (r.status == 412) return FailedPrecondition(text);
    return IoError(text);
  }

  std::string CurrentGeneration(const std::string& key) {
    Response r;
    if (!Head(key, r).ok()) return "unknown";
    if (r.status == 404) return "absent";
    if (!r.ok() || r.etag.empty()) return "unknown";
    return r.etag;
  }

  Status Head(const std::string& key, Response& r) {
    RETURN_IF_ERROR(CheckKey(key));
    Request q;
    q.method = "HEAD";
    q.object = Object(key);
    return Perform(q, r);
  }

  StatusOr<VersionedObject> Read(const std::string& key, uint64_t max_bytes) {
    RETURN_IF_ERROR(CheckKey(key));
    Request q;
    q.method = "GET";
    q.object = Object(key);
    q.cap = max_bytes;
    Response r;
    Status s = Perform(q, r);
    if (s.code() == StatusCode::kResourceExhausted) {
      return ResourceExhausted(Where(key) + " is larger than " + std::to_string(max_bytes) +
                               " bytes");
    }
    RETURN_IF_ERROR(s);
    if (!r.ok()) return Failure("GET", key, r);
    return VersionedObject{std::move(r.body), std::move(r.etag)};
  }

  Status PutObject(const std::string& key, std::string_view data, const std::string& cond,
                   Response& r) {
    Request q;
    q.method = "PUT";
    q.object = Object(key);
    q.body = data;
    if (!cond.empty()) q.headers.push_back(cond);
    return Perform(q, r);
  }

  Status Write(const std::string& key, std::span<const uint8_t> data, const std::string& cond) {
    RETURN_IF_ERROR(CheckKey(key));
    if (data.size() >= opt_.multipart_threshold) return Multipart(key, AsView(data), cond);
    Response r;
    RETURN_IF_ERROR(PutObject(key, AsView(data), cond, r));
    if (r.status == 412) return FailedPrecondition(Where(key) + " already exists");
    if (!r.ok()) return Failure("PUT", key, r);
    return Status::Ok();
  }

  Status Multipart(const std::string& key, std::string_view data, const std::string& cond) {
    Request create;
    create.method = "POST";
    create.object = Object(key);
    create.query = "uploads=";
    Response r;
    RETURN_IF_ERROR(Perform(create, r));
    if (!r.ok()) return Failure("CreateMultipartUpload", key, r);
    const std::string id = XmlElement(r.body, "UploadId").value_or("");
    if (id.empty()) return IoError(Where(key) + ": CreateMultipartUpload answer without UploadId");
    Status s = UploadParts(key, data, cond, id);
    if (!s.ok()) {
      Request abort;
      abort.method = "DELETE";
      abort.object = Object(key);
      abort.query = "uploadId=" + QueryEncode(id);
      Response ar;
      (void)Perform(abort, ar);  // best effort; a bucket lifecycle rule reaps what is left
    }
    return s;
  }

  Status UploadParts(const std::string& key, std::string_view data, const std::string& cond,
                     const std::string& id) {
    const uint64_t part_size =
        std::max<uint64_t>(opt_.part_size, (data.size() + kS3MaxParts - 1) / kS3MaxParts);
    std::string complete = "<CompleteMultipartUpload>";
    uint64_t number = 1;
    for (uint64_t at = 0; at < data.size(); at += part_size, ++number) {
      Request part;
      part.method = "PUT";
      part.object = Object(key);
      part.query = "partNumber=" + std::to_string(number) + "&uploadId=" + QueryEncode(id);
      part.body = data.substr(at, part_size);
      Response r;
      RETURN_IF_ERROR(Perform(part, r));
      if (!r.ok()) return Failure("UploadPart " + std::to_string(number), key, r);
      if (r.etag.empty()) return IoError(Where(key) + ": UploadPart answer without an ETag");
      complete += "<Part><PartNumber>" + std::to_string(number) + "</PartNumber><ETag>" +
                  XmlEscape(r.etag) + "</ETag></Part>";
    }
    complete += "</CompleteMultipartUpload>";
    Request done;
    done.method = "POST";
    done.object = Object(key);
    done.query = "uploadId=" + QueryEncode(id);
    done.body = complete;
    done.headers.push_back("Content-Type: application/xml");
    if (!cond.empty()) done.headers.push_back(cond);
    Response r;
    RETURN_IF_ERROR(Perform(done, r));
    if (r.status == 412) return FailedPrecondition(Where(key) + " already exists");
    // S3 may answer 200 and report the failure in the body.
    if (r.ok() && r.body.find("<Error>") != std::string::npos) r.status = 500;
    if (!r.ok()) return Failure("CompleteMultipartUpload", key, r);
    return Status::Ok();
  }

  Status Configure(CURL* c, const Request& q, const std::string& url, curl_slist* headers,
                   Response& r, char* errbuf) const {
    CURLcode rc = SetCurlTransfer(
        c, {url.c_str(), errbuf, OnHeader, OnBody, static_cast<void*>(&r), opt_.timeout_seconds,
            opt_.low_speed_bytes_per_second, opt_.total_timeout_seconds,
            config_.ca_file.c_str()});
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

  // Runs the request, retrying transport failures, 5xx and 409 ConditionalRequestConflict.
  // OK means an answer is in `r` (any status); ResourceExhausted if a 2xx body passed q.cap.
  Status Perform(const Request& q, Response& r) {
    RETURN_IF_ERROR(CurlGlobalInit());
    CurlHandle handle = pool_.Acquire();
    if (!handle) return Internal("curl_easy_init failed");
    Status s = Perform(handle.get(), q, r);
    pool_.Release(std::move(handle));
    return s;
  }

  Status Perform(CURL* c, const Request& q, Response& r) const {
    const std::string url = Url(q);
    const std::string what = std::string(q.method) + " " + url;
    const bool has_body =
        std::string_view(q.method) == "PUT" || std::string_view(q.method) == "POST";
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
        const bool conflict = r.status == 409 && XmlElement(r.body, "Code").value_or("") ==
                                                     "ConditionalRequestConflict";
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

  const S3Location where_;
  const S3Config config_;
  const S3StoreOptions opt_;
  std::string base_;   // endpoint and bucket: objects are base_ + "/" + key
  std::string sigv4_;  // CURLOPT_AWS_SIGV4
  CurlHandlePool pool_;
};

bool IsBucketChar(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

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
    RETURN_IF_ERROR(CheckChars("prefix", prefix).WithPrefix("'" + url + "'"));
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

StatusOr<std::unique_ptr<deltasync::VolumeStore>> MakeS3VolumeStore(const S3Location& where,
                                                                    S3Config config,
                                                                    const S3StoreOptions& options) {
  if (options.part_size < kS3MinPartSize || options.part_size > kS3MaxSinglePut) {
    return InvalidArgument("S3 part size " + std::to_string(options.part_size) +
                           " is outside 5 MiB..5 GiB");
  }
  if (options.multipart_threshold < kS3MinPartSize ||
      options.multipart_threshold > kS3MaxSinglePut) {
    return InvalidArgument("S3 multipart threshold " + std::to_string(options.multipart_threshold) +
                           " is outside 5 MiB..5 GiB");
  }
  if (options.max_keys < 1 || options.max_keys > 1000) {
    return InvalidArgument("S3 list page size " + std::to_string(options.max_keys) +
                           " is outside 1..1000");
  }
  if (config.access_key_id.empty() || config.secret_access_key.empty()) {
    return InvalidArgument("S3 store " + where.bucket + ": no access key or secret");
  }
  return std::unique_ptr<deltasync::VolumeStore>(
      new S3VolumeStore(where, std::move(config), options));
}

}  // namespace deltakv::sidecar
