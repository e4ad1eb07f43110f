// deltakv apply --parent DIR --delta DIR --out DIR
#include "cli/cli_common.h"
#include "deltasync/applier.h"

namespace deltakv::cli {

void AddApplyCommand(CLI::App& app, int* rc) {
  CLI::App* cmd = app.add_subcommand(
      "apply", "Rebuild the new checkpoint from the parent and a delta, verifying every tensor");
  struct Opts {
    deltasync::ApplyOptions a;
    bool json = false;
    bool no_verify_objects = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--parent", o->a.parent_dir, "Parent checkpoint directory")->required();
  cmd->add_option("--delta", o->a.delta_dir, "Delta directory")->required();
  cmd->add_option("--out", o->a.out_dir, "Output checkpoint directory (must not exist)")
      ->required();
  AddThreadsOption(cmd, &o->a.threads);
  cmd->add_option("--decoder", o->a.decoder, "XOR frame decoder (walker, the default, or libzstd)");
  cmd->add_option("--max-window-log", o->a.max_window_log, "Refuse zstd windows above 2^N")
      ->capture_default_str()
      ->check(CLI::Range(10u, 31u));
  cmd->add_flag("--no-verify-objects", o->no_verify_objects,
                "Skip the sha256 check of shard objects (frame checksums still apply)");
  cmd->add_flag("--json", o->json, "Print a JSON summary");
  cmd->callback([o, rc] {
    o->a.verify_objects = !o->no_verify_objects;
    o->a.progress = true;
    o->a.cancel = CatchInterrupts();
    auto r = deltasync::ApplyDelta(o->a);
    DieIfInterrupted();  // after the temporary output is removed
    if (!r.ok()) {
      *rc = ReportError("apply", r.status(), o->json);
      return;
    }
    const auto& s = *r;
    if (o->json) {
      PrintJson({{"ok", true},
                 {"parent_version", s.parent_version},
                 {"version", s.version},
                 {"decoder", s.decoder},
                 {"tensors", s.tensors},
                 {"tensors_changed", s.tensors_changed},
                 {"checkpoint_bytes", s.checkpoint_bytes},
                 {"compressed_bytes", s.compressed_bytes},
                 {"nonzero_bytes", s.nonzero_bytes},
                 {"frames", s.frames},
                 {"seconds", s.seconds}});
      return;
    }
    PrintText("applied %s -> %s into %s (decoder %s)\n", s.parent_version.c_str(),
              s.version.c_str(), o->a.out_dir.c_str(), s.decoder.c_str());
    PrintText("  tensors changed   %llu / %llu, all verified\n",
              (unsigned long long)s.tensors_changed, (unsigned long long)s.tensors);
    PrintText("  checkpoint bytes  %s\n", HumanBytes(s.checkpoint_bytes).c_str());
    PrintText("  compressed bytes  %s in %llu frames\n", HumanBytes(s.compressed_bytes).c_str(),
              (unsigned long long)s.frames);
    PrintText("  nonzero bytes     %llu\n", (unsigned long long)s.nonzero_bytes);
    PrintText("  time              %.3f s\n", s.seconds);
  });
}

}  // namespace deltakv::cli
