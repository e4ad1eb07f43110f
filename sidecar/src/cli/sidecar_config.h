// The options of `deltakv sidecar` and the one table of them that drives the command-line flags,
// the JSON config file (--config), their validation, --print-config and the README's key table.
//
// Every flag has a config key: the flag's name without "--", with '_' for '-' ("--shm-name" is
// "shm_name"). A flag given on the command line wins over the file. Each value, from either
// place, is checked the same way (type, range, choices, readable file); a bad one stops the
// sidecar at start-up with a message naming the flag or the file and key.
//
// Thread-safety: plain data and pure functions; used at start-up only.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "base/status.h"

namespace deltakv::cli {

struct SidecarOpts {
  std::string config;  // --config: not a key of the file
  bool print_config = false;
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
  uint64_t group_decision_poll_ms = 100;
  std::string topology;  // JSON file: which global ranks each node serves
  std::string peer_url;  // http://host:port the other sidecars reach this one at ("" = derived)
  std::string group_token_file;  // bearer token of peer calls ("" = the sidecar's token)
  // Operations.
  std::string log_format = "text";
  uint64_t shutdown_timeout_s = 30;
};

enum class KeyKind {
  kString,    // any string
  kFile,      // a path that must be readable ("" = unset)
  kChoice,    // one of `choices` ("" allowed when `choices` holds "")
  kUint,      // a non-negative integer within [min, max]
  kNumber,    // a number within [min, max]
  kBool,      // true / false (a flag without a value on the command line)
  kNumaNode,  // "auto" or a node number (a JSON number or string in the file)
};

using SidecarMember = std::variant<std::string SidecarOpts::*, uint64_t SidecarOpts::*,
                                   double SidecarOpts::*, bool SidecarOpts::*>;

struct SidecarKey {
  const char* name;  // the config key; the flag is "--" + name with '-' for '_'
  KeyKind kind;
  SidecarMember member;
  const char* help;
  double min = 0;  // kUint / kNumber
  double max = 0;
  std::vector<std::string> choices = {};  // kChoice
  bool secret = false;                    // never printed (--print-config shows "<redacted>")
  const char* env = nullptr;              // an environment variable that is the default
  // Extra check of the value (InvalidArgument with what is wrong, without the key's name).
  std::function<Status(const SidecarOpts&)> check = nullptr;
};

// Every key, in the order of `deltakv sidecar --help`.
const std::vector<SidecarKey>& SidecarKeys();
std::string FlagName(const SidecarKey& key);

// Registers --config, --print-config and one option per key on `cmd`, bound to `o`.
void AddSidecarOptions(CLI::App& cmd, SidecarOpts& o);

// Fills from JSON object `j` every key that `given` says was not on the command line. Returns
// InvalidArgument naming `source` and the key for an unknown key or a value of the wrong type;
// records the keys taken from the file in `from_file`. On failure `o` is partly filled.
Status ApplyConfigJson(const nlohmann::json& j, const std::string& source,
                       const std::function<bool(const SidecarKey&)>& given, SidecarOpts& o,
                       std::set<std::string>& from_file);

// Reads o.config (if set) and applies it; the command line's options are those `cmd` counted.
Status LoadSidecarConfig(const CLI::App& cmd, SidecarOpts& o);

// Checks every key's value (range, choices, readable file, extra check); the message names the
// flag, or the config file and key when the value came from the file.
Status ValidateSidecarOpts(const SidecarOpts& o, const std::set<std::string>& from_file);

// The effective configuration as a JSON object of every key (secrets redacted).
nlohmann::ordered_json EffectiveConfig(const SidecarOpts& o);

// The README's table of keys (Markdown, one row per key).
std::string ConfigKeysMarkdown();

// The HTTP API's address: `host` as the socket layer takes it (an IPv6 address without its
// brackets, empty for every address), `port` 0..65535 (0: any free port).
struct ListenAddress {
  std::string host;
  int port = 0;
};
// "HOST:PORT" or "[IPV6]:PORT" -> the address. InvalidArgument on anything else.
StatusOr<ListenAddress> ParseListen(const std::string& text);

// A bearer token as the sidecar takes it: no spaces, tabs, line breaks or control characters
// (InvalidArgument otherwise).
Status CheckTokenText(std::string_view token);
// The token a --token-file / --group-token-file holds: its text without surrounding whitespace
// and line breaks, one token (InvalidArgument when it holds none or more than a token).
StatusOr<std::string> ReadTokenFile(const std::string& path);

// "0-3,8" -> {0,1,2,3,8}. InvalidArgument on garbage.
StatusOr<std::vector<unsigned>> ParseCpuList(const std::string& text);
// "a,,b" -> {"a", "b"}.
std::vector<std::string> SplitList(const std::string& text);

}  // namespace deltakv::cli
