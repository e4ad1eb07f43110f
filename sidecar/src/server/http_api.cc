#include "server/http_api.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <optional>
#include <sstream>

#include "base/host_port.h"
#include "log/log.h"
#include "server/elastic_pool.h"

namespace deltakv::sidecar {

namespace {

using Json = nlohmann::json;

void SendJson(httplib::Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(log::JsonText(body) + "\n", "application/json");
}

void SendError(httplib::Response& res, int status, const std::string& code,
               const std::string& message) {
  SendJson(res, status, {{"error", {{"code", code}, {"message", message}}}});
}

int HttpStatusFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kFailedPrecondition:
      return 409;
    case StatusCode::kResourceExhausted:
      return 413;
    default:
      return 500;
  }
}

// Peer calls, reads included, carry the group token; the rest, the sidecar's (reads none).
bool IsPeerCall(const httplib::Request& req) { return req.path.rfind("/v1/peer/", 0) == 0; }

// Whether the request declares a body (a length above 0, or a transfer coding).
bool DeclaresBody(const httplib::Request& req) {
  if (req.has_header("Transfer-Encoding")) return true;
  const std::string length = req.get_header_value("Content-Length");
  return !length.empty() && length.find_first_not_of('0') != std::string::npos;
}

// Sends `res` as it is and then closes the connection: for an answer given while part of the
// request's body is still unread, whose bytes would otherwise be read as the next requests.
// (The library keeps a connection unless writing the answer fails, so the body goes out as one
// chunk and the end marker, and the writer then reports the connection done.)
void CloseAfter(httplib::Response& res) {
  std::string body = std::move(res.body);
  res.body.clear();
  const std::string type = res.get_header_value("Content-Type");
  res.headers.erase("Content-Type");
  res.headers.erase("Connection");
  res.set_header("Connection", "close");
  res.set_chunked_content_provider(type, [body = std::move(body)](size_t, httplib::DataSink& sink) {
    sink.write(body.data(), body.size());
    sink.done();
    return false;  // ends the connection once the answer is out
  });
}

// Constant-time comparison, so the token cannot be guessed byte by byte from timings.
bool TokenMatches(const std::string& given, const std::string& want) {
  if (given.size() != want.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < given.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ want[i]);
  return diff == 0;
}

// The server's task queue on an ElasticPool (httplib's own ThreadPool has a fixed size).
class ApiTaskQueue final : public httplib::TaskQueue {
 public:
  ApiTaskQueue()
      : pool_(HttpApi::kApiThreads, HttpApi::kMaxApiThreads,
              std::chrono::seconds(HttpApi::kIdleThreadSeconds)) {}
  void enqueue(std::function<void()> fn) override { pool_.Enqueue(std::move(fn)); }
  void shutdown() override { pool_.Shutdown(); }

 private:
  ElasticPool pool_;
};

}  // namespace

HttpApi::HttpApi(HttpApiOptions options, SyncManager* manager)
    : options_(std::move(options)),
      manager_(manager),
      server_(std::make_unique<httplib::Server>()) {
  // A thread per connection, more started while all are busy, so idle keep-alive connections,
  // long polls (at most kMaxWaiting of them) and slow clients leave room for probes and POSTs;
  // idle connections are closed soon.
  server_->new_task_queue = [] { return new ApiTaskQueue(); };
  server_->set_keep_alive_timeout(kKeepAliveSeconds);
  // The listening socket takes SO_REUSEADDR (a restarted sidecar binds again at once), not the
  // library's default SO_REUSEPORT, which lets a second process bind the same port and take a
  // share of this one's connections. Bind() raises its backlog.
  server_->set_socket_options([this](int sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_socket_ = sock;  // the last one offered is the one bound
  });
  Routes();
}

HttpApi::~HttpApi() { Stop(); }

Status HttpApi::Bind() {
  errno = 0;
  if (options_.port == 0) {
    port_ = server_->bind_to_any_port(options_.host);
  } else {
    port_ = server_->bind_to_port(options_.host, options_.port) ? options_.port : -1;
  }
  if (port_ <= 0) {
    const int err = errno;  // the failed bind's or listen's (closing the socket keeps it)
    return IoError("cannot listen on " + UrlHost(options_.host) + ":" +
                   std::to_string(options_.port) +
                   (err != 0 ? std::string(": ") + std::strerror(err)
                             : std::string(": the address does not resolve to a local one")));
  }
  // The library listens with a backlog of 5: a burst of connections (the clients of many ranks
  // at once) overflows it, and the kernel drops connection attempts that clients repeat only
  // after a second. Listening again on the bound socket only raises the backlog.
  if (listen_socket_ >= 0) ::listen(listen_socket_, SOMAXCONN);
  return Status::Ok();
}

void HttpApi::Serve() { server_->listen_after_bind(); }

void HttpApi::Stop() {
  if (server_) server_->stop();
}

void HttpApi::Routes() {
  httplib::Server& s = *server_;
  s.set_payload_max_length(options_.max_body_bytes);
  // Whether `req` carries the token its path needs (peer calls the group's, the rest the
  // sidecar's); a refusal is counted and answered with 401.
  auto authorized = [this](const httplib::Request& req) {
    const std::string& want = IsPeerCall(req) ? options_.group_token : options_.token;
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    return !want.empty() && auth.rfind(prefix, 0) == 0 &&
           TokenMatches(auth.substr(prefix.size()), want);
  };
  auto refuse = [this](httplib::Response& res) {
    unauthorized_.fetch_add(1, std::memory_order_relaxed);
    res.set_header("WWW-Authenticate", "Bearer");
    SendError(res, 401, "UNAUTHENTICATED", "a valid bearer token is required");
  };
  s.set_pre_routing_handler(
      [this, authorized, refuse](const httplib::Request& req, httplib::Response& res) {
        requests_.fetch_add(1, std::memory_order_relaxed);
        if (!IsPeerCall(req) && (req.method == "GET" || req.method == "HEAD"))
          return httplib::Server::HandlerResponse::Unhandled;
        // A request with a body is checked once its body is read (by the POST routes below; no
        // other method has a route, and the library reads the body before its 404): answered
        // before, the unread bytes would be taken for the next requests on the connection.
        if (req.method != "GET" && req.method != "HEAD" && DeclaresBody(req)) {
          return httplib::Server::HandlerResponse::Unhandled;
        }
        if (!authorized(req)) {
          refuse(res);
          return httplib::Server::HandlerResponse::Handled;
        }
        return httplib::Server::HandlerResponse::Unhandled;
      });

  // POST bodies are read through a content reader: the library's own body reading refuses a
  // form-encoded body (curl -d's default content type) above 8 KiB whatever the payload limit,
  // and every body here is JSON whatever its declared type.
  auto post = [&s, authorized, refuse, limit = options_.max_body_bytes](
                  const char* path,
                  std::function<void(const httplib::Request&, httplib::Response&)> handler) {
    s.Post(path, [handler = std::move(handler), authorized, refuse, limit](
                     const httplib::Request& req, httplib::Response& res,
                     const httplib::ContentReader& read) {
      const bool allowed = authorized(req);
      httplib::Request with_body = req;
      // Past the payload limit the library stops a read of a declared length with 413
      // (set_error_handler; it skips the body); a chunked body declares none, so the limit is
      // kept here too. A refused request's body is read and dropped.
      uint64_t seen = 0;
      bool too_large = false;
      const bool read_all = read([&](const char* data, size_t n) {
        if (n > limit - seen) {
          too_large = true;
          return false;
        }
        seen += n;
        if (allowed) with_body.body.append(data, n);
        return true;
      });
      if (!read_all) {
        // Part of the body may be unread: the connection ends after the answer.
        if (!allowed) {
          refuse(res);
        } else if (too_large || res.status == 413) {
          SendError(res, 413, "RESOURCE_EXHAUSTED",
                    "request body too large (above " + std::to_string(limit) + " bytes)");
        } else {
          SendError(res, 400, "INVALID_ARGUMENT", "request body not read");
        }
        CloseAfter(res);
        return;
      }
      if (!allowed) return refuse(res);
      handler(with_body, res);
    });
  };

  // Syncs, verifies and scrubs are jobs: 202 with an id, polled at /v1/syncs/{id}.
  auto submit = [this](httplib::Response& res, SyncRequest r) {
    if (shutting_down_.load()) {
      res.set_header("Retry-After", "10");
      return SendError(res, 503, "UNAVAILABLE",
                       "sidecar shutting down: no new syncs, verifies or scrubs are accepted");
    }
    auto id = manager_->Submit(std::move(r));
    if (!id.ok()) {
      return SendError(res, HttpStatusFor(id.status()),
                       std::string(StatusCodeName(id.status().code())), id.status().message());
    }
    res.set_header("Location", "/v1/syncs/" + *id);
    SendJson(res, 202, {{"id", *id}, {"state", "queued"}});
  };
  post("/v1/sync", [this, submit](const httplib::Request& req, httplib::Response& res) {
    Json body = Json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded() || !body.is_object()) {
      return SendError(res, 400, "INVALID_ARGUMENT", "body must be a JSON object");
    }
    SyncRequest r;
    for (const char* key : {"version", "delta"}) {
      auto it = body.find(key);
      if (it == body.end() || !it->is_string()) {
        return SendError(res, 400, "INVALID_ARGUMENT",
                         std::string("field '") + key + "' must be a string");
      }
    }
    r.version = body["version"].get<std::string>();
    r.delta = body["delta"].get<std::string>();
    if (options_.peer == nullptr) return submit(res, std::move(r));
    if (shutting_down_.load()) return submit(res, std::move(r));  // answers 503
    auto started = options_.peer->StartSync(r.version, r.delta);
    if (!started.ok()) {
      return SendError(res, HttpStatusFor(started.status()),
                       std::string(StatusCodeName(started.status().code())),
                       started.status().message());
    }
    res.set_header("Location", "/v1/syncs/" + (*started)["id"].get<std::string>());
    SendJson(res, 202, *started);
  });

  // The peer protocol (server/peer_sync.h), authenticated with the group token above.
  // A peer POST this sidecar can take: in a group, with a small body (else answered here).
  auto peer_post_ok = [this](const httplib::Request& req, httplib::Response& res) {
    if (options_.peer == nullptr) {
      SendError(res, 404, "NOT_FOUND", "this sidecar is not in a group");
      return false;
    }
    if (req.body.size() > options_.max_peer_body_bytes) {
      SendError(
          res, 413, "RESOURCE_EXHAUSTED",
          "peer request body above " + std::to_string(options_.max_peer_body_bytes) + " bytes");
      return false;
    }
    return true;
  };
  post("/v1/peer/prepare",
       [this, peer_post_ok](const httplib::Request& req, httplib::Response& res) {
         if (!peer_post_ok(req, res)) return;
         if (shutting_down_.load()) {
           res.set_header("Retry-After", "10");
           return SendError(res, 503, "UNAVAILABLE", "sidecar shutting down");
         }
         auto p = ParsePeerPrepare(req.body);
         if (!p.ok()) return SendError(res, 400, "INVALID_ARGUMENT", p.status().message());
         PeerSyncAnswer a = options_.peer->Prepare(*p);
         SendJson(res, a.http_status, a.body);
       });
  post("/v1/peer/decided", [this, peer_post_ok](const httplib::Request& req,
                                                httplib::Response& res) {
    if (!peer_post_ok(req, res)) return;
    Json body = Json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (!body.is_object() || !body.contains("sync_key") || !body["sync_key"].is_string() ||
        body["sync_key"].get<std::string>().empty()) {
      return SendError(res, 400, "INVALID_ARGUMENT",
                       "body must be a JSON object with a non-empty string 'sync_key'");
    }
    PeerSyncAnswer a = options_.peer->Decided(body["sync_key"].get<std::string>());
    SendJson(res, a.http_status, a.body);
  });
  s.Get(R"(/v1/peer/status/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    if (options_.peer == nullptr) {
      return SendError(res, 404, "NOT_FOUND", "this sidecar is not in a group");
    }
    PeerSyncAnswer a = options_.peer->Status(req.matches[1]);
    SendJson(res, a.http_status, a.body);
  });

  // Optional "rate_gbps" (number >= 0): the ranks' read rate limit; false if it is malformed.
  auto read_rate = [](const Json& body, SyncRequest& r, httplib::Response& res) {
    auto it = body.find("rate_gbps");
    if (it == body.end()) return true;
    if (!it->is_number() || it->get<double>() < 0) {
      SendError(res, 400, "INVALID_ARGUMENT", "field 'rate_gbps' must be a number >= 0");
      return false;
    }
    r.rate_bytes_per_s = static_cast<uint64_t>(it->get<double>() * 1e9);
    return true;
  };
  post("/v1/verify", [submit, read_rate](const httplib::Request& req, httplib::Response& res) {
    Json body = Json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded() || !body.is_object()) {
      return SendError(res, 400, "INVALID_ARGUMENT", "body must be a JSON object");
    }
    auto it = body.find("checkpoint");
    if (it == body.end() || !it->is_string()) {
      return SendError(res, 400, "INVALID_ARGUMENT", "field 'checkpoint' must be a string");
    }
    SyncRequest r;
    r.kind = JobKind::kVerify;
    r.checkpoint = it->get<std::string>();
    if (!read_rate(body, r, res)) return;
    submit(res, std::move(r));
  });
  post("/v1/scrub", [this, submit, read_rate](const httplib::Request& req, httplib::Response& res) {
    Json body = req.body.empty() ? Json::object()
                                 : Json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded() || !body.is_object()) {
      return SendError(res, 400, "INVALID_ARGUMENT", "body must be empty or a JSON object");
    }
    SyncRequest r;
    r.kind = JobKind::kScrub;
    r.rate_bytes_per_s = options_.scrub_rate_bytes_per_s;
    if (!read_rate(body, r, res)) return;
    submit(res, std::move(r));
  });

  s.Get(
      R"(/v1/syncs/([A-Za-z0-9_-]+))", [this](const httplib::Request& req, httplib::Response& res) {
        // ?wait_ms=N: answer once the job has finished or N ms have passed (a long poll, so a
        // client learns of the end at once without polling; at most kMaxWaitMs).
        std::optional<SyncRecord> rec;
        if (req.has_param("wait_ms")) {
          constexpr uint64_t kMaxWaitMs = 60000;
          const std::string v = req.get_param_value("wait_ms");
          uint64_t ms = 0;
          const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), ms);
          if (v.empty() || ec != std::errc() || end != v.data() + v.size() || ms > kMaxWaitMs) {
            return SendError(res, 400, "INVALID_ARGUMENT",
                             "wait_ms must be an integer from 0 to " + std::to_string(kMaxWaitMs));
          }
          // At most kMaxWaiting requests wait at once, so waiting clients cannot starve other
          // requests (health probes, POSTs); beyond that the answer comes at once.
          if (waiting_.fetch_add(1) < kMaxWaiting) {
            rec = manager_->WaitFinished(req.matches[1], std::chrono::milliseconds(ms));
          } else {
            rec = manager_->Get(req.matches[1]);
          }
          waiting_.fetch_sub(1);
        } else {
          rec = manager_->Get(req.matches[1]);
        }
        if (!rec)
          return SendError(res, 404, "NOT_FOUND",
                           "no job '" + std::string(req.matches[1]) +
                               "' (the sidecar keeps the records of its last " +
                               std::to_string(kJobRecords) + " jobs)");
        Json j = rec->ToJson();
        // The coordinator's record shows every member's state: a trainer polls one node.
        if (options_.peer != nullptr && rec->group && options_.peer->Coordinates(rec->group->key)) {
          j["group"]["members"] = options_.peer->MembersJson(rec->group->key);
        }
        SendJson(res, 200, j);
      });

  s.Get("/v1/status", [this](const httplib::Request&, httplib::Response& res) {
    Json history = Json::array();
    for (const SyncRecord& r : manager_->History()) history.push_back(r.ToJson());
    SendJson(res, 200,
             {{"live_version", manager_->LiveVersion()},
              {"diverged", manager_->Diverged()},
              {"checksums", manager_->ChecksumsJson()},
              {"ranks", manager_->RanksJson()},
              {"group", manager_->GroupJson()},
              {"history", history}});
  });

  s.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });

  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(Metrics(), "text/plain; version=0.0.4");
  });

  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    // Answers made here already have a type (CloseAfter's have a body the writer produces).
    if (!res.body.empty() || res.has_header("Content-Type")) return;
    if (res.status == 413) {
      SendError(res, 413, "RESOURCE_EXHAUSTED", "request body too large");
    } else if (res.status == 404) {
      SendError(res, 404, "NOT_FOUND", "no such endpoint");
    }
  });
}

std::string HttpApi::Metrics() const {
  std::ostringstream o;
  o << "# HELP deltakv_http_requests_total HTTP requests received.\n"
    << "# TYPE deltakv_http_requests_total counter\n"
    << "deltakv_http_requests_total " << requests_.load() << "\n"
    << "# HELP deltakv_http_unauthorized_total Mutating requests refused for a missing or bad "
       "token.\n"
    << "# TYPE deltakv_http_unauthorized_total counter\n"
    << "deltakv_http_unauthorized_total " << unauthorized_.load() << "\n"
    << "# HELP deltakv_syncs_total Syncs finished, by result.\n"
    << "# TYPE deltakv_syncs_total counter\n";
  auto finished = manager_->Finished();
  auto count = [&](const char* kind, const char* state) -> uint64_t {
    auto k = finished.find(kind);
    if (k == finished.end()) return 0;
    auto v = k->second.find(state);
    return v == k->second.end() ? 0 : v->second;
  };
  for (const char* result : {"live", "aborted", "diverged"}) {
    o << "deltakv_syncs_total{result=\"" << result << "\"} " << count("sync", result) << "\n";
  }
  o << "# HELP deltakv_checks_total Verifies and scrubs of the live weights finished, by result.\n"
    << "# TYPE deltakv_checks_total counter\n";
  for (const char* kind : {"verify", "scrub"}) {
    for (const char* result : {"verified", "diverged", "failed"}) {
      o << "deltakv_checks_total{kind=\"" << kind << "\",result=\"" << result << "\"} "
        << count(kind, result) << "\n";
    }
  }
  o << "# HELP deltakv_engine_diverged 1 while the live weights are known to differ from the "
       "checksum table (syncs are refused until a verify succeeds).\n"
    << "# TYPE deltakv_engine_diverged gauge\n"
    << "deltakv_engine_diverged " << (manager_->Diverged().empty() ? 0 : 1) << "\n";
  auto history = manager_->History();
  o << "# HELP deltakv_last_sync_phase_seconds Duration of each phase of the most recent finished "
       "sync.\n"
    << "# TYPE deltakv_last_sync_phase_seconds gauge\n";
  for (const SyncRecord& r : history) {
    if (!r.finished()) continue;
    for (const auto& [phase, ms] : r.phase_ms) {
      o << "deltakv_last_sync_phase_seconds{phase=\"" << phase << "\"} " << ms / 1000.0 << "\n";
    }
    break;
  }
  // Multi-node: the most recent finished sync whose group view is in.
  for (const SyncRecord& r : history) {
    if (!r.finished() || !r.group || !r.group->view) continue;
    const GroupPauseView& v = *r.group->view;
    o << "# HELP deltakv_group_resume_skew_ms Spread of the group's resume times (max - min, "
         "wall clocks of the nodes that reported, clock offsets included) in the most recent "
         "multi-node sync.\n"
      << "# TYPE deltakv_group_resume_skew_ms gauge\n"
      << "deltakv_group_resume_skew_ms " << v.resume_skew_ms() << "\n"
      << "# HELP deltakv_group_nodes_reported Nodes whose pause times the most recent "
         "multi-node sync's view has.\n"
      << "# TYPE deltakv_group_nodes_reported gauge\n"
      << "deltakv_group_nodes_reported " << v.nodes.size() << "\n"
      << "# HELP deltakv_group_node_pause_ms Each node's engine pause in the most recent "
         "multi-node sync.\n"
      << "# TYPE deltakv_group_node_pause_ms gauge\n";
    for (const NodePause& p : v.nodes) {
      std::string label;  // a node name may hold any character but '/'
      for (char c : p.node) {
        if (c == '\\' || c == '"') label += '\\';
        label += c == '\n' ? std::string("\\n") : std::string(1, c);
      }
      o << "deltakv_group_node_pause_ms{node=\"" << label << "\"} " << p.pause_ms << "\n";
    }
    break;
  }
  Json ranks = manager_->RanksJson();
  o << "# HELP deltakv_engine_ranks Engine ranks registered with the sidecar.\n"
    << "# TYPE deltakv_engine_ranks gauge\n"
    << "deltakv_engine_ranks " << (ranks.is_array() ? ranks.size() : 0) << "\n";
  for (const MetricsProvider& m : options_.metrics) o << m();
  return o.str();
}

}  // namespace deltakv::sidecar
