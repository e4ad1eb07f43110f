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
#include "cli/cli_common.h"
#include "coord/group_commit.h"
#include "kv/kv_pool_owner.h"
#include "server/http_api.h"
#include "sync/shm_executor.h"
#include "sync/sync_manager.h"

namespace deltakv::cli {

namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

// "a,,b" -> {"a", "b"}.
std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// "0-3,8" -> {0,1,2,3,8}. InvalidArgument on garbage.
StatusOr<std::vector<unsigned>> ParseCpuList(const std::string& text) {
  std::vector<unsigned> out;
  for (const std::string& item : SplitList(text)) {
    size_t dash = item.find('-');
    try {
      unsigned a = static_cast<unsigned>(std::stoul(item.substr(0, dash)));
      unsigned b =
          dash == std::string::npos ? a : static_cast<unsigned>(std::stoul(item.substr(dash + 1)));
      if (b < a || b > 4095) return InvalidArgument("bad cpu range '" + item + "'");
      for (unsigned c = a; c <= b; ++c) out.push_back(c);
    } catch (...) {
      return InvalidArgument("bad cpu list '" + text + "'");
    }
  }
  return out;
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
        std::fprintf(stderr, "deltakv sidecar: warning: could not pin the sync worker\n");
      }
    }
    hwloc_bitmap_free(set);
  }
  hwloc_topology_destroy(topo);
}

struct SidecarOpts {
  std::string config;
  std::string listen = "127.0.0.1:8470";
  std::string token;
  std::string token_file;
  std::string shm_name = "deltakv";
  std::string serving_cores;
  std::string decoder;
  std::string state_dir;
  uint64_t max_body_bytes = 64 << 10;
  uint64_t plan_buffer_bytes = 128ull << 20;
  uint64_t decode_threads = 0;
  std::string http_ca_file;    // HTTP(S) delta stores (store/open_store.h)
  std::string volume_store;    // vol:// deltas; env DELTAKV_VOLUME_STORE
  uint64_t http_timeout = 30;  // seconds: connect, and the longest stall
  uint64_t http_total_timeout = 1800;
  uint64_t http_attempts = 4;
  size_t history = 64;
  std::string port_file;
  uint64_t kv_block_bytes = 0;
  uint64_t kv_capacity_slots = 0;
  double kv_host_fraction = 0;
  bool kv_hugepages = false;
  std::string kv_numa_node;  // "" (no binding), "auto" or a node number
  std::string kv_gpu_pci_bus_id;
  std::string verify_checkpoint;
  double scrub_interval_s = 0;
  double scrub_rate_gbps = 0;
  // Multi-node groups (docs/MULTINODE.md): all or none of the nodes commit each sync.
  std::string group;
  std::string node;
  std::string group_members;   // comma-separated, this node included
  std::string etcd_endpoints;  // comma-separated http://host:port; env DELTAKV_ETCD_ENDPOINTS
  uint64_t group_prepare_timeout_ms = 60000;
  uint64_t group_in_doubt_timeout_ms = 30000;
  uint64_t group_commit_margin_ms = 50;
  uint64_t group_report_timeout_ms = 2000;
  std::string topology;  // JSON file: which global ranks each node serves
};

// Fills unset options from a JSON config file (flags given on the command line win).
Status LoadConfig(SidecarOpts& o, const CLI::App& cmd) {
  if (o.config.empty()) return Status::Ok();
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(o.config, 1 << 20));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return InvalidArgument("config '" + o.config + "' is not a JSON object");
  auto str = [&](const char* key, std::string& dst, const char* flag) -> Status {
    if (!j.contains(key) || cmd.count(flag) > 0) return Status::Ok();
    if (!j[key].is_string())
      return InvalidArgument("config: '" + std::string(key) + "' must be a string");
    dst = j[key].get<std::string>();
    return Status::Ok();
  };
  RETURN_IF_ERROR(str("listen", o.listen, "--listen"));
  RETURN_IF_ERROR(str("token_file", o.token_file, "--token-file"));
  RETURN_IF_ERROR(str("shm_name", o.shm_name, "--shm-name"));
  RETURN_IF_ERROR(str("serving_cores", o.serving_cores, "--serving-cores"));
  RETURN_IF_ERROR(str("decoder", o.decoder, "--decoder"));
  RETURN_IF_ERROR(str("state_dir", o.state_dir, "--state-dir"));
  RETURN_IF_ERROR(str("http_ca_file", o.http_ca_file, "--http-ca-file"));
  RETURN_IF_ERROR(str("volume_store", o.volume_store, "--volume-store"));
  auto uint = [&](const char* key, uint64_t& dst, const char* flag) -> Status {
    if (!j.contains(key) || cmd.count(flag) > 0) return Status::Ok();
    if (!j[key].is_number_unsigned()) {
      return InvalidArgument("config: '" + std::string(key) + "' must be a non-negative integer");
    }
    dst = j[key].get<uint64_t>();
    return Status::Ok();
  };
  RETURN_IF_ERROR(uint("plan_buffer_bytes", o.plan_buffer_bytes, "--plan-buffer-bytes"));
  RETURN_IF_ERROR(uint("decode_threads", o.decode_threads, "--decode-threads"));
  RETURN_IF_ERROR(uint("http_timeout", o.http_timeout, "--http-timeout"));
  RETURN_IF_ERROR(uint("http_total_timeout", o.http_total_timeout, "--http-total-timeout"));
  RETURN_IF_ERROR(uint("http_attempts", o.http_attempts, "--http-attempts"));
  RETURN_IF_ERROR(uint("kv_block_bytes", o.kv_block_bytes, "--kv-block-bytes"));
  RETURN_IF_ERROR(uint("kv_capacity_slots", o.kv_capacity_slots, "--kv-capacity-slots"));
  RETURN_IF_ERROR(uint("max_body_bytes", o.max_body_bytes, "--max-body-bytes"));
  if (j.contains("kv_numa_node") && cmd.count("--kv-numa-node") == 0) {
    if (j["kv_numa_node"].is_number_unsigned()) {
      o.kv_numa_node = std::to_string(j["kv_numa_node"].get<uint64_t>());
    } else if (j["kv_numa_node"].is_string()) {
      o.kv_numa_node = j["kv_numa_node"].get<std::string>();
    } else {
      return InvalidArgument("config: 'kv_numa_node' must be a node number or \"auto\"");
    }
  }
  RETURN_IF_ERROR(str("kv_gpu_pci_bus_id", o.kv_gpu_pci_bus_id, "--kv-gpu-pci-bus-id"));
  RETURN_IF_ERROR(str("verify_checkpoint", o.verify_checkpoint, "--verify-checkpoint"));
  RETURN_IF_ERROR(str("group", o.group, "--group"));
  RETURN_IF_ERROR(str("node", o.node, "--node"));
  RETURN_IF_ERROR(str("group_members", o.group_members, "--group-members"));
  RETURN_IF_ERROR(str("etcd_endpoints", o.etcd_endpoints, "--etcd-endpoints"));
  RETURN_IF_ERROR(str("topology", o.topology, "--topology"));
  RETURN_IF_ERROR(uint("group_prepare_timeout_ms", o.group_prepare_timeout_ms,
                       "--group-prepare-timeout-ms"));
  RETURN_IF_ERROR(uint("group_in_doubt_timeout_ms", o.group_in_doubt_timeout_ms,
                       "--group-in-doubt-timeout-ms"));
  RETURN_IF_ERROR(uint("group_commit_margin_ms", o.group_commit_margin_ms,
                       "--group-commit-margin-ms"));
  RETURN_IF_ERROR(uint("group_report_timeout_ms", o.group_report_timeout_ms,
                       "--group-report-timeout-ms"));
  auto number = [&](const char* key, double& dst, const char* flag) -> Status {
    if (!j.contains(key) || cmd.count(flag) > 0) return Status::Ok();
    if (!j[key].is_number()) return InvalidArgument("config: '" + std::string(key) + "' must be a number");
    dst = j[key].get<double>();
    return Status::Ok();
  };
  RETURN_IF_ERROR(number("kv_host_fraction", o.kv_host_fraction, "--kv-host-fraction"));
  RETURN_IF_ERROR(number("scrub_interval_s", o.scrub_interval_s, "--scrub-interval-s"));
  RETURN_IF_ERROR(number("scrub_rate_gbps", o.scrub_rate_gbps, "--scrub-rate-gbps"));
  return Status::Ok();
}

// The group of a multi-node model: --group, --node and --group-members together, with etcd
// endpoints from --etcd-endpoints or DELTAKV_ETCD_ENDPOINTS.
StatusOr<std::shared_ptr<sidecar::GroupCommit>> GroupFrom(SidecarOpts& o) {
  if (o.group.empty() || o.node.empty() || o.group_members.empty()) {
    return InvalidArgument("--group, --node and --group-members go together");
  }
  if (o.etcd_endpoints.empty()) {
    if (const char* env = std::getenv("DELTAKV_ETCD_ENDPOINTS")) o.etcd_endpoints = env;
  }
  if (o.etcd_endpoints.empty()) {
    return InvalidArgument("a group needs --etcd-endpoints (or DELTAKV_ETCD_ENDPOINTS)");
  }
  if (o.group_prepare_timeout_ms < 100 || o.group_prepare_timeout_ms > 3600000) {
    return InvalidArgument("--group-prepare-timeout-ms must be 100..3600000");
  }
  if (o.group_in_doubt_timeout_ms > 3600000) {
    return InvalidArgument("--group-in-doubt-timeout-ms must be 0..3600000");
  }
  if (o.group_commit_margin_ms > 10000) {
    return InvalidArgument("--group-commit-margin-ms must be 0..10000");
  }
  if (o.group_report_timeout_ms > 600000) {
    return InvalidArgument("--group-report-timeout-ms must be 0..600000");
  }
  sidecar::GroupOptions g;
  g.group = o.group;
  g.node = o.node;
  g.members = SplitList(o.group_members);
  g.etcd.endpoints = SplitList(o.etcd_endpoints);
  g.prepare_timeout = std::chrono::milliseconds(o.group_prepare_timeout_ms);
  g.in_doubt_timeout = std::chrono::milliseconds(o.group_in_doubt_timeout_ms);
  g.commit_margin = std::chrono::milliseconds(o.group_commit_margin_ms);
  g.report_timeout = std::chrono::milliseconds(o.group_report_timeout_ms);
  if (!o.topology.empty()) {
    ASSIGN_OR_RETURN(sidecar::Topology topology, sidecar::LoadTopology(o.topology, g.members));
    g.topology = std::move(topology);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<sidecar::GroupCommit> group, sidecar::GroupCommit::Create(g));
  return std::shared_ptr<sidecar::GroupCommit>(std::move(group));
}

// The HTTP(S) store options, checked here so a bad value stops the sidecar at start-up, not
// at its first sync.
StatusOr<sidecar::HttpStoreOptions> HttpStoreOptionsFrom(const SidecarOpts& o) {
  sidecar::HttpStoreOptions h;
  if (o.http_timeout < 1 || o.http_timeout > 86400)
    return InvalidArgument("--http-timeout must be 1..86400 seconds");
  if (o.http_total_timeout > 7 * 86400)
    return InvalidArgument("--http-total-timeout must be 0..604800 seconds");
  if (o.http_attempts < 1 || o.http_attempts > 100)
    return InvalidArgument("--http-attempts must be 1..100");
  if (!o.http_ca_file.empty() && access(o.http_ca_file.c_str(), R_OK) != 0) {
    return InvalidArgument(ErrnoMessage("--http-ca-file: cannot read", o.http_ca_file, errno));
  }
  h.timeout_seconds = static_cast<int>(o.http_timeout);
  h.total_timeout_seconds = static_cast<int>(o.http_total_timeout);
  h.attempts = static_cast<int>(o.http_attempts);
  h.ca_file = o.http_ca_file;
  return h;
}

int RunSidecar(SidecarOpts& o, const CLI::App& cmd) {
  Status s = LoadConfig(o, cmd);
  if (!s.ok()) return ReportError("sidecar", s, false);
  if (!o.token_file.empty()) {
    auto t = ReadFileToString(o.token_file, 4096);
    if (!t.ok()) return ReportError("sidecar", t.status(), false);
    o.token = *t;
    while (!o.token.empty() && (o.token.back() == '\n' || o.token.back() == '\r'))
      o.token.pop_back();
  }
  if (o.token.empty()) {
    if (const char* env = std::getenv("DELTAKV_TOKEN")) o.token = env;
  }
  if (o.token.empty()) {
    return ReportError("sidecar",
                       InvalidArgument("a bearer token is required (--token-file, "
                                       "--token or DELTAKV_TOKEN)"),
                       false);
  }
  auto cores = ParseCpuList(o.serving_cores);
  if (!cores.ok()) return ReportError("sidecar", cores.status(), false);
  auto http_store = HttpStoreOptionsFrom(o);
  if (!http_store.ok()) return ReportError("sidecar", http_store.status(), false);
  size_t colon = o.listen.rfind(':');
  if (colon == std::string::npos)
    return ReportError("sidecar", InvalidArgument("--listen must be HOST:PORT"), false);
  sidecar::HttpApiOptions http;
  http.host = o.listen.substr(0, colon);
  try {
    http.port = std::stoi(o.listen.substr(colon + 1));
  } catch (...) {
    return ReportError("sidecar", InvalidArgument("--listen must be HOST:PORT"), false);
  }
  http.token = o.token;
  http.max_body_bytes = o.max_body_bytes;
  http.scrub_rate_bytes_per_s = static_cast<uint64_t>(o.scrub_rate_gbps * 1e9);

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
      if (o.kv_numa_node.size() > 6 ||
          o.kv_numa_node.find_first_not_of("0123456789") != std::string::npos) {
        return ReportError("sidecar",
                           InvalidArgument("--kv-numa-node must be a node number or 'auto', not '" +
                                           o.kv_numa_node + "'"),
                           false);
      }
      kc.numa_node = std::stoi(o.kv_numa_node);
    }
    if (!o.kv_gpu_pci_bus_id.empty() && !kc.numa_auto) {
      return ReportError(
          "sidecar", InvalidArgument("--kv-gpu-pci-bus-id is used with --kv-numa-node auto"),
          false);
    }
    auto pool = sidecar::KvPoolOwner::Create(kc);
    if (!pool.ok()) return ReportError("sidecar", pool.status().WithPrefix("KV pool"), false);
    kv_pool = std::move(pool).value();
    sidecar::KvPoolOwner* p = kv_pool.get();
    http.metrics.push_back([p] { return p->Metrics(); });
    std::fprintf(stderr, "deltakv sidecar: KV pool '%s': %llu slots of %llu bytes; %s\n",
                 kc.name.c_str(), (unsigned long long)p->config().capacity_slots,
                 (unsigned long long)kc.block_bytes, p->placement().Describe().c_str());
  }
  sidecar::ShmExecutorOptions eo;
  eo.shm_name = o.shm_name;
  eo.decoder = o.decoder;
  eo.state_dir = o.state_dir;
  eo.plan_buffer_bytes = o.plan_buffer_bytes;
  eo.decode_threads = static_cast<unsigned>(o.decode_threads);
  eo.http = *http_store;
  eo.volume_store = o.volume_store;
  if (o.scrub_interval_s < 0 || o.scrub_rate_gbps < 0) {
    return ReportError("sidecar",
                       InvalidArgument("--scrub-interval-s and --scrub-rate-gbps must be >= 0"),
                       false);
  }
  if (!o.group.empty() || !o.group_members.empty() || !o.node.empty() || !o.topology.empty()) {
    auto group = GroupFrom(o);
    if (!group.ok()) return ReportError("sidecar", group.status().WithPrefix("group"), false);
    eo.group = std::move(group).value();
    std::fprintf(stderr, "deltakv sidecar: node '%s' of group '%s' (%s), decisions in %s\n",
                 o.node.c_str(), o.group.c_str(), o.group_members.c_str(),
                 o.etcd_endpoints.c_str());
  }
  auto executor = sidecar::ShmSyncExecutor::Create(eo);
  if (!executor.ok()) return ReportError("sidecar", executor.status(), false);
  std::vector<unsigned> serving = *cores;
  sidecar::SyncManagerOptions mo;
  mo.history = o.history;
  mo.worker_setup = [serving] { LowerPriorityAndPin(serving); };
  mo.scrub_interval = std::chrono::milliseconds(static_cast<int64_t>(o.scrub_interval_s * 1000));
  mo.scrub_rate_bytes_per_s = static_cast<uint64_t>(o.scrub_rate_gbps * 1e9);
  mo.verify_checkpoint = o.verify_checkpoint;
  mo.group_catch_up = eo.group != nullptr;
  sidecar::SyncManager manager(std::move(executor).value(), std::move(mo));
  sidecar::HttpApi api(http, &manager);
  s = api.Bind();
  if (!s.ok()) return ReportError("sidecar", s, false);
  if (!o.port_file.empty()) (void)WriteFileAtomic(o.port_file, std::to_string(api.port()) + "\n");
  std::fprintf(stderr, "deltakv sidecar: listening on %s:%d, shared memory '%s'\n",
               http.host.c_str(), api.port(), o.shm_name.c_str());
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  std::thread server([&] { api.Serve(); });
  while (!g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  api.Stop();
  server.join();
  std::fprintf(stderr, "deltakv sidecar: stopped\n");
  return kExitOk;
}

}  // namespace

void AddSidecarCommand(CLI::App& app, int* rc) {
  CLI::App* cmd =
      app.add_subcommand("sidecar", "Run the sidecar: HTTP API + delta sync to engine ranks");
  auto o = std::make_shared<SidecarOpts>();
  cmd->add_option("--config", o->config, "JSON config file (keys as the long flags, '_' for '-')");
  cmd->add_option("--listen", o->listen, "HOST:PORT for the HTTP API (port 0: any)")
      ->capture_default_str();
  cmd->add_option("--token", o->token, "Bearer token for mutating calls (prefer --token-file)");
  cmd->add_option("--token-file", o->token_file, "File holding the bearer token");
  cmd->add_option("--shm-name", o->shm_name, "Shared-memory control segment name")
      ->capture_default_str();
  cmd->add_option("--serving-cores", o->serving_cores,
                  "CPUs kept for serving, e.g. 0-3 (the sync worker avoids them)");
  cmd->add_option("--decoder", o->decoder, "XOR frame decoder (walker, the default, or libzstd)");
  cmd->add_option("--state-dir", o->state_dir, "Directory that persists the live version id and the checksum table");
  cmd->add_option("--max-body-bytes", o->max_body_bytes, "Largest accepted request body")
      ->capture_default_str();
  cmd->add_option("--plan-buffer-bytes", o->plan_buffer_bytes,
                  "Bound on write-plan bytes in flight to all ranks (the sidecar's plan memory)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{256} << 10, uint64_t{1} << 40));
  cmd->add_option("--decode-threads", o->decode_threads,
                  "Threads that walk and plan a delta: 1 walks and plans on one thread, N >= 2 "
                  "walks on N - 1 threads while planning on one (0: one per CPU the sync worker "
                  "may use, if 4 or more)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{256}));
  cmd->add_option("--volume-store", o->volume_store,
                  "Sealed-volume store that vol://NS/NAME@sha256:... and vol://NS/NAME:TAG delta "
                  "locations are read from (deltasync/VOLUME.md)")
      ->envname("DELTAKV_VOLUME_STORE");
  cmd->add_option("--http-ca-file", o->http_ca_file,
                  "PEM CA certificates that verify https:// delta stores (default: the system's)");
  cmd->add_option("--http-timeout", o->http_timeout,
                  "HTTP(S) delta stores: connect timeout, and how long a transfer may stall, in "
                  "seconds")
      ->capture_default_str();
  cmd->add_option("--http-total-timeout", o->http_total_timeout,
                  "HTTP(S) delta stores: limit on one request, in seconds (0 = none)")
      ->capture_default_str();
  cmd->add_option("--http-attempts", o->http_attempts,
                  "HTTP(S) delta stores: tries per request, with exponential backoff")
      ->capture_default_str();
  cmd->add_option("--verify-checkpoint", o->verify_checkpoint,
                  "Verify the engine's live weights against this checkpoint (directory or URL) "
                  "whenever a complete set of ranks attaches");
  cmd->add_option("--scrub-interval-s", o->scrub_interval_s,
                  "Re-checksum the live weights this often when idle (0: never)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--scrub-rate-gbps", o->scrub_rate_gbps,
                  "Read rate limit of the background scrub, GB/s per rank (0: unlimited)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--port-file", o->port_file, "Write the bound port here (with --listen HOST:0)");
  cmd->add_option("--kv-block-bytes", o->kv_block_bytes,
                  "Host KV tier: bytes per block slot (0 = no KV pool); pool '<shm-name>.kv'");
  cmd->add_option("--kv-capacity-slots", o->kv_capacity_slots, "Host KV tier: number of slots");
  cmd->add_option("--kv-host-fraction", o->kv_host_fraction,
                  "Host KV tier: size the pool as this fraction of usable host RAM (cgroup-aware)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_flag("--kv-hugepages", o->kv_hugepages,
                "Host KV tier: advise huge pages (the log says whether shmem THP honours it)");
  cmd->add_option("--kv-numa-node", o->kv_numa_node,
                  "Host KV tier: bind the pool's memory to this NUMA node, or 'auto' for the node "
                  "nearest --kv-gpu-pci-bus-id");
  cmd->add_option("--kv-gpu-pci-bus-id", o->kv_gpu_pci_bus_id,
                  "Host KV tier: the GPU whose NUMA node 'auto' picks, e.g. 0000:3b:00.0");
  cmd->add_option("--group", o->group,
                  "Multi-node: the model group this node belongs to (all nodes commit or none)");
  cmd->add_option("--node", o->node, "Multi-node: this node's name in the group");
  cmd->add_option("--group-members", o->group_members,
                  "Multi-node: every node of the group, comma-separated (this one included)");
  cmd->add_option("--topology", o->topology,
                  "Multi-node: JSON file of the global ranks each node serves (docs/MULTINODE.md)");
  cmd->add_option("--etcd-endpoints", o->etcd_endpoints,
                  "Multi-node: etcd http://host:port list (default $DELTAKV_ETCD_ENDPOINTS)");
  cmd->add_option("--group-prepare-timeout-ms", o->group_prepare_timeout_ms,
                  "Multi-node: how long nodes wait for every node's PREPARED before ABORT");
  cmd->add_option("--group-in-doubt-timeout-ms", o->group_in_doubt_timeout_ms,
                  "Multi-node: how long past that a node that lost etcd keeps its staged plan");
  cmd->add_option("--group-commit-margin-ms", o->group_commit_margin_ms,
                  "Multi-node: the COMMIT's commit point is this far after the decision; every "
                  "node starts its pause then (default 50)");
  cmd->add_option("--group-report-timeout-ms", o->group_report_timeout_ms,
                  "Multi-node: how long a node waits for the others' pause times after its "
                  "commit (default 2000)");
  cmd->callback([o, cmd, rc] { *rc = RunSidecar(*o, *cmd); });
}

}  // namespace deltakv::cli
