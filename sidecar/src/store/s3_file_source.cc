// S3FileSource: ListObjectsV2 for the listing, ranged conditional GETs for the bytes.
#include "store/s3_file_source.h"

#include "store/s3_xml.h"

namespace deltakv::sidecar {
namespace {

using deltasync::ListedFile;

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class S3FileSource final : public deltasync::FileSource {
 public:
  S3FileSource(S3Location where, S3Config config, const S3ClientOptions& options)
      : where_(std::move(where)),
        key_prefix_(where_.prefix.empty() ? "" : where_.prefix + "/"),
        client_(where_.bucket, std::move(config), options) {}

  StatusOr<std::vector<ListedFile>> List() override {
    std::vector<ListedFile> files;
    size_t objects = 0;
    std::string token;
    while (true) {
      S3Request q;
      q.query =
          (token.empty() ? "" : "continuation-token=" + S3EncodeQueryValue(token) + "&") +
          "encoding-type=url&list-type=2&max-keys=1000&prefix=" + S3EncodeQueryValue(key_prefix_);
      S3Response r;
      RETURN_IF_ERROR(client_.Perform(q, r));
      if (r.status == 404 && XmlElement(r.body, "Code").value_or("") == "NoSuchBucket") {
        return NotFound(Describe() + ": bucket '" + where_.bucket +
                        "' does not exist (NoSuchBucket)");
      }
      if (!r.ok()) return client_.Failure(Describe() + "/", "LIST", r);
      for (const std::string& entry : XmlElements(r.body, "Contents")) {
        ASSIGN_OR_RETURN(ListedFile f, ParseEntry(entry));
        ++objects;
        if (f.path.empty() || (f.path.back() == '/' && f.size == 0)) continue;  // folder marker
        files.push_back(std::move(f));
      }
      if (XmlElement(r.body, "IsTruncated").value_or("false") != "true") break;
      std::optional<std::string> next = XmlElement(r.body, "NextContinuationToken");
      if (!next || next->empty() || *next == token) {
        return IoError(Describe() + "/: a truncated listing without a new continuation token");
      }
      token = std::move(*next);
    }
    if (files.empty()) {
      return NotFound(
          "no objects under " + Describe() + "/" +
          (objects > 0
               ? " (only empty folder markers)"
               : " (a prefix names a folder: s3://BUCKET/PREFIX holds the keys PREFIX/...)"));
    }
    return files;
  }

  StatusOr<std::string> ReadRange(const ListedFile& file, uint64_t offset,
                                  uint64_t length) override {
    const std::string where = Describe() + "/" + file.path;
    S3Request q;
    q.object = S3EncodeKey(key_prefix_ + file.path);
    q.headers.push_back("Range: bytes=" + std::to_string(offset) + "-" +
                        std::to_string(offset + length - 1));
    if (!file.version.empty()) q.headers.push_back("If-Match: " + file.version);
    q.cap = length;
    S3Response r;
    Status s = client_.Perform(q, r);
    if (s.code() == StatusCode::kResourceExhausted) {
      return IoError(where + ": the answer to a ranged GET of " + std::to_string(length) +
                     " bytes was longer (does the service ignore Range?)");
    }
    RETURN_IF_ERROR(s);
    const std::string listed = " since it was listed (" + std::to_string(file.size) +
                               " bytes, ETag " + file.version + "); sync again";
    if (r.status == 412) return FailedPrecondition(where + " changed" + listed);
    if (r.status == 404 && XmlElement(r.body, "Code").value_or("") == "NoSuchKey") {
      return FailedPrecondition(where + " was removed" + listed);
    }
    if (r.status == 416) return FailedPrecondition(where + " was cut short" + listed);
    if (!r.ok()) return client_.Failure(where, "GET", r);
    if (r.status == 206) {
      const std::optional<uint64_t> total = S3ContentRangeTotal(r.content_range);
      if (!total) {
        return IoError(where + ": ranged GET answer without a valid Content-Range ('" +
                       r.content_range + "')");
      }
      if (*total != file.size) {
        return FailedPrecondition(where + " is now " + std::to_string(*total) +
                                  " bytes; it changed" + listed);
      }
    } else if (offset != 0 || length != file.size) {
      return IoError(where + ": HTTP " + std::to_string(r.status) + " to a ranged GET");
    }
    if (!file.version.empty() && !r.etag.empty() && r.etag != file.version) {
      return FailedPrecondition(where + " changed (ETag now " + r.etag + ")" + listed);
    }
    if (r.body.size() != length) {
      return DataLoss(where + ": a ranged GET of " + std::to_string(length) + " bytes at " +
                      std::to_string(offset) + " returned " + std::to_string(r.body.size()));
    }
    return std::move(r.body);
  }

  std::string Describe() const override {
    return "s3://" + where_.bucket + (where_.prefix.empty() ? "" : "/" + where_.prefix);
  }

 private:
  StatusOr<ListedFile> ParseEntry(const std::string& entry) const {
    const std::optional<std::string> encoded = XmlElement(entry, "Key");
    const std::optional<std::string> size = XmlElement(entry, "Size");
    if (!encoded || !size || !ParseUint(*size)) {
      return IoError(Describe() + "/: a listing entry without a Key or Size");
    }
    auto key = DecodeListedKey(*encoded);
    if (!key.ok()) return IoError(Describe() + "/: listed key: " + key.status().message());
    if (key->compare(0, key_prefix_.size(), key_prefix_) != 0) {
      return IoError(Describe() + "/: the listing holds key '" + *key +
                     "', outside the asked prefix");
    }
    return ListedFile{key->substr(key_prefix_.size()), *ParseUint(*size), 0644,
                      XmlElement(entry, "ETag").value_or("")};
  }

  const S3Location where_;
  const std::string key_prefix_;  // "PREFIX/", or "" for the whole bucket
  S3Client client_;
};

}  // namespace

StatusOr<std::string> DecodeListedKey(std::string_view encoded) {
  std::string out;
  out.reserve(encoded.size());
  for (size_t i = 0; i < encoded.size(); ++i) {
    const char c = encoded[i];
    if (c == '+') {
      out += ' ';
    } else if (c != '%') {
      out += c;
    } else {
      const int h = i + 1 < encoded.size() ? HexValue(encoded[i + 1]) : -1;
      const int l = i + 2 < encoded.size() ? HexValue(encoded[i + 2]) : -1;
      if (h < 0 || l < 0) {
        return InvalidArgument("'" + std::string(encoded) + "' has a '%' at byte " +
                               std::to_string(i) + " without two hex digits");
      }
      out += static_cast<char>(h * 16 + l);
      i += 2;
    }
  }
  return out;
}

StatusOr<std::unique_ptr<deltasync::FileSource>> MakeS3FileSource(const S3Location& where,
                                                                  S3Config config,
                                                                  const S3ClientOptions& options) {
  if (config.access_key_id.empty() || config.secret_access_key.empty()) {
    return InvalidArgument("S3 source " + where.bucket + ": no access key or secret");
  }
  return std::unique_ptr<deltasync::FileSource>(
      new S3FileSource(where, std::move(config), options));
}

StatusOr<std::unique_ptr<deltasync::FileSource>> OpenS3FileSource(const std::string& url) {
  ASSIGN_OR_RETURN(S3Location where, ParseS3Url(url));
  ASSIGN_OR_RETURN(S3Config config, ResolveS3Config());
  return MakeS3FileSource(where, std::move(config));
}

}  // namespace deltakv::sidecar
