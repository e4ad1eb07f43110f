// Publish and apply throughput on a generated checkpoint at several element densities, next to
// a plain copy of the same bytes (the cost of shipping and writing the full new checkpoint)
// measured in the same run. One JSON line per result.
//
//   delta_bench [--size-mib 2048] [--densities 0.001,0.01,0.05] [--threads 0] [--level 3]
//               [--dir $TMPDIR] [--decoders walker,libzstd]
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <vector>

#include "base/mapped_file.h"
#include "base/parallel.h"
#include "bench_util.h"
#include "deltasync/applier.h"
#include "deltasync/checkpoint.h"
#include "deltasync/publisher.h"
#include "deltasync/synthetic.h"

using namespace deltakv;
using namespace deltakv::deltasync;
namespace fs = std::filesystem;

namespace {

void Die(const Status& s, const char* what) {
  std::fprintf(stderr, "delta_bench: %s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

// Baseline: copy every file of `src` into `dst` through the same write path apply uses
// (mapped output file, fsync, rename), one file per thread as apply parallelizes tensors.
// Returns seconds.
double CopyCheckpoint(const std::string& src, const std::string& dst, unsigned threads) {
  fs::create_directories(dst);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(src)) files.push_back(e.path());
  bench::Stopwatch sw;
  Status s = ParallelFor(files.size(), threads, [&](size_t i) -> Status {
    ASSIGN_OR_RETURN(MappedFile in, MappedFile::OpenReadOnly(files[i].string()));
    ASSIGN_OR_RETURN(MappedOutputFile out,
                     MappedOutputFile::Create(dst + "/" + files[i].filename().string(), in.size()));
    if (in.size() > 0) std::memcpy(out.bytes().data(), in.bytes().data(), in.size());
    return out.Commit();
  });
  if (!s.ok()) Die(s, "copy");
  return sw.Seconds();
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"deltakv publish/apply benchmark"};
  uint64_t size_mib = 2048;
  std::string densities = "0.001,0.01,0.05";
  std::string decoders = "walker,libzstd";
  unsigned threads = 0;
  int level = 3;
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = tmp ? tmp : "/tmp";
  app.add_option("--size-mib", size_mib);
  app.add_option("--densities", densities);
  app.add_option("--decoders", decoders);
  app.add_option("--threads", threads);
  app.add_option("--level", level);
  app.add_option("--dir", dir);
  CLI11_PARSE(app, argc, argv);

  bench::PrintEnvironment("delta_bench");
  std::string root = dir + "/deltakv-bench-" + std::to_string(getpid());
  fs::create_directories(root);
  Status s = GenerateCheckpoint(root + "/v1", ModelLikeLayout(size_mib << 20, 4), 1);
  if (!s.ok()) Die(s, "generate");
  auto parent = Checkpoint::Open(root + "/v1");
  if (!parent.ok()) Die(parent.status(), "open");
  const double bytes = static_cast<double>(parent->total_tensor_bytes());
  const double gb = bytes / 1e9;

  double copy_s = CopyCheckpoint(root + "/v1", root + "/copy", threads);
  fs::remove_all(root + "/copy");
  bench::PrintResult({{"bench", "delta_bench"},
                      {"op", "copy_baseline"},
                      {"bytes", bytes},
                      {"seconds", copy_s},
                      {"GBps", gb / copy_s}});

  for (const std::string& dstr : Split(densities)) {
    double density = std::stod(dstr);
    MutationOptions mo;
    mo.density = density;
    mo.seed = 2;
    auto mut = MutateCheckpoint(root + "/v1", root + "/v2", mo);
    if (!mut.ok()) Die(mut.status(), "mutate");
    PublishOptions po;
    po.parent_dir = root + "/v1";
    po.new_dir = root + "/v2";
    po.out_dir = root + "/delta";
    po.level = level;
    po.threads = threads;
    auto pub = PublishDelta(po);
    if (!pub.ok()) Die(pub.status(), "publish");
    // The baseline again, right next to each measurement, so drift shows.
    double copy_again = CopyCheckpoint(root + "/v2", root + "/copy", threads);
    fs::remove_all(root + "/copy");
    bench::PrintResult({{"bench", "delta_bench"},
                        {"op", "publish"},
                        {"element_density", density},
                        {"byte_density", pub->density()},
                        {"level", level},
                        {"bytes", bytes},
                        {"compressed_bytes", pub->compressed_bytes},
                        {"compression_ratio", bytes / static_cast<double>(pub->compressed_bytes)},
                        {"seconds", pub->seconds},
                        {"GBps", gb / pub->seconds},
                        {"copy_seconds", copy_again},
                        {"copy_GBps", gb / copy_again},
                        {"vs_copy", copy_again / pub->seconds}});
    for (const std::string& dec : Split(decoders)) {
      ApplyOptions ao;
      ao.parent_dir = root + "/v1";
      ao.delta_dir = root + "/delta";
      ao.out_dir = root + "/out";
      ao.threads = threads;
      ao.decoder = dec;
      auto app_r = ApplyDelta(ao);
      if (!app_r.ok()) Die(app_r.status(), "apply");
      fs::remove_all(root + "/out");
      bench::PrintResult({{"bench", "delta_bench"},
                          {"op", "apply"},
                          {"decoder", dec},
                          {"element_density", density},
                          {"byte_density", pub->density()},
                          {"bytes", bytes},
                          {"seconds", app_r->seconds},
                          {"GBps", gb / app_r->seconds},
                          {"copy_seconds", copy_again},
                          {"copy_GBps", gb / copy_again},
                          {"vs_copy", copy_again / app_r->seconds}});
    }
    fs::remove_all(root + "/v2");
    fs::remove_all(root + "/delta");
  }
  fs::remove_all(root);
  return 0;
}
