// deltakv publish --parent DIR --new DIR --out DIR ...
#include "cli/cli_common.h"
#include "deltasync/publisher.h"

namespace deltakv::cli {

void AddPublishCommand(CLI::App& app, int* rc) {
  CLI::App* cmd = app.add_subcommand(
      "publish", "Write the delta parent -> new: zstd(parent XOR new) frames plus manifest.json");
  struct Opts {
    deltasync::PublishOptions p;
    uint64_t frame_mib = 64;
    uint64_t shard_mib = 1024;
    bool json = false;
    bool no_checkpoint = false;
    std::string sequences = "runs";
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--parent", o->p.parent_dir, "Parent checkpoint directory")->required();
  cmd->add_option("--new", o->p.new_dir, "New checkpoint directory")->required();
  cmd->add_option("--out", o->p.out_dir, "Delta output directory (must not exist)")->required();
  cmd->add_option("--parent-version", o->p.parent_version,
                  "Parent version id (default: the --parent directory's name)")
      ->check(NonEmpty());
  cmd->add_option("--version", o->p.version, "New version id (default: the --new directory's name)")
      ->check(NonEmpty());
  cmd->add_option("--level", o->p.level,
                  "zstd level (with --sequences runs: the entropy stage's settings only)")
      ->capture_default_str();
  cmd->add_option("--sequences", o->sequences,
                  "How frames are parsed into zstd sequences: runs (one per run of nonzero "
                  "bytes: fewer to walk, smaller on sparse deltas) or zstd (libzstd's match "
                  "finder at --level)")
      ->check(CLI::IsMember({"runs", "zstd"}))
      ->capture_default_str();
  AddThreadsOption(cmd, &o->p.threads);
  cmd->add_option("--frame-mib", o->frame_mib, "Dense bytes per frame, MiB")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{4096}));
  cmd->add_option("--shard-mib", o->shard_mib, "Target shard object size, MiB")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  cmd->add_flag("--no-checkpoint", o->no_checkpoint,
                "Omit the new checkpoint's description (headers, all checksums)");
  cmd->add_flag("--json", o->json, "Print a JSON summary");
  cmd->callback([o, rc] {
    o->p.frame_bytes = o->frame_mib << 20;
    o->p.shard_bytes = o->shard_mib << 20;
    o->p.include_checkpoint = !o->no_checkpoint;
    o->p.sequences = o->sequences == "zstd" ? deltasync::FrameSequences::kZstd
                                            : deltasync::FrameSequences::kXorRuns;
    o->p.progress = true;
    o->p.cancel = CatchInterrupts();
    auto r = deltasync::PublishDelta(o->p);
    DieIfInterrupted();  // after the temporary output is removed
    if (!r.ok()) {
      *rc = ReportError("publish", r.status(), o->json);
      return;
    }
    const auto& s = *r;
    if (o->json) {
      PrintJson({{"ok", true},
                 {"parent_version", s.parent_version},
                 {"version", s.version},
                 {"tensors", s.tensors},
                 {"tensors_changed", s.tensors_changed},
                 {"checkpoint_bytes", s.checkpoint_bytes},
                 {"dense_bytes", s.dense_bytes},
                 {"compressed_bytes", s.compressed_bytes},
                 {"nonzero_bytes", s.nonzero_bytes},
                 {"density", s.density()},
                 {"frames", s.frames},
                 {"objects", s.objects},
                 {"seconds", s.seconds}});
      return;
    }
    PrintText("published %s -> %s into %s\n", s.parent_version.c_str(), s.version.c_str(),
              o->p.out_dir.c_str());
    PrintText("  tensors changed   %llu / %llu\n", (unsigned long long)s.tensors_changed,
              (unsigned long long)s.tensors);
    PrintText("  checkpoint bytes  %s\n", HumanBytes(s.checkpoint_bytes).c_str());
    PrintText("  dense bytes       %s in %llu frames\n", HumanBytes(s.dense_bytes).c_str(),
              (unsigned long long)s.frames);
    PrintText("  compressed bytes  %s in %llu objects\n", HumanBytes(s.compressed_bytes).c_str(),
              (unsigned long long)s.objects);
    PrintText("  nonzero density   %.4f %%\n", 100.0 * s.density());
    PrintText("  time              %.3f s\n", s.seconds);
  });
}

}  // namespace deltakv::cli
