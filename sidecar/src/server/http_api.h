// HttpApi: the sidecar's HTTP interface on cpp-httplib.
//
//   POST /v1/sync        {"version": V, "delta": URI} -> 202 {"id", "state"}    (bearer token)
//   POST /v1/verify      {"checkpoint": URI[, "rate_gbps": G]} -> 202 {"id", "state"}  (token)
//   POST /v1/scrub       {} | {"rate_gbps": G} | empty -> 202 {"id", "state"}         (token)
//   GET  /v1/syncs/{id}  the job's record: state, per-phase timings, bytes, error, mismatches
//   GET  /v1/status      live version, divergence, checksum table, ranks, recent jobs
//   GET  /healthz        "ok"
//   GET  /metrics        Prometheus text format
// In a group with the peer protocol (server/peer_sync.h; docs/MULTINODE.md):
//   POST /v1/peer/prepare      {"sync_key", "version", "delta", "attempt"} -> 202 (started),
//                              200 (already known: its state), 409 (decided ABORT, or busy)
//   GET  /v1/peer/status/{key} this node's state for a sync key, 404 if it has none
// and POST /v1/sync makes this node the sync's coordinator; the coordinator's GET /v1/syncs/{id}
// has "group.members": {node: state}.
//
// Mutating calls need "Authorization: Bearer <token>" (401 otherwise); /v1/peer/ calls, reads
// included, need the group token instead. Bodies above max_body_bytes (peer calls:
// max_peer_body_bytes) get 413; malformed JSON or fields 400; a sync while another runs 409.
// Every error body is {"error": {"code", "message"}}.
//
// Thread-safety: httplib serves requests on its own thread pool; the handlers only touch the
// thread-safe SyncManager.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "server/peer_sync.h"
#include "sync/sync_manager.h"

namespace httplib {
class Server;
}

namespace deltakv::sidecar {

// Extra Prometheus text appended to /metrics (for example the KV pool's).
using MetricsProvider = std::function<std::string()>;

struct HttpApiOptions {
  std::string host = "127.0.0.1";
  int port = 8470;  // 0 = any free port (see HttpApi::port())
  std::string token;
  uint64_t max_body_bytes = 64 << 10;
  uint64_t scrub_rate_bytes_per_s = 0;  // POST /v1/scrub without "rate_gbps"

  std::vector<MetricsProvider> metrics;
  // Multi-node peer protocol: null = none (the /v1/peer/ endpoints answer 404).
  PeerSync* peer = nullptr;
  std::string group_token;  // bearer token of /v1/peer/ calls
  uint64_t max_peer_body_bytes = 16 << 10;
};

class HttpApi {
 public:
  // Worker threads of the API: one per open connection, kApiThreads kept, more started while
  // all are busy up to kMaxApiThreads (then connections wait for a free one), those above
  // kApiThreads ending after kIdleThreadSeconds without work. At most kMaxWaiting of them hold
  // long polls (?wait_ms=); keep-alive connections idle for kKeepAliveSeconds are closed.
  static constexpr size_t kApiThreads = 32;
  static constexpr size_t kMaxApiThreads = 512;
  static constexpr int kIdleThreadSeconds = 10;
  static constexpr uint64_t kMaxWaiting = 8;
  static constexpr time_t kKeepAliveSeconds = 2;
  // Job records kept (SyncManagerOptions::history of the sidecar): older ones are dropped.
  static constexpr size_t kJobRecords = 64;

  HttpApi(HttpApiOptions options, SyncManager* manager);
  ~HttpApi();
  // Binds the socket. IoError if the address cannot be bound.
  Status Bind();
  // Serves until Stop(). REQUIRES: Bind() succeeded.
  void Serve();
  void Stop();
  // From now on POST /v1/sync, /v1/verify and /v1/scrub answer 503 UNAVAILABLE ("sidecar
  // shutting down"); reads are still served until Stop(). Any thread.
  void BeginShutdown() { shutting_down_.store(true); }
  int port() const { return port_; }

 private:
  void Routes();
  std::string Metrics() const;

  HttpApiOptions options_;
  SyncManager* manager_;
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  int listen_socket_ = -1;  // the bound socket (owned by server_)
  std::atomic<uint64_t> requests_{0};
  std::atomic<bool> shutting_down_{false};
  std::atomic<uint64_t> unauthorized_{0};
  std::atomic<uint64_t> waiting_{0};  // GET /v1/syncs/{id}?wait_ms= requests now waiting
};

}  // namespace deltakv::sidecar
