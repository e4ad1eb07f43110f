// Signed requests to one S3 bucket on libcurl: the transport that the S3 volume store
// (s3_volume_store.h) and the S3 file source (s3_file_source.h) share.
//
// A request names its object by the path below the bucket, already in AWS's URI encoding
// (S3EncodeKey), and its query in canonical form (names sorted, values percent-encoded). The
// client adds x-amz-content-sha256 (the sha256 of the body, or UNSIGNED-PAYLOAD when
// sign_payload is off) and x-amz-security-token for a session token, and libcurl signs the
// request with AWS Signature Version 4 (CURLOPT_AWS_SIGV4 = aws:amz:<region>:s3). Path-style
// (ENDPOINT/BUCKET/KEY) or virtual-hosted (BUCKET.HOST/KEY) addressing follows the config.
//
// Connection errors, timeouts, 5xx answers (S3's SlowDown and InternalError included) and 409
// ConditionalRequestConflict are retried with exponential backoff; any other answer is
// returned to the caller, who decides what it means (S3Client::Failure gives the usual
// reading). Messages never show the secret key or the session token.
//
// Thread-safety: one client serves several threads at once (a pool of curl handles).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "store/curl_util.h"
#include "store/s3_config.h"

namespace deltakv::sidecar {

struct S3Location {
  std::string bucket;
  std::string prefix;  // no leading or trailing '/', may be empty
};

// Parses "s3://BUCKET[/PREFIX]". InvalidArgument for another scheme, a bucket name that is not
// 3-63 characters of [a-z0-9.-] starting and ending with a letter or digit, or a prefix with a
// character other than A-Z a-z 0-9 - _ . ~ / or with an empty, "." or ".." component.
StatusOr<S3Location> ParseS3Url(const std::string& url);

// AWS's URI encoding of an object key for a request path: every byte but A-Z a-z 0-9 - _ . ~
// and '/' as %XX (upper-case hex), so libcurl signs the path S3 reconstructs.
std::string S3EncodeKey(std::string_view key);

// AWS's URI encoding of a query value: every byte but the unreserved ones as %XX.
std::string S3EncodeQueryValue(std::string_view value);

// The total size T of a Content-Range value "bytes A-B/T", or nullopt.
std::optional<uint64_t> S3ContentRangeTotal(std::string_view value);

struct S3ClientOptions {
  int attempts = 5;              // tries per request
  int initial_backoff_ms = 100;  // doubled after each failed try, at most 20 s
  int timeout_seconds = 30;      // connect timeout and stall window
  uint64_t low_speed_bytes_per_second = 1024;
  int total_timeout_seconds = 1800;  // one whole request; 0 = none
  bool sign_payload = true;  // x-amz-content-sha256: sha256 of the body, else UNSIGNED-PAYLOAD
};

struct S3Request {
  const char* method = "GET";  // GET, HEAD, PUT, POST, DELETE
  std::string object;          // the encoded object path below the bucket; "" for the bucket
  std::string query;           // canonical: names sorted, values S3EncodeQueryValue'd
  std::vector<std::string> headers;
  std::string_view body;
  uint64_t cap = std::numeric_limits<uint64_t>::max();  // bytes of a 2xx body kept
};

struct S3Response {
  long status = 0;
  std::optional<uint64_t> content_length;
  std::string etag;
  std::string content_range;  // the Content-Range header's value, "" when absent
  std::string body;           // a 2xx body up to the request's cap; an error body's start

  bool ok() const { return status >= 200 && status < 300; }

  // Set by the transfer callbacks; cleared before each try.
  bool over_cap = false;
  uint64_t cap = 0;
  bool get = false;
  bool head = false;
  void Clear();
};

class S3Client {
 public:
  S3Client(std::string bucket, S3Config config, S3ClientOptions options);

  // Runs the request, retrying as the header says. OK means an answer is in `r`, whatever its
  // status; ResourceExhausted if a 2xx body passed q.cap (the transfer is stopped); IoError
  // for a transport failure after the last try or a refused certificate; Internal if libcurl
  // cannot be set up.
  Status Perform(const S3Request& q, S3Response& r);

  // The error an answer means, as "<where>: <op>: HTTP <status> <Code>: <Message>": NotFound
  // for 404 NoSuchKey and for a 404 to HEAD (whose answer has no body to say more);
  // FailedPrecondition for 412; IoError otherwise. So a missing bucket (NoSuchBucket) and a
  // 404 without an S3 error code to GET, PUT, POST or DELETE (a web server or ingress that is
  // not S3: a wrong endpoint) are IoError; the latter's message names the endpoint, and a 403
  // without an error document gets a hint about credentials, region and permissions.
  Status Failure(const std::string& where, const std::string& op, const S3Response& r) const;

  const std::string& bucket() const { return bucket_; }
  const S3Config& config() const { return config_; }

 private:
  std::string Url(const S3Request& q) const;
  Status Configure(CURL* c, const S3Request& q, const std::string& url, curl_slist* headers,
                   S3Response& r, char* errbuf) const;
  Status Perform(CURL* c, const S3Request& q, S3Response& r) const;

  const std::string bucket_;
  const S3Config config_;
  const S3ClientOptions opt_;
  std::string base_;   // endpoint and bucket: objects are base_ + "/" + key
  std::string sigv4_;  // CURLOPT_AWS_SIGV4
  CurlHandlePool pool_;
};

}  // namespace deltakv::sidecar
