// deltakv frame apply BASE FRAME OUT
#include <cerrno>
#include <cstring>

#include "cli/cli_common.h"
#include "deltasync/applier.h"

namespace deltakv::cli {

void AddFrameScanCommand(CLI::App& frame, int* rc);

void AddFrameCommands(CLI::App& app, int* rc) {
  CLI::App* frame = app.add_subcommand("frame", "Low-level operations on zstd XOR frames");
  frame->require_subcommand(1);
  AddFrameScanCommand(*frame, rc);
  CLI::App* apply = frame->add_subcommand(
      "apply", "OUT = BASE XOR decode(FRAME); FRAME may hold several concatenated frames");
  struct Opts {
    std::string base, frames, out, decoder;
    uint32_t max_window_log = 31;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  apply->add_option("BASE", o->base, "Base file")->required();
  apply->add_option("FRAME", o->frames, "File of zstd frames")->required();
  apply->add_option("OUT", o->out, "Output file (written atomically)")->required();
  apply->add_option("--decoder", o->decoder, "XOR frame decoder (walker, the default, or libzstd)");
  apply->add_option("--max-window-log", o->max_window_log, "Refuse zstd windows above 2^N")
      ->capture_default_str()
      ->check(CLI::Range(10u, 31u));
  apply->add_flag("--json", o->json, "Print a JSON summary");
  apply->callback([o, rc] {
    const std::atomic<bool>* cancel = CatchInterrupts();
    auto r = deltasync::ApplyFramesToFile(o->base, o->frames, o->out, o->decoder, o->max_window_log,
                                          cancel);
    DieIfInterrupted();  // after the temporary output is removed
    if (!r.ok()) {
      *rc = ReportError("frame apply", r.status(), o->json);
      return;
    }
    if (o->json) {
      PrintJson({{"ok", true},
                 {"length", r->length},
                 {"frames", r->frames},
                 {"nonzero_bytes", r->nonzero_bytes},
                 {"seconds", r->seconds}});
    } else {
      PrintText("wrote %s: %llu bytes, %llu frames, %llu nonzero XOR bytes, %.3f s\n",
                o->out.c_str(), (unsigned long long)r->length, (unsigned long long)r->frames,
                (unsigned long long)r->nonzero_bytes, r->seconds);
    }
  });
}

}  // namespace deltakv::cli

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "deltasync/zstd_walker.h"

namespace deltakv::cli {

namespace {

// Counts maximal runs of nonzero bytes (the walker cuts a long run into pieces of 64 KiB, and
// each frame ends one: adjacent pieces are one run here), and prints (offset, value) pairs when
// dumping.
class ScanSink final : public deltasync::NonzeroSink {
 public:
  explicit ScanSink(bool dump) : dump_(dump) {}
  Status OnRun(uint64_t pos, std::span<const uint8_t> bytes) override {
    for (size_t i = 0; i < bytes.size(); ++i) {
      if (bytes[i] == 0) continue;
      if (runs_ == 0 || pos + i != run_end_) ++runs_;
      run_end_ = pos + i + 1;
      if (dump_) PrintText("%llu %u\n", static_cast<unsigned long long>(pos + i), bytes[i]);
    }
    return Status::Ok();
  }
  uint64_t runs() const { return runs_; }

 private:
  bool dump_;
  uint64_t runs_ = 0;
  uint64_t run_end_ = 0;  // the position after the last nonzero byte seen
};

// Streams a file through the walker in 1 MiB chunks, as a download would arrive.
StatusOr<deltasync::WalkStats> ScanFile(const std::string& path,
                                        const deltasync::WalkerOptions& opt, bool dump) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError("open '" + path + "': " + std::strerror(errno));
  ScanSink sink(dump);
  deltasync::SparseZstdWalker walker(sink, opt);
  std::vector<uint8_t> buf(1 << 20);
  Status s;
  for (;;) {
    ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      s = IoError("read '" + path + "': " + std::strerror(errno));
      break;
    }
    if (n == 0) {
      s = walker.Finish();
      break;
    }
    s = walker.Feed({buf.data(), static_cast<size_t>(n)});
    if (!s.ok()) break;
  }
  close(fd);
  if (!s.ok()) return s.WithPrefix("'" + path + "'");
  deltasync::WalkStats stats = walker.stats();
  stats.runs = sink.runs();
  return stats;
}

}  // namespace

void AddFrameScanCommand(CLI::App& frame, int* rc) {
  CLI::App* scan = frame.add_subcommand(
      "scan",
      "Walk zstd frames without a base file: decoded length, nonzero bytes, runs, checksum");
  struct Opts {
    std::vector<std::string> files;
    bool json = false, dump = false, no_checksum = false;
    uint32_t max_window_log = 31;
  };
  auto o = std::make_shared<Opts>();
  scan->add_option("FRAME", o->files,
                   "Files of zstd frames: each is scanned and reported, also after one that "
                   "fails; the exit code is the worst of them")
      ->required();
  scan->add_flag("--json", o->json,
                 "One JSON line per file (one that fails: ok false, its file and the error)");
  scan->add_flag("--dump", o->dump, "Print 'offset value' for every nonzero decoded byte");
  scan->add_flag("--no-checksum", o->no_checksum, "Do not verify content checksums");
  scan->add_option("--max-window-log", o->max_window_log, "Refuse zstd windows above 2^N")
      ->capture_default_str()
      ->check(CLI::Range(10u, 31u));
  scan->callback([o, rc] {
    deltasync::WalkerOptions opt;
    opt.limits.max_window_log = o->max_window_log;
    opt.limits.verify_checksum = !o->no_checksum;
    for (const std::string& f : o->files) {
      auto t0 = std::chrono::steady_clock::now();
      auto r = ScanFile(f, opt, o->dump);
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!r.ok()) {
        *rc = std::max(*rc, ReportError("frame scan", r.status(), o->json, {{"file", f}}));
        continue;
      }
      const char* checksum = r->checksums_skipped > 0    ? "skipped"
                             : r->checksums_verified > 0 ? "verified"
                                                         : "absent";
      if (o->json) {
        PrintJson({{"ok", true},
                   {"file", f},
                   {"decoded_length", r->decoded_length},
                   {"frames", r->frames},
                   {"skippable_frames", r->skippable_frames},
                   {"nonzero_bytes", r->nonzero_bytes},
                   {"runs", r->runs},
                   {"sequences", r->sequences},
                   {"checksum", checksum},
                   {"checksums_verified", r->checksums_verified},
                   {"seconds", secs}});
      } else if (!o->dump) {
        PrintText(
            "%s: %llu bytes decoded in %llu frames, %llu nonzero in %llu runs, "
            "checksum %s, %.3f s\n",
            f.c_str(), (unsigned long long)r->decoded_length, (unsigned long long)r->frames,
            (unsigned long long)r->nonzero_bytes, (unsigned long long)r->runs, checksum, secs);
      }
    }
  });
}

}  // namespace deltakv::cli
