#include "store/s3_object_store.h"

#include <string>
#include <utility>

#include "store/curl_util.h"
#include "store/s3_xml.h"

namespace deltakv::sidecar {
namespace {

Status CheckName(const std::string& name) {
  size_t start = 0;
  while (true) {
    const size_t end = std::min(name.find('/', start), name.size());
    const std::string_view part(name.data() + start, end - start);
    if (part.empty() || part[0] == '.') {
      return InvalidArgument("object name '" + name + "' has an empty or dot-led component");
    }
    for (char c : part) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '-';
      if (!ok) return InvalidArgument("object name '" + name + "' may hold only [A-Za-z0-9._-/]");
    }
    if (end == name.size()) return Status::Ok();
    start = end + 1;
  }
}

class S3ObjectStore final : public deltasync::ObjectStore {
 public:
  S3ObjectStore(S3Location where, S3Config config, const S3ClientOptions& options)
      : where_(std::move(where)),
        key_prefix_(where_.prefix.empty() ? "" : where_.prefix + "/"),
        client_(where_.bucket, std::move(config), options) {}

  StatusOr<uint64_t> Size(const std::string& name) override {
    RETURN_IF_ERROR(CheckName(name));
    S3Request q;
    q.method = "HEAD";
    q.object = S3EncodeKey(key_prefix_ + name);
    S3Response r;
    RETURN_IF_ERROR(client_.Perform(q, r));
    if (!r.ok()) return Failure(name, "HEAD", r);
    if (!r.content_length) return IoError(Where(name) + ": HEAD answer without Content-Length");
    return *r.content_length;
  }

  StatusOr<std::string> ReadRange(const std::string& name, uint64_t offset,
                                  uint64_t length) override {
    RETURN_IF_ERROR(CheckName(name));
    if (length > UINT64_MAX - offset) {
      return DataLoss(Where(name) + ": a range of " + std::to_string(length) + " bytes at " +
                      std::to_string(offset) + " passes 2^64");
    }
    if (length == 0) {
      ASSIGN_OR_RETURN(uint64_t size, Size(name));
      if (offset > size) return PastTheEnd(name, size, offset);
      return std::string();
    }
    S3Request q;
    q.object = S3EncodeKey(key_prefix_ + name);
    q.headers.push_back("Range: bytes=" + std::to_string(offset) + "-" +
                        std::to_string(offset + length - 1));
    q.cap = length;
    S3Response r;
    Status s = client_.Perform(q, r);
    if (s.code() == StatusCode::kResourceExhausted) {
      return IoError(Where(name) + ": the answer to a ranged GET of " + std::to_string(length) +
                     " bytes was longer (does the service ignore Range?)");
    }
    RETURN_IF_ERROR(s);
    if (r.status == 416) {
      ASSIGN_OR_RETURN(uint64_t size, Size(name));
      return PastTheEnd(name, size, offset + length);
    }
    if (!r.ok()) return Failure(name, "GET", r);
    if (r.status != 206 && offset != 0) {
      return IoError(Where(name) + ": HTTP " + std::to_string(r.status) + " to a ranged GET");
    }
    if (r.body.size() < length) {
      const std::optional<uint64_t> total = S3ContentRangeTotal(r.content_range);
      return PastTheEnd(name, total.value_or(offset + r.body.size()), offset + length);
    }
    return std::move(r.body);
  }

  StatusOr<std::string> ReadObject(const std::string& name, uint64_t max_bytes) override {
    RETURN_IF_ERROR(CheckName(name));
    S3Request q;
    q.object = S3EncodeKey(key_prefix_ + name);
    q.cap = max_bytes;
    S3Response r;
    Status s = client_.Perform(q, r);
    if (s.code() == StatusCode::kResourceExhausted) {
      return ResourceExhausted(Where(name) + " is larger than the limit of " +
                               std::to_string(max_bytes) + " bytes");
    }
    RETURN_IF_ERROR(s);
    if (!r.ok()) return Failure(name, "GET", r);
    return std::move(r.body);
  }

  std::string Describe() const override {
    return "s3://" + where_.bucket + (where_.prefix.empty() ? "" : "/" + where_.prefix);
  }

 private:
  std::string Where(const std::string& name) const { return Describe() + "/" + name; }

  Status PastTheEnd(const std::string& name, uint64_t size, uint64_t wanted_end) const {
    return DataLoss("object '" + name + "' in " + Describe() + " ends at " +
                    std::to_string(size) + ", before byte " + std::to_string(wanted_end) +
                    " (truncated?)");
  }

  Status Failure(const std::string& name, const std::string& op, const S3Response& r) const {
    if (r.status == 404 && XmlElement(r.body, "Code").value_or("") == "NoSuchBucket") {
      return IoError(Describe() + ": bucket '" + where_.bucket + "' does not exist (NoSuchBucket)");
    }
    return client_.Failure(Where(name), op, r);
  }

  const S3Location where_;
  const std::string key_prefix_;
  S3Client client_;
};

}  // namespace

std::unique_ptr<deltasync::ObjectStore> MakeS3ObjectStore(S3Location where, S3Config config,
                                                          const S3ClientOptions& options) {
  return std::make_unique<S3ObjectStore>(std::move(where), std::move(config), options);
}

}  // namespace deltakv::sidecar
