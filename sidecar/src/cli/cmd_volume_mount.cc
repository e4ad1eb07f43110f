#include "cli/cmd_volume_mount.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "cli/cli_common.h"
#include "mount/chunk_cache.h"
#include "mount/mount_tree.h"
#include "mount/prefetcher.h"
#include "mount/volume_fs.h"
#include "mount/volume_reader.h"

namespace deltakv::cli {
namespace {

// "4096", "64KiB", "64K", "16MiB", "2GiB", "1TiB" (powers of 1024). Sets has_unit.
StatusOr<uint64_t> ParseSize(const std::string& what, const std::string& text, bool* has_unit) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 15) {
    return InvalidArgument(what + " '" + text + "' is not a size (e.g. 4096, 64MiB, 8GiB)");
  }
  const uint64_t n = std::stoull(text.substr(0, digits));
  std::string unit = text.substr(digits);
  if (unit.size() == 3 && unit.substr(1) == "iB") unit = unit.substr(0, 1);
  if (has_unit != nullptr) *has_unit = !unit.empty();
  if (unit.empty() || unit == "B") return n;
  if (unit == "K") return n << 10;
  if (unit == "M") return n << 20;
  if (unit == "G") return n << 30;
  if (unit == "T") return n << 40;
  return InvalidArgument(what + " '" + text + "': unknown unit '" + unit +
                         "' (use B, KiB, MiB, GiB or TiB)");
}

// A size option's check at parse time (a value that is not a size is a usage error, exit 1).
CLI::Validator SizeText(const std::string& what) {
  return CLI::Validator(
      [what](std::string& text) -> std::string {
        StatusOr<uint64_t> n = ParseSize(what, text, nullptr);
        return n.ok() ? std::string() : std::string(n.status().message());
      },
      "");
}

std::string DefaultCacheDir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/deltakv/chunks";
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr && home[0] != '\0' ? home : "/tmp") +
         "/.cache/deltakv/chunks";
}

// Writes error lines to stderr or an append-only log file, one whole line at a time.
class ErrorLog {
 public:
  explicit ErrorLog(FILE* file) : file_(file) {}
  void Line(const std::string& text) {
    std::lock_guard<std::mutex> lock(mu_);
    std::fprintf(file_, "deltakv volume mount: error: %s\n", text.c_str());
    std::fflush(file_);
  }

 private:
  std::mutex mu_;
  FILE* file_;
};

struct FileCloser {
  void operator()(FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};

}  // namespace

void AddVolumeMountOptions(CLI::App& cmd, VolumeMountArgs& a) {
  cmd.add_option("REF", a.ref, "NS/NAME@sha256:... or NS/NAME:TAG")->required();
  cmd.add_option("DIR", a.dir, "Mount point (an existing, empty directory)")->required();
  cmd.add_option("--cache-dir", a.cache_dir,
                 "Chunk cache directory (default $XDG_CACHE_HOME/deltakv/chunks or "
                 "~/.cache/deltakv/chunks)");
  cmd.add_option("--cache-bytes", a.cache_bytes, "Bound on the chunk cache on disk")
      ->check(SizeText("--cache-bytes"))
      ->capture_default_str();
  cmd.add_option("--memory-bytes", a.memory_bytes, "Bound on the in-memory chunk cache")
      ->check(SizeText("--memory-bytes"))
      ->capture_default_str();
  cmd.add_option("--readahead", a.readahead,
                 "Chunks to prefetch past a sequential read, or bytes with a unit (64MiB); 0 = off")
      ->check(SizeText("--readahead"))
      ->capture_default_str();
  cmd.add_option("--readahead-inflight", a.readahead_inflight,
                 "Bound on the bytes being prefetched at once")
      ->check(SizeText("--readahead-inflight"))
      ->capture_default_str();
  cmd.add_option("--readahead-threads", a.readahead_threads, "Prefetch threads")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd.add_option("--log", a.log_file, "Append read errors to this file instead of stderr");
  cmd.add_flag("--allow-other", a.allow_other,
               "Let other users read the mount (FUSE allow_other; without it only the mounting "
               "user can; a user other than root needs user_allow_other in /etc/fuse.conf)");
}

Status RunVolumeMount(deltasync::Volumes& volumes, const VolumeMountArgs& a, bool json) {
  const auto start = std::chrono::steady_clock::now();
  mount::ChunkCacheOptions cache_options;
  cache_options.dir = a.cache_dir.empty() ? DefaultCacheDir() : a.cache_dir;
  ASSIGN_OR_RETURN(cache_options.disk_bytes, ParseSize("--cache-bytes", a.cache_bytes, nullptr));
  ASSIGN_OR_RETURN(cache_options.memory_bytes,
                   ParseSize("--memory-bytes", a.memory_bytes, nullptr));
  bool readahead_in_bytes = false;
  ASSIGN_OR_RETURN(uint64_t readahead, ParseSize("--readahead", a.readahead, &readahead_in_bytes));
  mount::ReadaheadOptions readahead_options;
  readahead_options.chunks = readahead_in_bytes ? 0 : readahead;
  readahead_options.bytes = readahead_in_bytes ? readahead : 0;
  mount::PrefetcherOptions prefetch_options;
  prefetch_options.threads = a.readahead_threads;
  ASSIGN_OR_RETURN(prefetch_options.max_inflight_bytes,
                   ParseSize("--readahead-inflight", a.readahead_inflight, nullptr));

  std::unique_ptr<FILE, FileCloser> log_file;
  if (!a.log_file.empty()) {
    log_file.reset(std::fopen(a.log_file.c_str(), "a"));
    if (!log_file) return IoError("cannot open --log '" + a.log_file + "'");
  }
  ErrorLog errors(log_file ? log_file.get() : stderr);

  // The manifest only: nothing proportional to the volume's size is read before serving.
  ASSIGN_OR_RETURN(deltasync::VolumeRef ref, deltasync::ParseVolumeRef(a.ref));
  ASSIGN_OR_RETURN(deltasync::VolumeVersion version, volumes.Show(ref));
  RETURN_IF_ERROR(mount::CheckMountPoint(a.dir));
  ASSIGN_OR_RETURN(mount::MountTree tree, mount::MountTree::Build(version.manifest));
  ASSIGN_OR_RETURN(
      auto cache,
      mount::ChunkCache::Open(cache_options, [&volumes](const deltasync::VolumeChunk& c) {
        return volumes.ReadChunk(c);
      }));
  std::unique_ptr<mount::Prefetcher> prefetcher;
  if (readahead > 0) prefetcher = std::make_unique<mount::Prefetcher>(*cache, prefetch_options);
  mount::VolumeReader reader(version.manifest, *cache, prefetcher.get(), readahead_options,
                             [&errors](const std::string& line) { errors.Line(line); });
  mount::ServeOptions serve;
  serve.fsname = "deltakv:" + ref.ns + "/" + ref.name;
  serve.mtime = version.created.value_or(0);
  serve.allow_other = a.allow_other;
  mount::VolumeFs fs(version.manifest, tree, reader, serve);

  const std::string digest = "sha256:" + version.ref.digest;
  Status st = fs.Serve(a.dir, [&] {
    const double ms = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - start).count();
    if (json) {
      PrintJson({{"ok", true},
                 {"ref", version.ref.ToString()},
                 {"digest", digest},
                 {"dir", a.dir},
                 {"files", tree.file_count()},
                 {"bytes", fs.total_bytes()},
                 {"cache_dir", cache_options.dir},
                 {"mount_ms", ms}});
    } else {
      std::printf("mounted %s at %s (%llu files, %s) in %.1f ms\n",
                  version.ref.ToString().c_str(), a.dir.c_str(),
                  static_cast<unsigned long long>(tree.file_count()),
                  HumanBytes(fs.total_bytes()).c_str(), ms);
    }
    std::fflush(stdout);
  });
  prefetcher.reset();  // joins the workers before the cache goes away
  return st;
}

}  // namespace deltakv::cli
