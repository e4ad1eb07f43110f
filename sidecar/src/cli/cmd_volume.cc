// deltakv volume push | sync | ls | show | tag | pull | mount | rm | restore | gc
// Sealed, digest-addressed volumes (deltasync/VOLUME.md) in a store named by --store.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "cli/cli_common.h"
#include "cli/cmd_volume_mount.h"
#include "deltasync/volume.h"
#include "deltasync/volume_source.h"
#include "store/open_volume_store.h"
#include "store/s3_file_source.h"

namespace deltakv::cli {
namespace {

using deltasync::VolumeRef;
using nlohmann::json;

struct Common {
  std::string store;  // --store or $DELTAKV_VOLUME_STORE
  bool json = false;
  bool quiet = false;
  // --retention-days or $DELTAKV_VOLUME_RETENTION_DAYS, on the commands that use the window;
  // empty: the library's default (7 days).
  std::string retention_days;
};

inline constexpr double kMaxRetentionDays = 36500;

// Checks a retention window given in days (fractions allowed): "" and, when `seconds` is
// given, the window in whole seconds; otherwise what is wrong.
std::string CheckRetentionDays(const std::string& text, int64_t* seconds) {
  char* end = nullptr;
  const double days = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(days)) {
    return "retention '" + text + "' is not a number of days";
  }
  if (days < 0 || days > kMaxRetentionDays) {
    return "retention of " + text + " days is outside 0.." +
           std::to_string(static_cast<int>(kMaxRetentionDays));
  }
  if (seconds != nullptr) *seconds = std::llround(days * 86400);
  return "";
}

// Adds --retention-days to a command whose result depends on the retention window.
void AddRetentionOption(CLI::App& cmd, Common& common) {
  cmd.add_option("--retention-days", common.retention_days,
                 "How long a removed version stays restorable, in days (fractions allowed; "
                 "default 7; 0: not at all). Not stored with the version: give rm, restore, ls "
                 "and gc the same value")
      ->envname("DELTAKV_VOLUME_RETENTION_DAYS")
      ->check(CLI::Validator([](std::string& text) { return CheckRetentionDays(text, nullptr); },
                             "DAYS", "retention days"));
}

// Prints a progress line to stderr at most twice a second, and always the last one.
class Progress {
 public:
  Progress(const Common& c, std::string command) : quiet_(c.quiet), command_(std::move(command)) {}
  void Update(bool last, const std::string& text) {
    if (quiet_) return;
    const auto now = std::chrono::steady_clock::now();
    if (!last && printed_ && now - last_ < std::chrono::milliseconds(500)) return;
    last_ = now;
    printed_ = true;
    std::fprintf(stderr, "deltakv volume %s: %s\n", command_.c_str(), text.c_str());
  }

 private:
  bool quiet_;
  std::string command_;
  bool printed_ = false;
  std::chrono::steady_clock::time_point last_{};
};

std::string Digest(const std::string& hex) { return "sha256:" + hex; }

// The store of `c`; only commands that write a new version (`creates`) create a directory
// store that does not exist yet.
StatusOr<std::unique_ptr<deltasync::VolumeStore>> OpenStore(const Common& c, bool creates) {
  if (c.store.empty()) {
    return InvalidArgument("no volume store: pass --store URL or set DELTAKV_VOLUME_STORE");
  }
  return sidecar::OpenVolumeStoreUrl(
      c.store, creates ? sidecar::StoreDir::kCreate : sidecar::StoreDir::kMustExist);
}

// Parses NS/NAME (no tag or digest).
Status ParseVolumeName(const std::string& text, std::string& ns, std::string& name) {
  const size_t slash = text.find('/');
  if (slash == std::string::npos) {
    return InvalidArgument("'" + text + "' is not NS/NAME (no '/')");
  }
  ns = text.substr(0, slash);
  name = text.substr(slash + 1);
  RETURN_IF_ERROR(deltasync::ValidateVolumeName("namespace", ns).WithPrefix("'" + text + "'"));
  return deltasync::ValidateVolumeName("name", name).WithPrefix("'" + text + "'");
}

json PushJson(const deltasync::PushResult& r, const std::string& tag) {
  json j = {{"ok", true},
            {"ref", r.ref.ToString()},
            {"digest", Digest(r.ref.digest)},
            {"files", r.files},
            {"bytes", r.bytes},
            {"chunks_total", r.chunks_total},
            {"chunks_uploaded", r.chunks_uploaded},
            {"bytes_uploaded", r.bytes_uploaded},
            {"chunks_xor", r.chunks_xor},
            {"bytes_xor", r.bytes_xor}};
  if (!tag.empty()) j["tag"] = tag;
  return j;
}

void PrintPushed(const char* verb, const deltasync::PushResult& r, const std::string& tag) {
  std::printf("%s %s\n", verb, r.ref.ToString().c_str());
  std::printf("  files     %llu, %s\n", static_cast<unsigned long long>(r.files),
              HumanBytes(r.bytes).c_str());
  std::printf("  uploaded  %llu of %llu chunks, %s\n",
              static_cast<unsigned long long>(r.chunks_uploaded),
              static_cast<unsigned long long>(r.chunks_total), HumanBytes(r.bytes_uploaded).c_str());
  if (r.chunks_xor > 0) {
    std::printf("  as XOR    %llu chunks against the parent, %s\n",
                static_cast<unsigned long long>(r.chunks_xor), HumanBytes(r.bytes_xor).c_str());
  }
  if (!tag.empty()) std::printf("  tag       %s\n", tag.c_str());
}

std::function<void(const deltasync::PushProgress&)> ChunkProgress(
    std::shared_ptr<Progress> progress) {
  return [progress](const deltasync::PushProgress& p) {
    progress->Update(p.chunks_done == p.chunks_total,
                     std::to_string(p.chunks_done) + "/" + std::to_string(p.chunks_total) +
                         " chunks checked, " + HumanBytes(p.bytes_uploaded) + " uploaded");
  };
}

// Registers a subcommand whose callback runs `body` with an open store and Volumes; errors
// are reported under "volume <name>".
template <typename Body>
CLI::App* Add(CLI::App& group, const std::shared_ptr<Common>& common, int* rc, const char* name,
              const char* help, Body body) {
  CLI::App* cmd = group.add_subcommand(name, help);
  cmd->add_flag("--json", common->json, "Print one JSON object on stdout");
  cmd->add_flag("-q,--quiet", common->quiet, "No progress lines on stderr");
  cmd->callback([common, rc, name, body] {
    const std::string what = std::string("volume ") + name;
    const std::string_view command = name;
    auto store = OpenStore(*common, command == "push" || command == "sync");
    if (!store.ok()) {
      *rc = ReportError(what, store.status(), common->json);
      return;
    }
    deltasync::VolumesOptions options;
    if (!common->retention_days.empty()) {
      (void)CheckRetentionDays(common->retention_days, &options.retention_s);  // valid: checked
    }
    deltasync::Volumes volumes(**store, options);
    Status st = body(volumes, **store);
    if (!st.ok()) *rc = ReportError(what, st, common->json);
  });
  return cmd;
}

// Resolves --parent for a push into NS/NAME: the digest of a live version of that volume.
StatusOr<std::string> ResolveParent(deltasync::Volumes& volumes, const std::string& parent_text,
                                    const std::string& volume, const std::string& ns,
                                    const std::string& name) {
  ASSIGN_OR_RETURN(VolumeRef parent, deltasync::ParseVolumeRef(parent_text));
  if (parent.ns != ns || parent.name != name) {
    return InvalidArgument("--parent " + parent_text + " is not a version of " + volume);
  }
  ASSIGN_OR_RETURN(std::string digest, volumes.Resolve(parent));
  RETURN_IF_ERROR(volumes.Show(VolumeRef{ns, name, digest, ""}).status());
  return digest;
}

struct SyncArgs {
  std::string source, volume, from, tag, parent;
  uint64_t piece_size = deltasync::kDefaultPieceSize;
  bool no_xor = false;
  uint32_t max_xor_chain = 8;
  unsigned threads = 0;
  std::vector<const CLI::Option*> plain_only;  // options a copy of a version refuses
};

// sync of plain files: an s3:// prefix streamed through Volumes::PushFrom, or a file:// directory
// pushed as `push DIR` would.
Status SyncPlain(deltasync::Volumes& volumes, const SyncArgs& o, const Common& common,
                 const std::string& ns, const std::string& name) {
  if (!o.from.empty()) {
    return InvalidArgument("--from names the store of a version SOURCE; '" + o.source +
                           "' is a plain source, read directly");
  }
  deltasync::PushOptions push;
  push.tag = o.tag;
  push.piece_size = o.piece_size;
  push.xor_with_parent = !o.no_xor;
  push.max_xor_chain = o.max_xor_chain;
  push.threads = o.threads;
  if (!o.parent.empty()) {
    ASSIGN_OR_RETURN(push.parent, ResolveParent(volumes, o.parent, o.volume, ns, name));
  }
  auto progress = std::make_shared<Progress>(common, "sync");
  deltasync::PushResult r;
  if (o.source.rfind("s3://", 0) == 0) {
    ASSIGN_OR_RETURN(auto source, sidecar::OpenS3FileSource(o.source));
    deltasync::PushFromOptions options;
    options.push = push;
    options.progress = [progress](const deltasync::SourceProgress& p) {
      progress->Update(p.files_done == p.files_total,
                       std::to_string(p.files_done) + "/" + std::to_string(p.files_total) +
                           " files, " + HumanBytes(p.bytes_read) + " of " +
                           HumanBytes(p.bytes_total) + " read, " + std::to_string(p.chunks_done) +
                           " chunks checked, " + HumanBytes(p.bytes_uploaded) + " uploaded");
    };
    ASSIGN_OR_RETURN(r, volumes.PushFrom(*source, ns, name, options));
  } else if (o.source.rfind("file://", 0) == 0) {
    const std::string dir = o.source.substr(7);
    if (dir.empty() || dir[0] != '/') {
      return InvalidArgument("'" + o.source + "' is not file:///ABSOLUTE/PATH");
    }
    push.progress = ChunkProgress(progress);
    ASSIGN_OR_RETURN(r, volumes.Push(dir, ns, name, push));
  } else {
    return InvalidArgument("plain source '" + o.source +
                           "' is not s3:// or file:// (an http(s):// URL serves a volume store: "
                           "sync a version from it with --from)");
  }
  if (common.json) {
    json j = PushJson(r, o.tag);
    j["source"] = o.source;
    if (!push.parent.empty()) j["parent"] = Digest(push.parent);
    PrintJson(j);
  } else {
    PrintPushed("synced", r, o.tag);
  }
  return Status::Ok();
}

json ListingJson(const deltasync::VolumeListing& l) {
  json versions = json::array(), tags = json::array(), removed = json::array();
  for (const std::string& v : l.versions) versions.push_back(Digest(v));
  for (const auto& t : l.tags) {
    tags.push_back({{"tag", t.tag}, {"digest", Digest(t.digest)}, {"generation", t.generation}});
  }
  for (const auto& r : l.removed) {
    removed.push_back({{"digest", Digest(r.digest)},
                       {"removed_at", r.removed_at},
                       {"restorable_until", r.restorable_until}});
  }
  return {{"ns", l.ns},     {"name", l.name},      {"versions", versions},
          {"tags", tags},   {"removed", removed}};
}

}  // namespace

void AddVolumeCommands(CLI::App& app, int* rc) {
  CLI::App* group = app.add_subcommand(
      "volume", "Sealed, digest-addressed volumes: push, sync, ls, show, tag, pull, mount, rm, restore, gc");
  group->require_subcommand(1);
  group->fallthrough();
  auto common = std::make_shared<Common>();
  group->add_option("--store", common->store,
                    "Volume store: s3://BUCKET[/PREFIX], dir:///path or a directory path "
                    "(env DELTAKV_VOLUME_STORE; S3 settings from the AWS_* variables and "
                    "~/.aws, see README)")
      ->envname("DELTAKV_VOLUME_STORE");

  // push DIR NS/NAME
  {
    struct Opts {
      std::string dir, volume, tag, parent, parent_dir;
      uint64_t piece_size = deltasync::kDefaultPieceSize;
      bool no_xor = false;
      uint32_t max_xor_chain = 8;
      unsigned threads = 0;
    };
    auto o = std::make_shared<Opts>();
    CLI::App* cmd = Add(
        *group, common, rc, "push", "Seal the regular files under DIR as a new version of NS/NAME",
        [o, common](deltasync::Volumes& volumes, deltasync::VolumeStore&) -> Status {
          std::string ns, name;
          RETURN_IF_ERROR(ParseVolumeName(o->volume, ns, name));
          deltasync::PushOptions options;
          options.tag = o->tag;
          options.piece_size = o->piece_size;
          options.xor_with_parent = !o->no_xor;
          options.threads = o->threads;
          options.max_xor_chain = o->max_xor_chain;
          options.parent_dir = o->parent_dir;
          if (!o->parent_dir.empty() && o->parent.empty()) {
            return InvalidArgument("--parent-dir needs --parent");
          }
          if (!o->parent.empty()) {
            ASSIGN_OR_RETURN(options.parent,
                             ResolveParent(volumes, o->parent, o->volume, ns, name));
          }
          auto progress = std::make_shared<Progress>(*common, "push");
          options.progress = ChunkProgress(progress);
          ASSIGN_OR_RETURN(deltasync::PushResult r, volumes.Push(o->dir, ns, name, options));
          if (common->json) {
            json j = PushJson(r, o->tag);
            if (!options.parent.empty()) j["parent"] = Digest(options.parent);
            PrintJson(j);
          } else {
            PrintPushed("pushed", r, o->tag);
          }
          return Status::Ok();
        });
    cmd->add_option("DIR", o->dir, "Directory to push")->required();
    cmd->add_option("VOLUME", o->volume, "NS/NAME")->required();
    cmd->add_option("--tag", o->tag, "Move this tag to the new version");
    cmd->add_option("--parent", o->parent,
                    "Record this version of the same volume (REF) as the parent, and store "
                    "changed chunks as zstd(parent XOR new) where that is at most half their size");
    cmd->add_flag("--no-xor", o->no_xor, "With --parent: store every new chunk whole");
    cmd->add_option("--max-xor-chain", o->max_xor_chain,
                    "Longest chain of XOR deltas a chunk may need; longer ones are stored whole")
        ->capture_default_str()
        ->check(CLI::Range(1, static_cast<int>(deltasync::kMaxXorChain)));
    cmd->add_option("--parent-dir", o->parent_dir,
                    "Local copy of the parent's files, read instead of the store where it verifies");
    cmd->add_option("--threads", o->threads,
                    "Threads that hash and upload (0: one per CPU to hash, 8 uploads at once)")
        ->capture_default_str()
        ->check(CLI::Range(0, 256));
    cmd->add_option("--piece-size", o->piece_size,
                    "Bytes per piece of a large safetensors tensor")
        ->capture_default_str();
  }

  // sync SOURCE NS/NAME [--from STORE]
  {
    auto o = std::make_shared<SyncArgs>();
    CLI::App* cmd = Add(
        *group, common, rc, "sync",
        "Copy version SOURCE from the store --from into NS/NAME of --store, or seal the plain "
        "files under an s3:// or file:// SOURCE as a new version of NS/NAME",
        [o, common](deltasync::Volumes& volumes, deltasync::VolumeStore&) -> Status {
          std::string ns, name;
          RETURN_IF_ERROR(ParseVolumeName(o->volume, ns, name));
          if (o->source.find("://") != std::string::npos) {
            return SyncPlain(volumes, *o, *common, ns, name);
          }
          if (o->from.empty()) {
            return InvalidArgument("SOURCE '" + o->source +
                                   "' is a version reference: --from STORE names the store it "
                                   "is in (plain files are synced from an s3:// or file:// URL)");
          }
          for (const CLI::Option* option : o->plain_only) {
            if (option->count() > 0) {
              return InvalidArgument(option->get_name() +
                                     " applies to a plain source, not to a copy of a version");
            }
          }
          ASSIGN_OR_RETURN(VolumeRef source, deltasync::ParseVolumeRef(o->source));
          ASSIGN_OR_RETURN(auto from, sidecar::OpenVolumeStoreUrl(o->from));
          auto progress = std::make_shared<Progress>(*common, "sync");
          deltasync::CopyOptions options;
          options.tag = o->tag;
          options.threads = o->threads;
          options.progress = ChunkProgress(progress);
          ASSIGN_OR_RETURN(deltasync::PushResult r,
                           volumes.CopyFrom(*from, source, ns, name, options));
          if (common->json) {
            json j = PushJson(r, o->tag);
            j["source"] = o->source;
            PrintJson(j);
          } else {
            PrintPushed("synced", r, o->tag);
          }
          return Status::Ok();
        });
    cmd->add_option("SOURCE", o->source,
                    "A version (NS/NAME@sha256:... or NS/NAME:TAG, with --from), or plain files: "
                    "s3://BUCKET[/PREFIX] or file:///DIR")
        ->required();
    cmd->add_option("VOLUME", o->volume, "NS/NAME to copy or seal it into")->required();
    cmd->add_option("--from", o->from,
                    "The store a version SOURCE is in (s3://..., http(s)://..., dir://... or a "
                    "path)");
    cmd->add_option("--tag", o->tag, "Move this tag to the new version");
    o->plain_only = {
        cmd->add_option("--parent", o->parent,
                        "Plain source: record this version of NS/NAME (REF) as the parent and "
                        "store changed chunks as zstd(parent XOR new), as push does"),
        cmd->add_flag("--no-xor", o->no_xor, "With --parent: store every new chunk whole"),
        cmd->add_option("--max-xor-chain", o->max_xor_chain,
                        "Plain source: longest chain of XOR deltas a chunk may need (default 8)")
            ->check(CLI::Range(1, static_cast<int>(deltasync::kMaxXorChain))),
        cmd->add_option("--piece-size", o->piece_size,
                        "Plain source: bytes per piece of a large safetensors tensor (default "
                        "16 MiB)")};
    cmd->add_option("--threads", o->threads,
                    "Chunks copied, or hashed and uploaded per file, at once (0: 8)")
        ->capture_default_str()
        ->check(CLI::Range(0, 256));
  }

  // ls [NS]
  {
    auto ns = std::make_shared<std::string>();
    CLI::App* cmd = Add(
        *group, common, rc, "ls", "List volumes, their versions, tags and removed versions",
        [ns, common](deltasync::Volumes& volumes, deltasync::VolumeStore&) -> Status {
          ASSIGN_OR_RETURN(auto listings, volumes.List(*ns));
          if (common->json) {
            json all = json::array();
            for (const auto& l : listings) all.push_back(ListingJson(l));
            PrintJson({{"ok", true}, {"volumes", all}});
            return Status::Ok();
          }
          size_t versions_total = 0, tags_total = 0, removed_total = 0;
          for (const auto& l : listings) {
            versions_total += l.versions.size();
            tags_total += l.tags.size();
            removed_total += l.removed.size();
            std::printf("%s/%s\n", l.ns.c_str(), l.name.c_str());
            // Every tag is shown: beside its version, live or removed, or on a line of its own
            // when its version is gone (purged).
            std::vector<bool> shown(l.tags.size(), false);
            auto tags_of = [&](const std::string& digest) {
              std::string tags;
              for (size_t i = 0; i < l.tags.size(); ++i) {
                if (l.tags[i].digest != digest) continue;
                tags += " " + l.tags[i].tag;
                shown[i] = true;
              }
              return tags.empty() ? tags : "  tags:" + tags;
            };
            for (const std::string& v : l.versions) {
              std::printf("  @sha256:%s%s\n", v.c_str(), tags_of(v).c_str());
            }
            for (const auto& r : l.removed) {
              std::printf("  @sha256:%s  removed at %lld, restorable until %lld%s\n",
                          r.digest.c_str(), static_cast<long long>(r.removed_at),
                          static_cast<long long>(r.restorable_until), tags_of(r.digest).c_str());
            }
            for (size_t i = 0; i < l.tags.size(); ++i) {
              if (shown[i]) continue;
              std::printf("  tag %s -> @sha256:%s  (version purged)\n", l.tags[i].tag.c_str(),
                          l.tags[i].digest.c_str());
            }
          }
          std::printf("%zu volume%s, %zu live version%s, %zu tag%s, %zu removed\n", listings.size(),
                      listings.size() == 1 ? "" : "s", versions_total,
                      versions_total == 1 ? "" : "s", tags_total, tags_total == 1 ? "" : "s",
                      removed_total);
          return Status::Ok();
        });
    cmd->add_option("NS", *ns, "Only this namespace");
    AddRetentionOption(*cmd, *common);
  }

  // show REF
  {
    auto ref = std::make_shared<std::string>();
    CLI::App* cmd = Add(
        *group, common, rc, "show", "Show a version: its digest, parent and files",
        [ref, common](deltasync::Volumes& volumes, deltasync::VolumeStore&) -> Status {
          ASSIGN_OR_RETURN(VolumeRef r, deltasync::ParseVolumeRef(*ref));
          ASSIGN_OR_RETURN(deltasync::VolumeVersion v, volumes.Show(r));
          uint64_t bytes = 0, chunks = 0;
          json files = json::array();
          for (const auto& f : v.manifest.files) {
            bytes += f.size;
            chunks += f.chunks.size();
            char mode[8];
            std::snprintf(mode, sizeof(mode), "%04o", f.mode);
            files.push_back({{"path", f.path},
                             {"size", f.size},
                             {"mode", mode},
                             {"sha256", f.sha256},
                             {"chunks", f.chunks.size()}});
          }
          if (common->json) {
            json j = {{"ok", true},        {"ref", v.ref.ToString()}, {"digest", Digest(v.ref.digest)},
                      {"files", files},    {"bytes", bytes},          {"chunks", chunks}};
            if (!r.is_digest()) {
              j["tag"] = r.tag;
              j["tag_generation"] = v.tag_generation;
            }
            if (!v.manifest.parent.empty()) j["parent"] = Digest(v.manifest.parent);
            if (v.created) j["created"] = *v.created;
            PrintJson(j);
            return Status::Ok();
          }
          std::printf("%s\n", v.ref.ToString().c_str());
          if (!v.manifest.parent.empty()) {
            std::printf("  parent  sha256:%s\n", v.manifest.parent.c_str());
          }
          if (v.created) std::printf("  created %lld\n", static_cast<long long>(*v.created));
          std::printf("  %zu files, %s, %llu chunks\n", v.manifest.files.size(),
                      HumanBytes(bytes).c_str(), static_cast<unsigned long long>(chunks));
          for (const auto& f : v.manifest.files) {
            std::printf("  %04o %12llu  %s\n", f.mode, static_cast<unsigned long long>(f.size),
                        f.path.c_str());
          }
          return Status::Ok();
        });
    cmd->add_option("REF", *ref, "NS/NAME@sha256:... or NS/NAME:TAG")->required();
  }

  // tag REF TAG
  {
    struct Opts {
      std::string ref, tag, expect;
      bool create = false;
    };
    auto o = std::make_shared<Opts>();
    CLI::App* cmd = Add(
        *group, common, rc, "tag", "Point TAG of the volume at the version REF names",
        [o, common](deltasync::Volumes& volumes, deltasync::VolumeStore&) -> Status {
          ASSIGN_OR_RETURN(VolumeRef r, deltasync::ParseVolumeRef(o->ref));
          std::optional<std::string> expected;
          if (o->create) expected = "";
          if (!o->expect.empty()) expected = o->expect;
          ASSIGN_OR_RETURN(deltasync::TagInfo t, volumes.Tag(r, o->tag, expected));
          const VolumeRef tagged{r.ns, r.name, "", t.tag};
          if (common->json) {
            PrintJson({{"ok", true},
                       {"ref", tagged.ToString()},
                       {"digest", Digest(t.digest)},
                       {"generation", t.generation}});
          } else {
            std::printf("%s -> sha256:%s\n", tagged.ToString().c_str(), t.digest.c_str());
          }
          return Status::Ok();
        });
    cmd->add_option("REF", o->ref, "The version: NS/NAME@sha256:... or NS/NAME:TAG")->required();
    cmd->add_option("TAG", o->tag, "The tag to move")->required();
    auto* expect = cmd->add_option(
        "--expect-generation", o->expect,
        "Move only if the tag's generation is this (from `ls --json`, `show --json NS/NAME:TAG` "
        "or `tag --json`)");
    cmd->add_flag("--create", o->create, "Move only if the tag does not exist yet")
        ->excludes(expect);
  }

  // pull REF DIR
  {
    struct Opts {
      std::string ref, dir;
      unsigned threads = 0;
    };
    auto o = std::make_shared<Opts>();
    CLI::App* cmd = Add(
        *group, common, rc, "pull", "Write a version's files into DIR, every byte verified",
        [o, common](deltasync::Volumes& volumes, deltasync::VolumeStore&) -> Status {
          ASSIGN_OR_RETURN(VolumeRef r, deltasync::ParseVolumeRef(o->ref));
          ASSIGN_OR_RETURN(std::string digest, volumes.Resolve(r));
          auto progress = std::make_shared<Progress>(*common, "pull");
          deltasync::PullOptions options;
          options.threads = o->threads;
          deltasync::PullProgress last;
          options.progress = [progress, &last](const deltasync::PullProgress& p) {
            last = p;
            progress->Update(p.files_done == p.files_total,
                             std::to_string(p.files_done) + "/" + std::to_string(p.files_total) +
                                 " files, " + HumanBytes(p.bytes_done) + " of " +
                                 HumanBytes(p.bytes_total));
          };
          const VolumeRef pinned{r.ns, r.name, digest, ""};
          // A signal stops the pull, which removes its temporary directory; then the command
          // dies of the signal, so a shell sees an interrupted command.
          options.cancel = CatchInterrupts();
          Status pulled = volumes.Pull(pinned, o->dir, options);
          DieIfInterrupted();
          RETURN_IF_ERROR(pulled);
          if (common->json) {
            PrintJson({{"ok", true},
                       {"ref", pinned.ToString()},
                       {"dir", o->dir},
                       {"files", last.files_total},
                       {"bytes", last.bytes_total}});
          } else {
            std::printf("pulled %s into %s (%llu files, %s)\n", pinned.ToString().c_str(),
                        o->dir.c_str(), static_cast<unsigned long long>(last.files_total),
                        HumanBytes(last.bytes_total).c_str());
          }
          return Status::Ok();
        });
    cmd->add_option("REF", o->ref, "NS/NAME@sha256:... or NS/NAME:TAG")->required();
    cmd->add_option("DIR", o->dir, "Target directory (absent or empty)")->required();
    cmd->add_option("--threads", o->threads, "Chunks fetched at once (0: 8)")
        ->capture_default_str()
        ->check(CLI::Range(0, 256));
  }

  // mount REF DIR
  {
    auto o = std::make_shared<VolumeMountArgs>();
    CLI::App* cmd = Add(*group, common, rc, "mount",
                        "Serve a version read-only at DIR (FUSE) until unmounted or interrupted",
                        [o, common](deltasync::Volumes& volumes, deltasync::VolumeStore&) {
                          return RunVolumeMount(volumes, *o, common->json);
                        });
    AddVolumeMountOptions(*cmd, *o);
  }

  // rm REF
  {
    auto ref = std::make_shared<std::string>();
    CLI::App* cmd = Add(
        *group, common, rc, "rm",
        "Remove a version (restorable for the retention window, 7 days by default)",
        [ref, common](deltasync::Volumes& volumes, deltasync::VolumeStore&) -> Status {
          ASSIGN_OR_RETURN(VolumeRef r, deltasync::ParseVolumeRef(*ref));
          ASSIGN_OR_RETURN(deltasync::RemoveResult res, volumes.Remove(r));
          const VolumeRef removed{r.ns, r.name, res.removed.digest, ""};
          if (common->json) {
            PrintJson({{"ok", true},
                       {"removed", removed.ToString()},
                       {"removed_at", res.removed.removed_at},
                       {"restorable_until", res.removed.restorable_until},
                       {"tags", res.tags}});
          } else {
            std::printf("removed %s; restorable until %lld\n", removed.ToString().c_str(),
                        static_cast<long long>(res.removed.restorable_until));
            for (const std::string& t : res.tags) {
              std::printf("  tag %s still points at it\n", t.c_str());
            }
          }
          return Status::Ok();
        });
    cmd->add_option("REF", *ref, "NS/NAME@sha256:... or NS/NAME:TAG")->required();
    AddRetentionOption(*cmd, *common);
  }

  // restore REF
  {
    auto ref = std::make_shared<std::string>();
    CLI::App* cmd = Add(
        *group, common, rc, "restore", "Bring back a removed version within its retention window",
        [ref, common](deltasync::Volumes& volumes, deltasync::VolumeStore&) -> Status {
          ASSIGN_OR_RETURN(VolumeRef r, deltasync::ParseVolumeRef(*ref));
          ASSIGN_OR_RETURN(std::string digest, volumes.Resolve(r));
          const VolumeRef pinned{r.ns, r.name, digest, ""};
          RETURN_IF_ERROR(volumes.Restore(pinned));
          if (common->json) {
            PrintJson({{"ok", true}, {"restored", pinned.ToString()}});
          } else {
            std::printf("restored %s\n", pinned.ToString().c_str());
          }
          return Status::Ok();
        });
    cmd->add_option("REF", *ref, "NS/NAME@sha256:... or NS/NAME:TAG")->required();
    AddRetentionOption(*cmd, *common);
  }

  // gc
  {
    auto dry_run = std::make_shared<bool>(false);
    CLI::App* cmd = Add(
        *group, common, rc, "gc",
        "Delete chunks no live, restorable or in-flight version needs, and expired records",
        [dry_run, common](deltasync::Volumes& volumes, deltasync::VolumeStore&) -> Status {
          auto progress = std::make_shared<Progress>(*common, "gc");
          deltasync::GcOptions options;
          options.dry_run = *dry_run;
          options.progress = [progress, dry = *dry_run](const deltasync::GcProgress& p) {
            progress->Update(p.done, std::to_string(p.objects_scanned) + " objects scanned, " +
                                         std::to_string(p.chunks_checked) + "/" +
                                         std::to_string(p.chunks_total) + " chunks checked, " +
                                         std::to_string(p.chunks_deleted) +
                                         (dry ? " to delete, " : " deleted, ") +
                                         HumanBytes(p.bytes_freed) + (dry ? " to free" : " freed"));
          };
          ASSIGN_OR_RETURN(deltasync::GcResult g, volumes.Gc(options));
          if (common->json) {
            PrintJson({{"ok", true},
                       {"dry_run", *dry_run},
                       {"chunks_kept", g.chunks_kept},
                       {"chunks_deleted", g.chunks_deleted},
                       {"bytes_freed", g.bytes_freed},
                       {"versions_purged", g.versions_purged},
                       {"leases_expired", g.leases_expired},
                       {"temporaries_removed", g.temporaries_removed}});
          } else {
            std::printf("%s %llu chunks (%s), kept %llu; purged %llu versions, %llu leases\n",
                        *dry_run ? "would delete" : "deleted",
                        static_cast<unsigned long long>(g.chunks_deleted),
                        HumanBytes(g.bytes_freed).c_str(),
                        static_cast<unsigned long long>(g.chunks_kept),
                        static_cast<unsigned long long>(g.versions_purged),
                        static_cast<unsigned long long>(g.leases_expired));
            if (g.temporaries_removed > 0) {
              std::printf("removed %llu temporary files of writes abandoned over %s ago\n",
                          static_cast<unsigned long long>(g.temporaries_removed),
                          "a lease's lifetime");
            }
          }
          return Status::Ok();
        });
    cmd->add_flag("--dry-run", *dry_run, "Count what would be deleted; delete nothing");
    AddRetentionOption(*cmd, *common);
  }
}

}  // namespace deltakv::cli
