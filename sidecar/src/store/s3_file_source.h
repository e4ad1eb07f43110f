// The objects under a prefix of an S3 bucket as a deltasync::FileSource: files that ordinary S3
// clients uploaded (`aws s3 cp --recursive`, boto3), not a volume store, for
// `deltakv volume sync s3://BUCKET/PREFIX NS/NAME` (deltasync/volume_source.h).
//
// "s3://BUCKET/PREFIX" holds the objects whose keys start with "PREFIX/" (every object of the
// bucket without a prefix), as `aws s3 cp --recursive` reads it; a file's path is its key after
// that. List is ListObjectsV2 with encoding-type=url, page by page; zero-byte keys ending in '/'
// (the folder markers some consoles make) are skipped. A file's version is its ETag and its
// mode 0644 (S3 keeps no mode). ReadRange is GetObject with "Range: bytes=A-B" and
// "If-Match: <ETag>": an object replaced since it was listed (412), removed (404), cut short
// (416) or whose Content-Range gives another total size is FailedPrecondition naming it.
// Requests are signed and retried by S3Client (s3_client.h); keys are percent-encoded.
//
// Errors: a missing bucket, and a prefix with no objects (or only folder markers), are
// NotFound; refused credentials (403) and any other answer are
// IoError with S3's error code and message. Messages never show the secret.
// Thread-safety: safe to call from several threads at once.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "deltasync/volume_source.h"
#include "store/s3_client.h"

namespace deltakv::sidecar {

// A source over `where`. InvalidArgument without an access key and secret. Makes no request.
StatusOr<std::unique_ptr<deltasync::FileSource>> MakeS3FileSource(
    const S3Location& where, S3Config config, const S3ClientOptions& options = {});

// "s3://BUCKET[/PREFIX]", configured from the environment and the AWS shared files as an S3
// volume store is (s3_config.h). Errors: as ParseS3Url, ResolveS3Config and MakeS3FileSource.
StatusOr<std::unique_ptr<deltasync::FileSource>> OpenS3FileSource(const std::string& url);

// Decodes a key of a ListObjectsV2 answer with encoding-type=url: %XX escapes, and '+' for a
// space. InvalidArgument for a '%' not followed by two hex digits.
StatusOr<std::string> DecodeListedKey(std::string_view encoded);

}  // namespace deltakv::sidecar
