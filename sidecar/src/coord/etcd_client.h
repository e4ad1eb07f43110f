// EtcdClient: the few etcd v3 calls the coordinator needs, over etcd's JSON gateway (HTTP POST
// to /v3/kv/range, /v3/kv/put, /v3/kv/txn, /v3/kv/deleterange, /v3/lease/grant,
// /v3/lease/keepalive, /v3/lease/revoke; keys and values base64 in the bodies, as the gateway
// wants them). Works with etcd 3.4 and later.
//
// Endpoints are tried in order until one answers: a connection failure or a timeout moves to the
// next one; an answer from etcd (even an error) ends the call. IoError when none answers,
// Internal for a malformed answer. A client holds no lock across calls and is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace deltakv::sidecar {

struct EtcdOptions {
  // "http://host:port" each (https:// is refused: this client has no TLS settings yet).
  std::vector<std::string> endpoints;
  int timeout_ms = 2000;  // per request and endpoint, connect included
};

struct EtcdKv {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

class EtcdClient {
 public:
  // InvalidArgument for no endpoints or one that is not http://host:port.
  static StatusOr<std::unique_ptr<EtcdClient>> Create(EtcdOptions options);
  ~EtcdClient();

  // The key's value, or nullopt if it does not exist.
  StatusOr<std::optional<EtcdKv>> Get(std::string_view key);
  // Every key that starts with `prefix`, in key order.
  StatusOr<std::vector<EtcdKv>> List(std::string_view prefix);
  // Writes key = value (attached to `lease` when nonzero).
  Status Put(std::string_view key, std::string_view value, int64_t lease = 0);
  // Writes key = value only if the key does not exist. Returns the key's value after the call:
  // `value` if this call created it, else what was there (the first writer wins).
  StatusOr<EtcdKv> PutIfAbsent(std::string_view key, std::string_view value, int64_t lease = 0);
  // Writes key = value only if the key does not exist and every key of `must_exist` does, in
  // one transaction that also writes each (key, value) of `also` (without a lease). True if it
  // wrote.
  StatusOr<bool> PutIfAbsentAndAllExist(
      std::string_view key, std::string_view value, const std::vector<std::string>& must_exist,
      const std::vector<std::pair<std::string, std::string>>& also = {});
  Status Delete(std::string_view key);

  // A lease of ttl_seconds; keys put with it vanish when it expires or is revoked.
  StatusOr<int64_t> GrantLease(int64_t ttl_seconds);
  // Renews the lease; NotFound once it has expired.
  Status KeepAlive(int64_t lease);
  Status RevokeLease(int64_t lease);

  std::string Describe() const;  // "etcd http://a:2379,http://b:2379", for messages

 private:
  explicit EtcdClient(EtcdOptions options);
  StatusOr<std::string> Post(std::string_view path, const std::string& body);

  EtcdOptions options_;
};

// Standard base64 (RFC 4648 with padding), as etcd's JSON gateway encodes bytes.
std::string Base64Encode(std::string_view bytes);
StatusOr<std::string> Base64Decode(std::string_view text);

}  // namespace deltakv::sidecar
