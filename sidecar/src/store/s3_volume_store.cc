// S3 VolumeStore: each call is one or a few signed HTTP requests (s3_volume_store.h) through
// an S3Client (s3_client.h).
#include "store/s3_volume_store.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include "store/s3_client.h"
#include "store/s3_xml.h"

namespace deltakv::sidecar {
namespace {

using deltasync::VersionedObject;

bool IsUnreserved(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.' || c == '~';
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

using Request = S3Request;
using Response = S3Response;

class S3VolumeStore final : public deltasync::VolumeStore {
 public:
  S3VolumeStore(S3Location where, S3Config config, S3StoreOptions opt)
      : where_(std::move(where)),
        opt_(opt),
        client_(where_.bucket, std::move(config), static_cast<const S3ClientOptions&>(opt)) {}

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
      q.query = (token.empty() ? "" : "continuation-token=" + S3EncodeQueryValue(token) + "&") +
                "list-type=2&max-keys=" + std::to_string(opt_.max_keys) +
                "&prefix=" + S3EncodeQueryValue(full);
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
    if (r.ok() || (r.status == 404 && XmlElement(r.body, "Code") == "NoSuchKey")) {
      return Status::Ok();
    }
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
    // If-Match on an absent object is 404 NoSuchKey in S3.
    const bool no_such_key = r.status == 404 && XmlElement(r.body, "Code") == "NoSuchKey";
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
           client_.config().Describe() + ")";
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
  // The error an answer means (S3Client::Failure) for the object `key`.
  Status Failure(const std::string& op, const std::string& key, const Response& r) const {
    return client_.Failure(Where(key), op, r);
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
      abort.query = "uploadId=" + S3EncodeQueryValue(id);
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
      part.query = "partNumber=" + std::to_string(number) + "&uploadId=" + S3EncodeQueryValue(id);
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
    done.query = "uploadId=" + S3EncodeQueryValue(id);
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

  Status Perform(const Request& q, Response& r) { return client_.Perform(q, r); }

  const S3Location where_;
  const S3StoreOptions opt_;
  S3Client client_;
};

}  // namespace

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
