// Volume references: `NS/NAME@sha256:HEX` and `NS/NAME:TAG`.
#include "deltasync/volume.h"
#include "volume/names.h"

namespace deltakv::deltasync {
namespace {

constexpr size_t kMaxNameLength = 128;

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsAlnumOrUnderscore(char c) { return IsLowerAlnum(c) || (c >= 'A' && c <= 'Z') || c == '_'; }

std::string Quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

}  // namespace

bool IsHexDigest(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Status ValidateVolumeName(std::string_view what, std::string_view name) {
  const std::string where = std::string(what) + " " + Quoted(name);
  if (name.empty()) return InvalidArgument(std::string(what) + " is empty");
  if (name.size() > kMaxNameLength) {
    return InvalidArgument(where + " is " + std::to_string(name.size()) +
                           " characters, more than " + std::to_string(kMaxNameLength));
  }
  if (!IsLowerAlnum(name[0])) {
    return InvalidArgument(where + " must start with a lowercase letter or digit");
  }
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (!IsLowerAlnum(c) && c != '.' && c != '_' && c != '-') {
      return InvalidArgument(where + ": character " + std::to_string(i) +
                             " is not one of [a-z0-9._-]");
    }
  }
  return Status::Ok();
}

Status ValidateVolumeTag(std::string_view tag) {
  const std::string where = "tag " + Quoted(tag);
  if (tag.empty()) return InvalidArgument("tag is empty");
  if (tag.size() > kMaxNameLength) {
    return InvalidArgument(where + " is " + std::to_string(tag.size()) + " characters, more than " +
                           std::to_string(kMaxNameLength));
  }
  if (!IsAlnumOrUnderscore(tag[0])) {
    return InvalidArgument(where + " must start with a letter, digit or '_'");
  }
  for (size_t i = 0; i < tag.size(); ++i) {
    const char c = tag[i];
    if (!IsAlnumOrUnderscore(c) && c != '.' && c != '-') {
      return InvalidArgument(where + ": character " + std::to_string(i) +
                             " is not one of [A-Za-z0-9._-]");
    }
  }
  return Status::Ok();
}

Status ValidateDigestText(std::string_view what, std::string_view text) {
  if (!text.starts_with(kDigestPrefix) || !IsHexDigest(text.substr(kDigestPrefix.size()))) {
    return InvalidArgument(std::string(what) + " " + Quoted(text) + " is not 'sha256:' followed " +
                           "by 64 lowercase hex digits");
  }
  return Status::Ok();
}

std::string VolumeRef::ToString() const {
  if (is_digest()) return ns + "/" + name + "@" + std::string(kDigestPrefix) + digest;
  return ns + "/" + name + ":" + tag;
}

StatusOr<VolumeRef> ParseVolumeRef(std::string_view text) {
  const std::string where = "volume reference " + Quoted(text);
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos) {
    return InvalidArgument(where + ": expected NS/NAME@sha256:HEX or NS/NAME:TAG (no '/')");
  }
  VolumeRef ref;
  ref.ns = std::string(text.substr(0, slash));
  std::string_view rest = text.substr(slash + 1);
  const size_t at = rest.find('@');
  const size_t colon = rest.find(':');
  const size_t split = std::min(at, colon);
  if (split == std::string_view::npos) {
    return InvalidArgument(where + ": expected '@sha256:HEX' or ':TAG' after the name");
  }
  ref.name = std::string(rest.substr(0, split));
  RETURN_IF_ERROR(ValidateVolumeName("namespace", ref.ns).WithPrefix(where));
  RETURN_IF_ERROR(ValidateVolumeName("name", ref.name).WithPrefix(where));
  const std::string_view suffix = rest.substr(split + 1);
  if (split == at) {
    RETURN_IF_ERROR(ValidateDigestText("digest", suffix).WithPrefix(where));
    ref.digest = std::string(suffix.substr(kDigestPrefix.size()));
  } else {
    RETURN_IF_ERROR(ValidateVolumeTag(suffix).WithPrefix(where));
    ref.tag = std::string(suffix);
  }
  return ref;
}

}  // namespace deltakv::deltasync
