// OpenStore: the object store behind a sync request's "delta" location.
//   "/abs/dir" or "file:///abs/dir"  -> a directory
//   "http://host[:port]/prefix"      -> HTTP under the prefix: HEAD for sizes, Range GETs,
//   "https://host[:port]/prefix"        whole-object GETs under the caller's byte cap
// Both HTTP schemes use libcurl. https:// verifies the server's certificate chain and host name
// against the system CA store, or against HttpStoreOptions::ca_file when it is set (sidecar:
// --http-ca-file); there is no switch that turns verification off. "user:password@" in the
// location is sent as HTTP basic auth and shown as "***@" in messages and Describe(); a location
// with a query or fragment is refused (objects are read as <location>/<name>).
//
// Connection errors, timeouts, stalled transfers and 5xx answers are retried with exponential
// backoff; 4xx answers and rejected certificates are not. 404 is NotFound; an object that ends
// before the asked range (or a body cut short on every try) is DataLoss; one above the cap is
// ResourceExhausted, and its transfer is stopped as soon as the cap is passed.
// InvalidArgument for other schemes, a malformed location or an unreadable ca_file.
//
//   "s3://BUCKET[/PREFIX]" -> the objects PREFIX/NAME of an S3 bucket (s3_object_store.h),
//        configured as the S3 volume store is (AWS_* variables, ~/.aws); the retry and timeout
//        settings are these options'.
//   "vol://NS/NAME@sha256:<hex>" or "vol://NS/NAME:TAG" -> a sealed version in the volume store
//        `volume_store` (any URL store/open_volume_store.h opens): as the delta parent -> version
//        of a version pushed with a parent (VolumeView::kDelta, deltasync/volume_delta.h), or as
//        its files (VolumeView::kFiles, deltasync/volume_files.h: a checkpoint to verify
//        against); FailedPrecondition when no volume store is configured.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "deltasync/object_store.h"

namespace deltakv::sidecar {

struct HttpStoreOptions {
  int attempts = 4;              // tries per request
  int initial_backoff_ms = 100;  // doubled after each failed try
  // Connect timeout (TCP and TLS handshake), and the stall window: a transfer that moves fewer
  // than low_speed_bytes_per_second for this many seconds fails (and is retried).
  int timeout_seconds = 30;
  uint64_t low_speed_bytes_per_second = 1024;
  // Limit on one whole request, transfer included (shards can be GiBs); 0 = none.
  int total_timeout_seconds = 1800;
  // PEM file of CA certificates that verify https:// servers; "" = the system CA store.
  std::string ca_file;
  // Object names may be '/'-separated paths of safe names (volume keys); otherwise a name is
  // one safe name ([A-Za-z0-9._-], not "." or "..").
  bool object_paths = false;
};

enum class VolumeView { kDelta, kFiles };

// A store location fit for logs, messages and job records: "user:password@" becomes "***@", a
// query or fragment "...".
std::string RedactLocation(const std::string& location);
// `text` (an error message, say) with the user:password@ of every URL in it shown as ***@,
// wherever the URL stands: the redaction of messages that quote a location as given.
std::string RedactCredentials(std::string_view text);

// `what` names the location in error messages ("delta location", "checkpoint location",
// "volume store").
StatusOr<std::unique_ptr<deltasync::ObjectStore>> OpenStore(
    const std::string& location, const HttpStoreOptions& http = {},
    const std::string& volume_store = "", VolumeView view = VolumeView::kDelta,
    std::string_view what = "delta location");

}  // namespace deltakv::sidecar
