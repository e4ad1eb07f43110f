#include "store/curl_util.h"

#include <algorithm>
#include <limits>

#include <charconv>
#include <string>

namespace deltakv::sidecar {
namespace {

char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

}  // namespace

Status CurlGlobalInit() {
  static const CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (rc != CURLE_OK) {
    return Internal(std::string("libcurl initialization failed: ") + curl_easy_strerror(rc));
  }
  return Status::Ok();
}

bool IsTransientCurlError(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

bool IsCertificateError(CURLcode rc) {
  switch (rc) {
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
      return true;
    default:
      return false;
  }
}

bool StartsWithNoCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (Lower(s[i]) != Lower(prefix[i])) return false;
  }
  return true;
}

bool EqualsNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && StartsWithNoCase(a, b);
}

std::string_view TrimHeaderValue(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

std::optional<uint64_t> ParseUint(std::string_view s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

CurlHandle CurlHandlePool::Acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      CurlHandle c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  return CurlHandle(curl_easy_init());
}

void CurlHandlePool::Release(CurlHandle c) {
  if (!c) return;
  curl_easy_reset(c.get());
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() < max_idle_) idle_.push_back(std::move(c));
}

CURLcode SetCurlTransfer(CURL* c, const CurlTransferSetup& s) {
  CURLcode rc = CURLE_OK;
  auto set = [&rc](CURLcode v) {
    if (rc == CURLE_OK) rc = v;
  };
  set(curl_easy_setopt(c, CURLOPT_URL, s.url));
  set(curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https"));
  set(curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L));
  set(curl_easy_setopt(c, CURLOPT_ERRORBUFFER, s.errbuf));
  set(curl_easy_setopt(c, CURLOPT_USERAGENT, "deltakv"));
  set(curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L));
  set(curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, s.on_header));
  set(curl_easy_setopt(c, CURLOPT_HEADERDATA, s.user));
  set(curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s.on_body));
  set(curl_easy_setopt(c, CURLOPT_WRITEDATA, s.user));
  set(curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, s.timeout_seconds));
  set(curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, s.timeout_seconds));
  set(curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT,
                       static_cast<long>(std::min<uint64_t>(s.low_speed_bytes_per_second,
                                                            std::numeric_limits<long>::max()))));
  set(curl_easy_setopt(c, CURLOPT_TIMEOUT, s.total_timeout_seconds));
  set(curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L));
  set(curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L));
  if (s.ca_file != nullptr && s.ca_file[0] != '\0') {
    set(curl_easy_setopt(c, CURLOPT_CAINFO, s.ca_file));
  }
  return rc;
}

}  // namespace deltakv::sidecar
