// A delta or checkpoint store in an S3 bucket: "s3://BUCKET[/PREFIX]" as a sync's "delta" (or a
// verify's "checkpoint") location, object NAME being the key PREFIX/NAME. Size = HeadObject;
// ReadRange = GetObject with a Range header (a service that ignores Range is an IoError, not a
// whole object read in its place); ReadObject = GetObject, stopped past the caller's cap. The
// transport, signing, retries and configuration are the S3 volume store's (s3_client.h,
// s3_config.h: endpoint, region and credentials from the AWS_* variables and ~/.aws).
//
// Errors (deltasync/object_store.h): 404 = NotFound (a missing bucket, NoSuchBucket, is IoError
// naming it); a range past the object's end (416, or fewer bytes than asked) = DataLoss; an
// object above the cap = ResourceExhausted; any other answer or a transport failure after the
// last try = IoError with S3's error code. InvalidArgument for a name that is not '/'-separated
// components of [A-Za-z0-9._-] (none empty or starting with '.').
//
// Thread-safety: one store serves several threads at once.
#pragma once

#include <memory>

#include "base/status.h"
#include "deltasync/object_store.h"
#include "store/s3_client.h"
#include "store/s3_config.h"

namespace deltakv::sidecar {

std::unique_ptr<deltasync::ObjectStore> MakeS3ObjectStore(S3Location where, S3Config config,
                                                          const S3ClientOptions& options = {});

}  // namespace deltakv::sidecar
