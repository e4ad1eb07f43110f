// deltakv sidecar: the long-running process next to an inference server.
#include <hwloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/file_util.h"
#include "base/host_port.h"
#include "cli/cli_common.h"
#include "cli/sidecar_config.h"
#include "coord/group_commit.h"
#include "kv/kv_pool_owner.h"
#include "log/log.h"
#include "server/http_api.h"
#include "server/peer_sync.h"
#include "shm/segment.h"
#include "sync/shm_executor.h"
#include "sync/sync_manager.h"

namespace deltakv::cli {

namespace {

// The first SIGTERM/SIGINT/SIGHUP asks for a graceful shutdown; a second one exits at once.
std::atomic<int> g_signals{0};
void OnSignal(int) {
  if (g_signals.fetch_add(1) > 0) _exit(kExitUsage);
}

// Runs on the sync worker thread: lowest priority, and off the cores kept for serving.
void LowerPriorityAndPin(const std::vector<unsigned>& serving) {
  setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 19);
  sched_param sp{};
  pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
  if (serving.empty()) return;
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return;
  if (hwloc_topology_load(topo) == 0) {
    hwloc_bitmap_t set = hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(topo));
    for (unsigned c : serving) hwloc_bitmap_clr(set, c);
    if (!hwloc_bitmap_iszero(set)) {
      if (hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_THREAD) != 0) {
        log::Warn("could not pin the sync worker");
      }
    }
    hwloc_bitmap_free(set);
  }
  hwloc_topology_destroy(topo);
}

// The group of a multi-node model: --group, --node and --group-members together, with etcd
// endpoints from --etcd-endpoints or DELTAKV_ETCD_ENDPOINTS.
StatusOr<std::shared_ptr<sidecar::GroupCommit>> GroupFrom(SidecarOpts& o,
                                                          const std::string& group_token) {
  if (o.group.empty() || o.node.empty() || o.group_members.empty()) {
    return InvalidArgument("--group, --node and --group-members go together");
  }
  if (o.etcd_endpoints.empty()) {
    return InvalidArgument("a group needs --etcd-endpoints (or DELTAKV_ETCD_ENDPOINTS)");
  }
  // The timeouts were range-checked with the other keys (cli/sidecar_config.cc).
  sidecar::GroupOptions g;
  g.group = o.group;
  g.node = o.node;
  g.members = SplitList(o.group_members);
  g.etcd.endpoints = SplitList(o.etcd_endpoints);
  g.prepare_timeout = std::chrono::milliseconds(o.group_prepare_timeout_ms);
  g.in_doubt_timeout = std::chrono::milliseconds(o.group_in_doubt_timeout_ms);
  g.commit_margin = std::chrono::milliseconds(o.group_commit_margin_ms);
  g.report_timeout = std::chrono::milliseconds(o.group_report_timeout_ms);
  g.decision_poll = std::chrono::milliseconds(o.group_decision_poll_ms);
  g.peer_url = o.peer_url;
  g.peer_token = group_token;
  if (!o.topology.empty()) {
    ASSIGN_OR_RETURN(sidecar::Topology topology, sidecar::LoadTopology(o.topology, g.members));
    g.topology = std::move(topology);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<sidecar::GroupCommit> group, sidecar::GroupCommit::Create(g));
  return std::shared_ptr<sidecar::GroupCommit>(std::move(group));
}

// The HTTP(S) store options (checked with the other keys, so a bad value stops the sidecar at
// start-up, not at its first sync).
StatusOr<sidecar::HttpStoreOptions> HttpStoreOptionsFrom(const SidecarOpts& o) {
  sidecar::HttpStoreOptions h;
  h.timeout_seconds = static_cast<int>(o.http_timeout);
  h.total_timeout_seconds = static_cast<int>(o.http_total_timeout);
  h.attempts = static_cast<int>(o.http_attempts);
  h.ca_file = o.http_ca_file;
  return h;
}

int RunSidecar(SidecarOpts& o, const CLI::App& cmd) {
  Status s = LoadSidecarConfig(cmd, o);
  if (!s.ok()) return ReportError("sidecar", s, false);
  if (o.print_config) {
    std::printf("%s\n", EffectiveConfig(o).dump(2).c_str());
    return kExitOk;
  }
  log::SetFormat(*log::ParseFormat(o.log_format));  // validated above
  if (!o.token_file.empty()) {
    auto t = ReadTokenFile(o.token_file);
    if (!t.ok()) return ReportError("sidecar", t.status(), false);
    o.token = *t;
  }
  if (o.token.empty()) {
    return ReportError("sidecar",
                       InvalidArgument("a bearer token is required (--token-file, "
                                       "--token or DELTAKV_TOKEN)"),
                       false);
  }
  std::string group_token = o.token;
  if (!o.group_token_file.empty()) {
    auto t = ReadTokenFile(o.group_token_file);
    if (!t.ok()) return ReportError("sidecar", t.status(), false);
    group_token = *t;
  }
  auto cores = ParseCpuList(o.serving_cores);
  if (!cores.ok()) return ReportError("sidecar", cores.status(), false);
  auto http_store = HttpStoreOptionsFrom(o);
  if (!http_store.ok()) return ReportError("sidecar", http_store.status(), false);
  auto listen = ParseListen(o.listen);
  if (!listen.ok()) return ReportError("sidecar", listen.status().WithPrefix("listen"), false);
  sidecar::HttpApiOptions http;
  http.host = listen->host;
  http.port = listen->port;
  http.token = o.token;
  http.max_body_bytes = o.max_body_bytes;
  http.scrub_rate_bytes_per_s = static_cast<uint64_t>(o.scrub_rate_gbps * 1e9);

  sidecar::ShmExecutorOptions eo;
  eo.shm_name = o.shm_name;
  eo.decoder = o.decoder;
  eo.state_dir = o.state_dir;
  eo.plan_buffer_bytes = o.plan_buffer_bytes;
  eo.decode_threads = static_cast<unsigned>(o.decode_threads);
  eo.http = *http_store;
  eo.volume_store = o.volume_store;
  if (!o.group.empty() || !o.group_members.empty() || !o.node.empty() || !o.topology.empty()) {
    auto group = GroupFrom(o, group_token);
    if (!group.ok()) return ReportError("sidecar", group.status().WithPrefix("group"), false);
    eo.group = std::move(group).value();
    log::SetProcessField("node", o.node);
    log::Info("group member",
              {{"group", o.group}, {"members", o.group_members}, {"etcd", o.etcd_endpoints}});
  }
  // A start that fails after it created the control block removes it again (it leaves nothing
  // behind); one it adopted stays, as a stopped sidecar leaves it.
  const bool control_existed = shm::Segment::Exists(o.shm_name);
  auto executor = sidecar::ShmSyncExecutor::Create(eo);
  if (!executor.ok()) return ReportError("sidecar", executor.status(), false);
  // The KV pool comes after the control block: creating it replaces a pool of the same name,
  // so it must not happen before this sidecar knows no other one is alive on --shm-name.
  std::unique_ptr<sidecar::KvPoolOwner> kv_pool;
  if (o.kv_block_bytes > 0) {
    sidecar::KvPoolConfig kc;
    kc.name = o.shm_name + ".kv";
    kc.block_bytes = o.kv_block_bytes;
    kc.capacity_slots = o.kv_capacity_slots;
    kc.host_fraction = o.kv_host_fraction;
    kc.hugepages = o.kv_hugepages;
    if (o.kv_numa_node == "auto") {
      kc.numa_auto = true;
      kc.gpu_pci_bus_id = o.kv_gpu_pci_bus_id;
    } else if (!o.kv_numa_node.empty()) {
      kc.numa_node = std::stoi(o.kv_numa_node);  // validated: at most 6 digits
    }
    auto pool = sidecar::KvPoolOwner::Create(kc);
    if (!pool.ok()) {
      if (!control_existed) {
        executor->reset();
        (void)shm::Segment::Unlink(o.shm_name);
      }
      return ReportError("sidecar", pool.status().WithPrefix("KV pool"), false);
    }
    kv_pool = std::move(pool).value();
    sidecar::KvPoolOwner* p = kv_pool.get();
    http.metrics.push_back([p] { return p->Metrics(); });
    log::Info("KV pool ready", {{"pool", kc.name},
                                {"slots", p->config().capacity_slots},
                                {"block_bytes", kc.block_bytes},
                                {"placement", p->placement().Describe()}});
  }
  const sidecar::ShmSyncExecutor* control = executor->get();  // owned by the manager below
  std::vector<unsigned> serving = *cores;
  sidecar::SyncManagerOptions mo;
  mo.history = sidecar::HttpApi::kJobRecords;
  if (!o.state_dir.empty()) mo.id_file = o.state_dir + "/job-id";
  mo.worker_setup = [serving] { LowerPriorityAndPin(serving); };
  mo.scrub_interval = std::chrono::milliseconds(static_cast<int64_t>(o.scrub_interval_s * 1000));
  mo.scrub_rate_bytes_per_s = static_cast<uint64_t>(o.scrub_rate_gbps * 1e9);
  mo.verify_checkpoint = o.verify_checkpoint;
  mo.group_catch_up = eo.group != nullptr;
  sidecar::SyncManager manager(std::move(executor).value(), std::move(mo));
  std::unique_ptr<sidecar::PeerSync> peer;
  if (eo.group != nullptr) {
    sidecar::PeerSyncOptions po;
    po.group_token = group_token;
    peer = std::make_unique<sidecar::PeerSync>(eo.group, &manager, po);
    http.peer = peer.get();
    http.group_token = group_token;
  }
  sidecar::HttpApi api(http, &manager);
  s = api.Bind();
  if (!s.ok()) return ReportError("sidecar", s, false);
  if (eo.group != nullptr && o.peer_url.empty()) {
    // The peer URL other sidecars use: the listen address with the bound port, unless it is a
    // wildcard address (then --peer-url must name this host).
    if (http.host == "0.0.0.0" || http.host == "::" || http.host.empty()) {
      log::Warn(
          "no peer URL: listening on a wildcard address, so syncs coordinated by other nodes "
          "abort naming this node (give --peer-url http://<this host>:<port>)");
    } else {
      const std::string url = "http://" + UrlHost(listen->host) + ":" + std::to_string(api.port());
      if (Status ps = eo.group->SetPeerUrl(url); !ps.ok()) {
        return ReportError("sidecar", ps.WithPrefix("group: peer URL"), false);
      }
    }
  }
  if (!o.port_file.empty()) {
    // Whoever waits for the port reads it here: a port file that cannot be written stops the
    // sidecar rather than leaving them waiting.
    Status w = WriteFileAtomic(o.port_file, std::to_string(api.port()) + "\n");
    if (!w.ok()) return ReportError("sidecar", w.WithPrefix("--port-file"), false);
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);  // a closed terminal: the same graceful shutdown
  log::Info("listening", {{"addr", UrlHost(listen->host) + ":" + std::to_string(api.port())},
                          {"shm", o.shm_name}});
  std::thread server([&] { api.Serve(); });
  bool replaced = false;
  while (g_signals.load() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (control->Replaced()) {
      // Stopped past the stale threshold, this sidecar was judged dead and another one adopted
      // the control segment: its ranks, decisions and heartbeat are the new sidecar's now.
      log::Error("another sidecar took over the control segment; stopping",
                 {{"shm", o.shm_name}});
      replaced = true;
      break;
    }
  }

  // Graceful shutdown: refuse new jobs, let the running one end (aborted before its commit
  // decision, finished after it), then stop serving.
  log::Info("shutting down", {{"timeout_s", o.shutdown_timeout_s}});
  api.BeginShutdown();
  if (peer) peer->BeginShutdown();
  const bool drained = manager.Shutdown(std::chrono::steady_clock::now() +
                                        std::chrono::seconds(o.shutdown_timeout_s));
  api.Stop();
  server.join();
  if (!drained) {
    // The running job is left to the protocol: ranks drop a plan that was never decided when
    // the sidecar is gone, and apply a decided COMMIT without it.
    log::Error("shutdown timed out: a job is still running", {{"timeout_s", o.shutdown_timeout_s}});
    std::fflush(stderr);
    _exit(kExitEnvironment);
  }
  log::Info("stopped");
  return replaced ? kExitEnvironment : kExitOk;
}

}  // namespace

void AddSidecarCommand(CLI::App& app, int* rc) {
  CLI::App* cmd =
      app.add_subcommand("sidecar", "Run the sidecar: HTTP API + delta sync to engine ranks");
  auto o = std::make_shared<SidecarOpts>();
  AddSidecarOptions(*cmd, *o);
  // For the README: the table of config keys, from the same list as the flags.
  auto markdown = std::make_shared<bool>(false);
  cmd->add_flag("--config-keys-markdown", *markdown,
                "Print the config keys as a Markdown table (the README's) and exit");
  cmd->callback([o, cmd, rc, markdown] {
    if (*markdown) {
      std::printf("%s", ConfigKeysMarkdown().c_str());
      *rc = kExitOk;
      return;
    }
    *rc = RunSidecar(*o, *cmd);
  });
}

}  // namespace deltakv::cli
