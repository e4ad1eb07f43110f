// A VolumeStore in an S3 bucket (or any service that speaks the S3 API), on libcurl.
//
// "s3://BUCKET/PREFIX" keeps key K as the object PREFIX/K (K itself without a prefix). The calls
// map onto S3 as deltasync/VOLUME.md section 2.1 says: Put = PutObject, or a multipart upload
// for objects of multipart_threshold bytes or more; PutIfAbsent = the same with
// "If-None-Match: *" (on CompleteMultipartUpload for a multipart upload); Get and GetVersioned =
// GetObject, the generation being the ETag; Exists and Size = HeadObject; List =
// ListObjectsV2, page by page; Delete = DeleteObject; PutIfGeneration = PutObject with
// "If-Match: <etag>", or "If-None-Match: *" for an empty expected generation.
//
// Requests are signed with AWS Signature Version 4 by libcurl (CURLOPT_AWS_SIGV4) and carry
// x-amz-content-sha256: the sha256 of the body (or UNSIGNED-PAYLOAD when sign_payload is off),
// so the service checks what it received. Connection errors, timeouts, 5xx answers (S3's
// SlowDown and InternalError included) and 409 ConditionalRequestConflict are retried with
// exponential backoff; other answers are final. Errors: 404 NoSuchKey (and 404 to HEAD, which
// has no body) = NotFound; 412 = FailedPrecondition naming the key (and both generations for
// PutIfGeneration); an object above the caller's cap = ResourceExhausted (its transfer is
// stopped); any other answer (NoSuchBucket, a 404 without an S3 error code from an endpoint that
// is not S3) or a transport failure after the last try = IoError with S3's error code and
// message. A failed multipart upload is aborted. A conditional write whose answer was lost and
// which is then retried may report FailedPrecondition although its first try took effect;
// callers read the object back to tell their own write from another's.
//
// Keys may hold only A-Z a-z 0-9 - _ . ~ and '/', so no key needs percent-encoding; the
// interface's key rules (no empty, ".", ".." or dot-led component) are checked: InvalidArgument.
// Messages and Describe() never show the secret key or the session token.
//
// The requests go through an S3Client (s3_client.h), the transport the S3 file source shares.
//
// Thread-safety: one store serves several threads at once (a pool of curl handles).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "deltasync/volume.h"
#include "store/s3_client.h"
#include "store/s3_config.h"

namespace deltakv::sidecar {

inline constexpr uint64_t kS3MinPartSize = 5ull << 20;   // S3's minimum (all but the last)
inline constexpr uint64_t kS3MaxPartSize = 5ull << 30;   // and maximum part size
inline constexpr uint64_t kS3MaxSinglePut = 5ull << 30;  // largest PutObject
inline constexpr uint64_t kS3MaxParts = 10000;

// The client's request settings (S3ClientOptions: attempts, backoff, timeouts, payload
// signing) and the store's own.
struct S3StoreOptions : S3ClientOptions {
  // Put and PutIfAbsent of this many bytes or more use a multipart upload with parts of
  // part_size bytes (raised when the object would need more than 10,000 parts).
  // Both at least kS3MinPartSize and at most kS3MaxSinglePut.
  uint64_t multipart_threshold = 64ull << 20;
  uint64_t part_size = 16ull << 20;
  int max_keys = 1000;  // ListObjectsV2 page size, 1..1000
};

// A store over `where`. InvalidArgument for options out of range. Makes no request: a bucket
// that does not exist or refuses the credentials shows in the first call.
StatusOr<std::unique_ptr<deltasync::VolumeStore>> MakeS3VolumeStore(
    const S3Location& where, S3Config config, const S3StoreOptions& options = {});

}  // namespace deltakv::sidecar
