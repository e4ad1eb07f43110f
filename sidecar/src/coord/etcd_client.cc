#include "coord/etcd_client.h"

#include <curl/curl.h>

#include <array>
#include <charconv>
#include <nlohmann/json.hpp>
#include <utility>

namespace deltakv::sidecar {
namespace {

using nlohmann::json;

constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  static_cast<std::string*>(user)->append(data, size * count);
  return size * count;
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct ListDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

// int64 fields come as JSON strings from the gateway (and are absent when zero).
int64_t Int64Field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    const std::string& text = it->get_ref<const std::string&>();
    int64_t v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    return ec == std::errc() && end == text.data() + text.size() ? v : 0;
  }
  return 0;
}

StatusOr<EtcdKv> ParseKv(const json& j) {
  EtcdKv kv;
  ASSIGN_OR_RETURN(kv.key, Base64Decode(j.value("key", "")));
  ASSIGN_OR_RETURN(kv.value, Base64Decode(j.value("value", "")));
  kv.create_revision = Int64Field(j, "create_revision");
  kv.mod_revision = Int64Field(j, "mod_revision");
  kv.lease = Int64Field(j, "lease");
  return kv;
}

// The smallest key greater than every key that starts with `prefix` (etcd's range_end).
std::string PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(end.back());
    if (c < 0xff) {
      ++c;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

json PutRequest(std::string_view key, std::string_view value, int64_t lease) {
  json put = {{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  return put;
}

}  // namespace

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t n = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

StatusOr<std::string> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) return InvalidArgument("base64 text of length not a multiple of 4");
  std::array<int, 256> value{};
  value.fill(-1);
  for (size_t i = 0; i < kAlphabet.size(); ++i) value[static_cast<uint8_t>(kAlphabet[i])] = int(i);
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    uint32_t n = 0;
    int pad = 0;
    for (size_t k = 0; k < 4; ++k) {
      char c = text[i + k];
      bool last_group = i + 4 == text.size();
      if (c == '=' && last_group && k >= 2 && (k == 3 || text[i + 3] == '=')) {
        ++pad;
        n <<= 6;
        continue;
      }
      int v = value[static_cast<uint8_t>(c)];
      if (v < 0 || pad > 0) return InvalidArgument("invalid base64 text");
      n = (n << 6) | uint32_t(v);
    }
    out += char((n >> 16) & 0xff);
    if (pad < 2) out += char((n >> 8) & 0xff);
    if (pad < 1) out += char(n & 0xff);
  }
  return out;
}

StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(EtcdOptions options) {
  if (options.endpoints.empty()) return InvalidArgument("no etcd endpoints");
  for (auto& e : options.endpoints) {
    // http://host:port: a host (IPv6 in brackets), then 1 to 5 digits, nothing after.
    const size_t colon = e.rfind(':');
    const bool port_ok = colon > 7 && colon != std::string::npos && e.size() - colon - 1 <= 5 &&
                         e.size() > colon + 1 &&
                         e.find_first_not_of("0123456789", colon + 1) == std::string::npos;
    if (e.rfind("http://", 0) != 0 || e.find('/', 7) != std::string::npos || !port_ok) {
      return InvalidArgument("etcd endpoint '" + e + "': expected http://host:port");
    }
  }
  if (options.timeout_ms <= 0) return InvalidArgument("etcd timeout_ms must be positive");
  curl_global_init(CURL_GLOBAL_DEFAULT);
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(options)));
}

EtcdClient::EtcdClient(EtcdOptions options) : options_(std::move(options)) {}
EtcdClient::~EtcdClient() = default;

std::string EtcdClient::Describe() const {
  std::string out = "etcd ";
  for (size_t i = 0; i < options_.endpoints.size(); ++i) {
    out += (i ? "," : "") + options_.endpoints[i];
  }
  return out;
}

StatusOr<std::string> EtcdClient::Post(std::string_view path, const std::string& body) {
  std::string last_error;
  for (const auto& endpoint : options_.endpoints) {
    std::unique_ptr<CURL, CurlDeleter> c(curl_easy_init());
    if (!c) return Internal("curl_easy_init failed");
    std::unique_ptr<curl_slist, ListDeleter> headers(
        curl_slist_append(nullptr, "Content-Type: application/json"));
    std::string url = endpoint + std::string(path), answer;
    curl_easy_setopt(c.get(), CURLOPT_URL, url.c_str());
    curl_easy_setopt(c.get(), CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(c.get(), CURLOPT_POSTFIELDSIZE, long(body.size()));
    curl_easy_setopt(c.get(), CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(c.get(), CURLOPT_TIMEOUT_MS, long(options_.timeout_ms));
    curl_easy_setopt(c.get(), CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c.get(), CURLOPT_WRITEFUNCTION, OnBody);
    curl_easy_setopt(c.get(), CURLOPT_WRITEDATA, &answer);
    CURLcode rc = curl_easy_perform(c.get());
    if (rc != CURLE_OK) {
      last_error = endpoint + ": " + curl_easy_strerror(rc);
      continue;  // the next endpoint
    }
    long status = 0;
    curl_easy_getinfo(c.get(), CURLINFO_RESPONSE_CODE, &status);
    if (status == 200) return answer;
    std::string message = answer;
    try {
      message = json::parse(answer).value("message", json::parse(answer).value("error", answer));
    } catch (const json::exception&) {
    }
    if (message.find("lease not found") != std::string::npos) {
      return NotFound(Describe() + ": " + message);
    }
    return FailedPrecondition(Describe() + ": " + std::string(path) + " answered HTTP " +
                                   std::to_string(status) + ": " + message);
  }
  return IoError(Describe() + ": no endpoint answered (last: " + last_error + ")");
}

namespace {
StatusOr<json> ParseAnswer(const std::string& text, std::string_view what) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    return Internal("etcd " + std::string(what) + ": malformed answer: " + e.what());
  }
}
}  // namespace

StatusOr<std::optional<EtcdKv>> EtcdClient::Get(std::string_view key) {
  ASSIGN_OR_RETURN(std::string text, Post("/v3/kv/range", json{{"key", Base64Encode(key)}}.dump()));
  ASSIGN_OR_RETURN(json j, ParseAnswer(text, "range"));
  if (!j.contains("kvs") || j["kvs"].empty()) return std::optional<EtcdKv>();
  ASSIGN_OR_RETURN(EtcdKv kv, ParseKv(j["kvs"][0]));
  return std::optional<EtcdKv>(std::move(kv));
}

StatusOr<std::vector<EtcdKv>> EtcdClient::List(std::string_view prefix) {
  json req = {{"key", Base64Encode(prefix)}, {"range_end", Base64Encode(PrefixEnd(prefix))},
              {"sort_order", "ASCEND"}, {"sort_target", "KEY"}};
  ASSIGN_OR_RETURN(std::string text, Post("/v3/kv/range", req.dump()));
  ASSIGN_OR_RETURN(json j, ParseAnswer(text, "range"));
  std::vector<EtcdKv> out;
  for (const auto& item : j.value("kvs", json::array())) {
    ASSIGN_OR_RETURN(EtcdKv kv, ParseKv(item));
    out.push_back(std::move(kv));
  }
  return out;
}

Status EtcdClient::Put(std::string_view key, std::string_view value, int64_t lease) {
  return Post("/v3/kv/put", PutRequest(key, value, lease).dump()).status();
}

StatusOr<EtcdKv> EtcdClient::PutIfAbsent(std::string_view key, std::string_view value,
                                         int64_t lease) {
  json txn = {
      {"compare", json::array({{{"key", Base64Encode(key)}, {"result", "EQUAL"},
                                {"target", "CREATE"}, {"create_revision", "0"}}})},
      {"success", json::array({{{"request_put", PutRequest(key, value, lease)}}})},
      {"failure", json::array({{{"request_range", {{"key", Base64Encode(key)}}}}})}};
  ASSIGN_OR_RETURN(std::string text, Post("/v3/kv/txn", txn.dump()));
  ASSIGN_OR_RETURN(json j, ParseAnswer(text, "txn"));
  if (j.value("succeeded", false)) {
    EtcdKv kv{std::string(key), std::string(value), 0, 0, lease};
    kv.create_revision = kv.mod_revision = Int64Field(j.value("header", json::object()), "revision");
    return kv;
  }
  try {
    const json& kvs = j.at("responses").at(0).at("response_range").at("kvs");
    if (!kvs.empty()) return ParseKv(kvs.at(0));
  } catch (const json::exception& e) {
    return Internal("etcd txn: malformed answer: " + std::string(e.what()));
  }
  // Created and deleted between the compare and the range: the writer that made it won.
  return FailedPrecondition("etcd txn on '" + std::string(key) + "': the key vanished; retry");
}

StatusOr<bool> EtcdClient::PutIfAbsentAndAllExist(
    std::string_view key, std::string_view value, const std::vector<std::string>& must_exist,
    const std::vector<std::pair<std::string, std::string>>& also) {
  json compare = json::array({{{"key", Base64Encode(key)}, {"result", "EQUAL"},
                               {"target", "CREATE"}, {"create_revision", "0"}}});
  for (const std::string& k : must_exist) {
    compare.push_back({{"key", Base64Encode(k)}, {"result", "GREATER"}, {"target", "CREATE"},
                       {"create_revision", "0"}});
  }
  json success = json::array({{{"request_put", PutRequest(key, value, 0)}}});
  for (const auto& [k, v] : also) success.push_back({{"request_put", PutRequest(k, v, 0)}});
  json txn = {{"compare", compare}, {"success", success}};
  ASSIGN_OR_RETURN(std::string text, Post("/v3/kv/txn", txn.dump()));
  ASSIGN_OR_RETURN(json j, ParseAnswer(text, "txn"));
  return j.value("succeeded", false);
}

Status EtcdClient::Delete(std::string_view key) {
  return Post("/v3/kv/deleterange", json{{"key", Base64Encode(key)}}.dump()).status();
}

StatusOr<int64_t> EtcdClient::GrantLease(int64_t ttl_seconds) {
  if (ttl_seconds <= 0) return InvalidArgument("lease TTL must be positive");
  ASSIGN_OR_RETURN(std::string text,
                   Post("/v3/lease/grant", json{{"TTL", std::to_string(ttl_seconds)}}.dump()));
  ASSIGN_OR_RETURN(json j, ParseAnswer(text, "lease grant"));
  int64_t id = Int64Field(j, "ID");
  if (id == 0) return Internal("etcd lease grant: no lease id in " + text);
  return id;
}

Status EtcdClient::KeepAlive(int64_t lease) {
  ASSIGN_OR_RETURN(std::string text,
                   Post("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump()));
  ASSIGN_OR_RETURN(json j, ParseAnswer(text, "lease keepalive"));
  // The gateway streams {"result": {...}}; an expired lease has no TTL (or TTL 0) there.
  const json& r = j.contains("result") ? j["result"] : j;
  if (Int64Field(r, "TTL") <= 0) {
    return NotFound(Describe() + ": lease " + std::to_string(lease) + " has expired");
  }
  return Status::Ok();
}

Status EtcdClient::RevokeLease(int64_t lease) {
  return Post("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump()).status();
}

}  // namespace deltakv::sidecar
