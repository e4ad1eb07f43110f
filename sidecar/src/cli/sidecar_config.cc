#include "cli/sidecar_config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <sstream>

#include "base/file_util.h"
#include "base/host_port.h"
#include "coord/peer_records.h"
#include "kvtier/pool_layout.h"

namespace deltakv::cli {

namespace {

using O = SidecarOpts;

Status CheckListen(const O& o) { return ParseListen(o.listen).status(); }

Status CheckToken(const O& o) { return o.token.empty() ? Status::Ok() : CheckTokenText(o.token); }
Status CheckTokenFile(const O& o) {
  return o.token_file.empty() ? Status::Ok() : ReadTokenFile(o.token_file).status();
}
Status CheckGroupTokenFile(const O& o) {
  return o.group_token_file.empty() ? Status::Ok() : ReadTokenFile(o.group_token_file).status();
}

Status CheckPeerUrl(const O& o) {
  if (o.peer_url.empty()) return Status::Ok();
  return sidecar::ParsePeerUrl(o.peer_url).status();
}

Status CheckServingCores(const O& o) { return ParseCpuList(o.serving_cores).status(); }

Status CheckNumaNode(const O& o) {
  const std::string& n = o.kv_numa_node;
  if (n.empty() || n == "auto") return Status::Ok();
  if (n.size() > 6 || n.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgument("must be a node number or 'auto', not '" + n + "'");
  }
  return Status::Ok();
}

Status CheckGpuBusId(const O& o) {
  if (!o.kv_gpu_pci_bus_id.empty() && o.kv_numa_node != "auto") {
    return InvalidArgument("is used with kv_numa_node 'auto'");
  }
  return Status::Ok();
}

const char* KindName(KeyKind kind) {
  switch (kind) {
    case KeyKind::kString:
      return "string";
    case KeyKind::kFile:
      return "string (readable file)";
    case KeyKind::kChoice:
      return "string";
    case KeyKind::kUint:
      return "integer";
    case KeyKind::kNumber:
      return "number";
    case KeyKind::kBool:
      return "boolean";
    case KeyKind::kNumaNode:
      return "integer or \"auto\"";
  }
  return "?";
}

// A bound as written in messages and the README: integers without a fraction.
std::string Num(double v) {
  std::ostringstream ss;
  if (v == std::floor(v) && std::fabs(v) < 1e18) {
    ss << static_cast<long long>(v);
  } else {
    ss << v;
  }
  return ss.str();
}

std::string RangeText(const SidecarKey& k) {
  return Num(k.min) + ".." + Num(k.max);
}

nlohmann::ordered_json ValueOf(const SidecarKey& k, const O& o) {
  return std::visit(
      [&](auto member) -> nlohmann::ordered_json {
        const auto& v = o.*member;
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::string>) {
          if (k.kind == KeyKind::kNumaNode && !v.empty() && v != "auto") {
            return std::stoull(v);
          }
        }
        return v;
      },
      k.member);
}

}  // namespace

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

Status CheckTokenText(std::string_view token) {
  for (const char c : token) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return InvalidArgument(
          "a bearer token cannot hold spaces, tabs, line breaks or control characters");
    }
  }
  return Status::Ok();
}

StatusOr<std::string> ReadTokenFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, 4096));
  const char* kSpace = " \t\r\n";
  const size_t first = text.find_first_not_of(kSpace);
  if (first == std::string::npos) {
    return InvalidArgument("token file '" + path + "' holds no token (empty or only whitespace)");
  }
  text = text.substr(first, text.find_last_not_of(kSpace) + 1 - first);
  if (Status s = CheckTokenText(text); !s.ok()) {
    return InvalidArgument("token file '" + path +
                           "' must hold one token on one line: " + s.message());
  }
  return text;
}

StatusOr<ListenAddress> ParseListen(const std::string& text) {
  const size_t colon = text.rfind(':');
  const std::string port = colon == std::string::npos ? "" : text.substr(colon + 1);
  std::string host = colon == std::string::npos ? "" : text.substr(0, colon);
  bool ok = colon != std::string::npos && !port.empty() && port.size() <= 5 &&
            port.find_first_not_of("0123456789") == std::string::npos && std::stoul(port) <= 65535;
  if (ok && !host.empty() && host.front() == '[') {
    ok = UnbracketHost(host);  // an IPv6 address in brackets, as in URLs: [::1]:8470
  } else if (ok) {
    // Without brackets a host with a colon must be an IPv6 address (127.0.0.1:0:0 is not).
    in6_addr v6{};
    ok = UnbracketHost(host) &&
         (host.find(':') == std::string::npos || inet_pton(AF_INET6, host.c_str(), &v6) == 1);
  }
  if (ok) {
    for (const char c : host) ok = ok && static_cast<unsigned char>(c) > 0x20 && c != 0x7f;
  }
  if (!ok) {
    return InvalidArgument("must be HOST:PORT or [IPV6]:PORT with a port 0..65535, not '" + text +
                           "'");
  }
  return ListenAddress{host, static_cast<int>(std::stoul(port))};
}

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

const std::vector<SidecarKey>& SidecarKeys() {
  using K = KeyKind;
  static const std::vector<SidecarKey> keys = {
      {"listen",
       K::kString,
       &O::listen,
       "HOST:PORT for the HTTP API (port 0: any; an IPv6 address in brackets: [::1]:8470)",
       0,
       0,
       {},
       false,
       nullptr,
       CheckListen},
      {"token",
       K::kString,
       &O::token,
       "Bearer token for mutating calls (prefer token_file)",
       0,
       0,
       {},
       true,
       "DELTAKV_TOKEN",
       CheckToken},
      {"token_file",
       K::kFile,
       &O::token_file,
       "File holding the bearer token (one line; surrounding whitespace is ignored)",
       0,
       0,
       {},
       false,
       nullptr,
       CheckTokenFile},
      {"shm_name", K::kString, &O::shm_name, "Shared-memory control segment name"},
      {"serving_cores",
       K::kString,
       &O::serving_cores,
       "CPUs kept for serving, e.g. 0-3 (the sync worker avoids them)",
       0,
       0,
       {},
       false,
       nullptr,
       CheckServingCores},
      {"decoder",
       K::kChoice,
       &O::decoder,
       "XOR frame decoder (walker, the default, or libzstd)",
       0,
       0,
       {"", "walker", "sparse-walker", "libzstd"}},
      {"state_dir", K::kString, &O::state_dir,
       "Directory that persists the live version id, the checksum table and the next job id"},
      {"max_body_bytes", K::kUint, &O::max_body_bytes, "Largest accepted request body", 1,
       double(uint64_t{1} << 30)},
      {"plan_buffer_bytes", K::kUint, &O::plan_buffer_bytes,
       "Bound on write-plan bytes in flight to all ranks (the sidecar's plan memory)",
       double(uint64_t{256} << 10), double(uint64_t{1} << 40)},
      {"decode_threads", K::kUint, &O::decode_threads,
       "Threads that walk and plan a delta: 1 walks and plans on one thread; N >= 2 walks and "
       "plans frames on N - 1 threads while one appends what they planned to the ranks' plan "
       "parts, in frame order, and walks and plans frames itself whenever it has nothing to "
       "append (0: one per CPU the sync worker may use)",
       0, 256},
      {"volume_store",
       K::kString,
       &O::volume_store,
       "Sealed-volume store that vol://NS/NAME@sha256:... and vol://NS/NAME:TAG delta locations "
       "are read from (deltasync/VOLUME.md)",
       0,
       0,
       {},
       false,
       "DELTAKV_VOLUME_STORE"},
      {"http_ca_file", K::kFile, &O::http_ca_file,
       "PEM CA certificates that verify https:// delta stores (default: the system's)"},
      {"http_timeout", K::kUint, &O::http_timeout,
       "HTTP(S) delta stores: connect timeout, and how long a transfer may stall, in seconds", 1,
       86400},
      {"http_total_timeout", K::kUint, &O::http_total_timeout,
       "HTTP(S) delta stores: limit on one request, in seconds (0 = none)", 0, 7 * 86400},
      {"http_attempts", K::kUint, &O::http_attempts,
       "HTTP(S) delta stores: tries per request, with exponential backoff", 1, 100},
      {"verify_checkpoint", K::kString, &O::verify_checkpoint,
       "Verify the engine's live weights against this checkpoint (directory or URL) whenever a "
       "complete set of ranks attaches"},
      {"scrub_interval_s", K::kNumber, &O::scrub_interval_s,
       "Re-checksum the live weights this often when idle, in seconds (0: never)", 0, 1e9},
      {"scrub_rate_gbps", K::kNumber, &O::scrub_rate_gbps,
       "Read rate limit of the background scrub, GB/s per rank (0: unlimited)", 0, 1e6},
      {"port_file", K::kString, &O::port_file, "Write the bound port here (with listen HOST:0)"},
      {"kv_block_bytes", K::kUint, &O::kv_block_bytes,
       "Host KV tier: bytes per block slot (0 = no KV pool); pool '<shm_name>.kv'", 0,
       double(kvtier::kMaxBlockBytes)},
      {"kv_capacity_slots", K::kUint, &O::kv_capacity_slots,
       "Host KV tier: number of slots (0: sized by kv_host_fraction)", 0,
       double(kvtier::kMaxSlots)},
      {"kv_host_fraction", K::kNumber, &O::kv_host_fraction,
       "Host KV tier: size the pool as this fraction of usable host RAM (cgroup-aware)", 0, 1},
      {"kv_hugepages", K::kBool, &O::kv_hugepages,
       "Host KV tier: advise huge pages (the log says whether shmem THP honours it)"},
      {"kv_numa_node",
       K::kNumaNode,
       &O::kv_numa_node,
       "Host KV tier: bind the pool's memory to this NUMA node, or 'auto' for the node nearest "
       "kv_gpu_pci_bus_id",
       0,
       0,
       {},
       false,
       nullptr,
       CheckNumaNode},
      {"kv_gpu_pci_bus_id",
       K::kString,
       &O::kv_gpu_pci_bus_id,
       "Host KV tier: the GPU whose NUMA node 'auto' picks, e.g. 0000:3b:00.0",
       0,
       0,
       {},
       false,
       nullptr,
       CheckGpuBusId},
      {"group", K::kString, &O::group,
       "Multi-node: the model group this node belongs to (all nodes commit or none)"},
      {"node", K::kString, &O::node, "Multi-node: this node's name in the group"},
      {"group_members", K::kString, &O::group_members,
       "Multi-node: every node of the group, comma-separated (this one included)"},
      {"topology", K::kString, &O::topology,
       "Multi-node: JSON file of the global ranks each node serves (docs/MULTINODE.md)"},
      {"etcd_endpoints",
       K::kString,
       &O::etcd_endpoints,
       "Multi-node: etcd http://host:port list",
       0,
       0,
       {},
       false,
       "DELTAKV_ETCD_ENDPOINTS"},
      {"group_prepare_timeout_ms", K::kUint, &O::group_prepare_timeout_ms,
       "Multi-node: how long nodes wait for every node's PREPARED before ABORT", 100, 3600000},
      {"group_in_doubt_timeout_ms", K::kUint, &O::group_in_doubt_timeout_ms,
       "Multi-node: how long past that a node that lost etcd keeps its staged plan", 0, 3600000},
      {"group_commit_margin_ms", K::kUint, &O::group_commit_margin_ms,
       "Multi-node: the COMMIT's commit point is this far after the decision; every node starts "
       "its pause then",
       0, 10000},
      {"group_report_timeout_ms", K::kUint, &O::group_report_timeout_ms,
       "Multi-node: how long a node waits for the others' pause times after its commit", 0, 600000},
      {"group_decision_poll_ms", K::kUint, &O::group_decision_poll_ms,
       "Multi-node: how often a node waiting for the decision reads etcd (the node that writes "
       "it tells the others at once through the peer API)",
       10, 60000},
      {"peer_url",
       K::kString,
       &O::peer_url,
       "Multi-node: http://host:port where the other sidecars reach this one's peer API "
       "(default: http://<listen> with the bound port, unless listen is 0.0.0.0 or [::])",
       0,
       0,
       {},
       false,
       nullptr,
       CheckPeerUrl},
      {"group_token_file",
       K::kFile,
       &O::group_token_file,
       "Multi-node: file holding the bearer token of calls between the group's sidecars "
       "(default: the sidecar's own token, then every node needs the same one)",
       0,
       0,
       {},
       false,
       nullptr,
       CheckGroupTokenFile},
      {"log_format",
       K::kChoice,
       &O::log_format,
       "Log lines on stderr: text, or json (one object per line: ts, level, msg, fields)",
       0,
       0,
       {"text", "json"}},
      {"shutdown_timeout_s", K::kUint, &O::shutdown_timeout_s,
       "On SIGTERM/SIGINT/SIGHUP: how long a running job may take to end before the sidecar exits",
       1, 3600},
  };
  return keys;
}

std::string FlagName(const SidecarKey& key) {
  std::string flag = std::string("--") + key.name;
  for (char& c : flag) c = c == '_' ? '-' : c;
  return flag;
}

void AddSidecarOptions(CLI::App& cmd, SidecarOpts& o) {
  cmd.add_option("--config", o.config,
                 "JSON config file: an object whose keys are the long flags with '_' for '-' "
                 "(flags given here win)");
  cmd.add_flag("--print-config", o.print_config,
               "Print the effective configuration (flags over --config over defaults) as JSON "
               "and exit; secrets are redacted");
  for (const SidecarKey& k : SidecarKeys()) {
    std::string help = k.help;
    if (k.kind == KeyKind::kUint || k.kind == KeyKind::kNumber) help += " [" + RangeText(k) + "]";
    if (k.env != nullptr) help += " (default $" + std::string(k.env) + ")";
    std::visit(
        [&](auto member) {
          using T = std::decay_t<decltype(o.*member)>;
          if constexpr (std::is_same_v<T, bool>) {
            cmd.add_flag(FlagName(k), o.*member, help);
          } else {
            CLI::Option* opt = cmd.add_option(FlagName(k), o.*member, help);
            if constexpr (!std::is_same_v<T, std::string>) {
              opt->capture_default_str();
            } else if (!(o.*member).empty()) {
              opt->capture_default_str();
            }
          }
        },
        k.member);
  }
}

Status ApplyConfigJson(const nlohmann::json& j, const std::string& source,
                       const std::function<bool(const SidecarKey&)>& given, SidecarOpts& o,
                       std::set<std::string>& from_file) {
  if (!j.is_object()) return InvalidArgument("config '" + source + "' is not a JSON object");
  const auto& keys = SidecarKeys();
  for (auto it = j.begin(); it != j.end(); ++it) {
    // Plain references, not a structured binding: lambdas below capture them.
    const std::string& name = it.key();
    const nlohmann::json& value = it.value();
    const SidecarKey* k = nullptr;
    for (const SidecarKey& c : keys) {
      if (name == c.name) k = &c;
    }
    const std::string where = "config '" + source + "': key '" + name + "'";
    if (k == nullptr) return InvalidArgument(where + ": unknown key");
    if (given(*k)) continue;
    auto wrong = [&] {
      const std::string expected = k->kind == KeyKind::kUint       ? "a non-negative integer"
                                   : k->kind == KeyKind::kNumaNode ? "an integer or \"auto\""
                                                                   : std::string("a ") +
                                                                         KindName(k->kind);
      return InvalidArgument(where + ": must be " + expected + ", not " + value.dump());
    };
    Status s = std::visit(
        [&](auto member) -> Status {
          using T = std::decay_t<decltype(o.*member)>;
          if constexpr (std::is_same_v<T, std::string>) {
            if (k->kind == KeyKind::kNumaNode && value.is_number_unsigned()) {
              o.*member = std::to_string(value.get<uint64_t>());
              return Status::Ok();
            }
            if (!value.is_string()) return wrong();
            o.*member = value.get<std::string>();
          } else if constexpr (std::is_same_v<T, uint64_t>) {
            if (!value.is_number_unsigned()) return wrong();
            o.*member = value.get<uint64_t>();
          } else if constexpr (std::is_same_v<T, double>) {
            if (!value.is_number()) return wrong();
            o.*member = value.get<double>();
          } else {
            if (!value.is_boolean()) return wrong();
            o.*member = value.get<bool>();
          }
          return Status::Ok();
        },
        k->member);
    RETURN_IF_ERROR(s);
    from_file.insert(name);
  }
  return Status::Ok();
}

Status LoadSidecarConfig(const CLI::App& cmd, SidecarOpts& o) {
  std::set<std::string> from_file;
  if (!o.config.empty()) {
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(o.config, 1 << 20));
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded()) return InvalidArgument("config '" + o.config + "' is not valid JSON");
    // The file is checked whole, also its keys that flags override: a broken file is refused
    // now, not on the day a flag is dropped.
    SidecarOpts file_alone;
    file_alone.config = o.config;
    std::set<std::string> all_keys;
    RETURN_IF_ERROR(ApplyConfigJson(
        j, o.config, [](const SidecarKey&) { return false; }, file_alone, all_keys));
    RETURN_IF_ERROR(ValidateSidecarOpts(file_alone, all_keys));
    RETURN_IF_ERROR(ApplyConfigJson(
        j, o.config, [&](const SidecarKey& k) { return cmd.count(FlagName(k)) > 0; }, o,
        from_file));
  }
  // The token: a flag wins over the file's key of the other (the token file is read later, so
  // it would win otherwise); both flags are refused; of two keys of the file, token_file wins.
  const bool token_flag = cmd.count("--token") > 0, token_file_flag = cmd.count("--token-file") > 0;
  if (token_flag && token_file_flag) {
    return InvalidArgument("--token and --token-file both give the token: give one of them");
  }
  if (token_flag) o.token_file.clear();
  if (token_file_flag) o.token.clear();
  // Environment defaults come last: a flag or a key wins over them (a token file over
  // $DELTAKV_TOKEN as well).
  for (const SidecarKey& k : SidecarKeys()) {
    if (k.env == nullptr) continue;
    if (std::string_view(k.name) == "token" && !o.token_file.empty()) continue;
    auto* member = std::get_if<std::string O::*>(&k.member);
    const char* env = std::getenv(k.env);
    if (member != nullptr && env != nullptr && (o.**member).empty()) o.**member = env;
  }
  return ValidateSidecarOpts(o, from_file);
}

Status ValidateSidecarOpts(const SidecarOpts& o, const std::set<std::string>& from_file) {
  for (const SidecarKey& k : SidecarKeys()) {
    const std::string where = from_file.count(k.name) > 0
                                  ? "config '" + o.config + "': key '" + k.name + "'"
                                  : FlagName(k);
    auto bad = [&](const std::string& what) { return InvalidArgument(where + ": " + what); };
    switch (k.kind) {
      case KeyKind::kUint: {
        const uint64_t v = o.*std::get<uint64_t O::*>(k.member);
        if (static_cast<double>(v) < k.min || static_cast<double>(v) > k.max) {
          return bad("must be " + RangeText(k) + ", not " + std::to_string(v));
        }
        break;
      }
      case KeyKind::kNumber: {
        const double v = o.*std::get<double O::*>(k.member);
        if (!std::isfinite(v) || v < k.min || v > k.max) {
          return bad("must be " + RangeText(k) + ", not " + Num(v));
        }
        break;
      }
      case KeyKind::kChoice: {
        const std::string& v = o.*std::get<std::string O::*>(k.member);
        bool ok = false;
        std::string list;
        for (const std::string& c : k.choices) {
          ok = ok || v == c;
          if (!c.empty()) list += (list.empty() ? "" : ", ") + c;
        }
        if (!ok) return bad("must be one of " + list + ", not '" + v + "'");
        break;
      }
      case KeyKind::kFile: {
        const std::string& v = o.*std::get<std::string O::*>(k.member);
        if (!v.empty() && access(v.c_str(), R_OK) != 0) {
          return bad(ErrnoMessage("cannot read", v, errno));
        }
        break;
      }
      default:
        break;
    }
    if (k.check) {
      Status s = k.check(o);
      if (!s.ok()) return bad(s.message());
    }
  }
  // A pool's size without its block size would be ignored: no pool without kv_block_bytes.
  if (o.kv_block_bytes == 0 && (o.kv_capacity_slots != 0 || o.kv_host_fraction != 0)) {
    return InvalidArgument(
        std::string(o.kv_capacity_slots != 0 ? "--kv-capacity-slots" : "--kv-host-fraction") +
        " sizes a KV pool, which needs --kv-block-bytes (0: no KV pool)");
  }
  // The pool's size comes from one of the two, never both.
  if (o.kv_capacity_slots != 0 && o.kv_host_fraction != 0) {
    return InvalidArgument(
        "--kv-capacity-slots and --kv-host-fraction both size the KV pool: give one of them");
  }
  return Status::Ok();
}

nlohmann::ordered_json EffectiveConfig(const SidecarOpts& o) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const SidecarKey& k : SidecarKeys()) {
    if (k.secret) {
      const std::string& v = o.*std::get<std::string O::*>(k.member);
      j[k.name] = v.empty() ? "" : "<redacted>";
    } else {
      j[k.name] = ValueOf(k, o);
    }
  }
  return j;
}

std::string ConfigKeysMarkdown() {
  const SidecarOpts defaults;
  std::string out = "| Key | Flag | Type | Default | Meaning |\n|---|---|---|---|---|\n";
  for (const SidecarKey& k : SidecarKeys()) {
    std::string type = KindName(k.kind);
    if (k.kind == KeyKind::kUint || k.kind == KeyKind::kNumber) type += " " + RangeText(k);
    if (k.kind == KeyKind::kChoice) {
      std::string list;
      for (const std::string& c : k.choices) {
        if (!c.empty()) list += (list.empty() ? "" : " \\| ") + c;
      }
      type = list;
    }
    std::string def = ValueOf(k, defaults).dump();
    if (def == "\"\"") def = k.env != nullptr ? std::string("$") + k.env : "";
    std::string help = k.help;
    for (size_t p = 0; (p = help.find('|', p)) != std::string::npos; p += 2) help.insert(p, "\\");
    out += "| `" + std::string(k.name) + "` | `" + FlagName(k) + "` | " + type + " | " +
           (def.empty() ? "" : "`" + def + "`") + " | " + help + (k.secret ? " (never printed)" : "") +
           " |\n";
  }
  return out;
}

}  // namespace deltakv::cli
