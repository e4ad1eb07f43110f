// deltakv frame apply BASE FRAME OUT
#include "cli/cli_common.h"
#include "deltasync/applier.h"

namespace deltakv::cli {

void AddFrameCommands(CLI::App& app, int* rc) {
  CLI::App* frame = app.add_subcommand("frame", "Low-level operations on zstd XOR frames");
  frame->require_subcommand(1);
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
  apply->add_option("--decoder", o->decoder, "XOR frame decoder (default, libzstd, walker)");
  apply->add_option("--max-window-log", o->max_window_log, "Refuse zstd windows above 2^N")
      ->capture_default_str()
      ->check(CLI::Range(10u, 31u));
  apply->add_flag("--json", o->json, "Print a JSON summary");
  apply->callback([o, rc] {
    auto r = deltasync::ApplyFramesToFile(o->base, o->frames, o->out, o->decoder,
                                          o->max_window_log);
    if (!r.ok()) {
      *rc = ReportError("frame apply", r.status(), o->json);
      return;
    }
    if (o->json) {
      PrintJson({{"ok", true}, {"length", r->length}, {"frames", r->frames},
                 {"nonzero_bytes", r->nonzero_bytes}, {"seconds", r->seconds}});
    } else {
      std::printf("wrote %s: %llu bytes, %llu frames, %llu nonzero XOR bytes, %.3f s\n",
                  o->out.c_str(), (unsigned long long)r->length, (unsigned long long)r->frames,
                  (unsigned long long)r->nonzero_bytes, r->seconds);
    }
  });
}

}  // namespace deltakv::cli
