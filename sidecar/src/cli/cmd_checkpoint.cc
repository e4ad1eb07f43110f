// deltakv checkpoint manifest DIR
#include "base/file_util.h"
#include "cli/cli_common.h"
#include "deltasync/checkpoint.h"

namespace deltakv::cli {

void AddSyntheticCommands(CLI::App& group, int* rc);

void AddCheckpointCommands(CLI::App& app, int* rc) {
  CLI::App* group = app.add_subcommand("checkpoint", "Checkpoint directories");
  group->require_subcommand(1);
  AddSyntheticCommands(*group, rc);
  CLI::App* man = group->add_subcommand(
      "manifest",
      "Write DIR/manifest.json: every tensor's dtype, shape, file, byte range, Adler-32");
  struct Opts {
    std::string dir;
    std::string version;
    unsigned threads = 0;
    bool json = false;
    bool stdout_only = false;
  };
  auto o = std::make_shared<Opts>();
  man->add_option("DIR", o->dir, "Directory of .safetensors files")->required();
  man->add_option("--version", o->version,
                  "Version id to record (default: the directory's name, also for DIR '.'; a "
                  "manifest.json already in DIR does not count)")
      ->check(NonEmpty());
  AddThreadsOption(man, &o->threads);
  man->add_flag("--json", o->json, "Print a JSON summary");
  man->add_flag("--stdout", o->stdout_only, "Print the manifest instead of writing it");
  man->callback([o, rc] {
    using namespace deltasync;
    auto ckpt = Checkpoint::Open(o->dir, MappedFile::Shrink::kReadZeros);
    if (!ckpt.ok()) {
      *rc = ReportError("checkpoint manifest", ckpt.status(), o->json);
      return;
    }
    std::string version = o->version;
    if (version.empty()) version = CheckpointVersionId(o->dir);
    auto m = ComputeCheckpointManifest(*ckpt, version, o->threads, /*progress=*/true);
    if (!m.ok()) {
      *rc = ReportError("checkpoint manifest", m.status(), o->json);
      return;
    }
    std::string text = CheckpointManifestToJson(*m);
    if (o->stdout_only) {
      WriteStdout(text);
      return;
    }
    std::string path = o->dir + "/" + kManifestFileName;
    Status s = WriteFileAtomic(path, text);
    if (!s.ok()) {
      *rc = ReportError("checkpoint manifest", s, o->json);
      return;
    }
    if (o->json) {
      PrintJson({{"ok", true},
                 {"manifest", path},
                 {"version", version},
                 {"files", m->files.size()},
                 {"tensors", m->tensors.size()},
                 {"bytes", ckpt->total_tensor_bytes()}});
    } else {
      PrintText("wrote %s: %zu tensors in %zu files, %s\n", path.c_str(), m->tensors.size(),
                m->files.size(), HumanBytes(ckpt->total_tensor_bytes()).c_str());
    }
  });
}

}  // namespace deltakv::cli

#include "deltasync/synthetic.h"

namespace deltakv::cli {

// deltakv checkpoint generate / mutate: synthetic checkpoints for demos and benchmarks.
// Writes an output directory through a staging directory renamed into place: an existing
// output is refused (FailedPrecondition: exit 2) and a run that fails leaves nothing behind.
template <class Write>
Status WriteNewDirectory(const std::string& out, Write write) {
  ASSIGN_OR_RETURN(StagingDir staging, StagingDir::Create(out));
  RETURN_IF_ERROR(write(staging.path()));
  return staging.Commit();
}

void AddSyntheticCommands(CLI::App& group, int* rc) {
  struct Opts {
    std::string out, parent;
    uint64_t size_mib = 64;
    unsigned files = 2;
    unsigned experts = 0;
    uint64_t seed = 1;
    double density = 0.01;
    double tensor_fraction = 1.0;
    std::string step;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* gen = group.add_subcommand(
      "generate", "Write a synthetic transformer-like checkpoint (bf16 weights, f32 norms)");
  gen->add_option("--out", o->out, "Output directory (must not exist)")->required();
  gen->add_option("--size-mib", o->size_mib, "Approximate size, MiB")
      ->check(CLI::Range(uint64_t{0}, kMaxMib))
      ->capture_default_str();
  gen->add_option("--files", o->files, "Number of safetensors files (1 to 99999)")
      ->check(CLI::Range(1u, 99999u))
      ->capture_default_str();
  gen->add_option("--seed", o->seed, "Random seed")->capture_default_str();
  gen->add_option("--experts", o->experts,
                  "Mixture-of-experts layers with this many experts (stacked [E, ...] tensors); "
                  "0: dense MLPs")
      ->check(CLI::Range(0u, 1024u))
      ->capture_default_str();
  gen->add_flag("--json", o->json, "Print a JSON summary");
  gen->callback([o, rc] {
    auto layout = deltasync::ModelLikeLayout(o->size_mib << 20, o->files, o->experts);
    Status s = WriteNewDirectory(o->out, [&](const std::string& dir) {
      return deltasync::GenerateCheckpoint(dir, layout, o->seed);
    });
    if (!s.ok()) {
      *rc = ReportError("checkpoint generate", s, o->json);
      return;
    }
    if (o->json)
      PrintJson({{"ok", true}, {"out", o->out}});
    else
      PrintText("generated checkpoint in %s\n", o->out.c_str());
  });
  CLI::App* mut = group.add_subcommand(
      "mutate", "Write a copy of a checkpoint with a fraction of elements changed by 1-2 ulp");
  mut->add_option("--parent", o->parent, "Parent checkpoint directory")->required();
  mut->add_option("--out", o->out, "Output directory (must not exist)")->required();
  mut->add_option("--density", o->density, "Fraction of elements changed")
      ->capture_default_str()
      ->check(FiniteRange(0.0, 1.0));
  mut->add_option("--tensor-fraction", o->tensor_fraction,
                  "Fraction of tensors that change (picked by name and seed); --density applies "
                  "within them")
      ->capture_default_str()
      ->check(CLI::Range(1e-9, 1.0));
  mut->add_option("--seed", o->seed, "Random seed")->capture_default_str();
  mut->add_option("--step-metadata", o->step,
                  "Record this in the files' __metadata__ (changes their headers)");
  mut->add_flag("--json", o->json, "Print a JSON summary");
  mut->callback([o, rc] {
    deltasync::MutationOptions mo;
    mo.density = o->density;
    mo.tensor_fraction = o->tensor_fraction;
    mo.seed = o->seed;
    mo.step_metadata = o->step;
    StatusOr<deltasync::MutationStats> r = Internal("not run");
    Status s = WriteNewDirectory(o->out, [&](const std::string& dir) {
      r = deltasync::MutateCheckpoint(o->parent, dir, mo);
      return r.status();
    });
    if (!s.ok()) {
      *rc = ReportError("checkpoint mutate", s, o->json);
      return;
    }
    if (o->json) {
      PrintJson({{"ok", true},
                 {"out", o->out},
                 {"elements_changed", r->elements_changed},
                 {"bytes", r->bytes}});
    } else {
      PrintText("wrote %s: %llu elements changed in %s\n", o->out.c_str(),
                (unsigned long long)r->elements_changed, HumanBytes(r->bytes).c_str());
    }
  });
}

}  // namespace deltakv::cli
