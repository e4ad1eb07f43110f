#define FUSE_USE_VERSION 312
#include "mount/volume_fs.h"

#include <fuse_lowlevel.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

namespace deltakv::mount {
namespace {

VolumeFs& Fs(fuse_req_t req) { return *static_cast<VolumeFs*>(fuse_req_userdata(req)); }

void FillStat(const VolumeFs& fs, const MountNode& n, struct stat* st) {
  std::memset(st, 0, sizeof(*st));
  st->st_ino = n.id;
  st->st_mode = (n.is_dir ? S_IFDIR : S_IFREG) | n.mode;
  st->st_nlink = n.is_dir ? 2 + n.subdirs : 1;
  st->st_uid = getuid();
  st->st_gid = getgid();
  st->st_size = static_cast<off_t>(n.size);
  st->st_blksize = 1 << 20;
  st->st_blocks = static_cast<blkcnt_t>((n.size + 511) / 512);
  st->st_atim.tv_sec = st->st_mtim.tv_sec = st->st_ctim.tv_sec = fs.options().mtime;
}

void ReplyEntry(fuse_req_t req, const MountNode* n) {
  VolumeFs& fs = Fs(req);
  fuse_entry_param e;
  std::memset(&e, 0, sizeof(e));
  // A missing name is answered with inode 0, which the kernel caches as a negative entry.
  e.entry_timeout = fs.options().cache_timeout_s;
  if (n != nullptr) {
    e.ino = n->id;
    e.generation = 1;
    e.attr_timeout = fs.options().cache_timeout_s;
    FillStat(fs, *n, &e.attr);
  }
  fuse_reply_entry(req, &e);
}

void Init(void*, fuse_conn_info* conn) {
  // Large reads: fewer round trips per chunk. The kernel clamps these to what it supports.
  conn->max_readahead = 1u << 20;
  conn->want &= ~static_cast<unsigned>(FUSE_CAP_WRITEBACK_CACHE);
}

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  ReplyEntry(req, Fs(req).tree().Lookup(parent, name));
}

void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  VolumeFs& fs = Fs(req);
  const MountNode* n = fs.tree().Get(ino);
  if (n == nullptr) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  struct stat st;
  FillStat(fs, *n, &st);
  fuse_reply_attr(req, &st, fs.options().cache_timeout_s);
}

void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  const MountNode* n = Fs(req).tree().Get(ino);
  if (n == nullptr) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  if (n->is_dir) {
    fuse_reply_err(req, EISDIR);
    return;
  }
  if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC) != 0) {
    fuse_reply_err(req, EROFS);
    return;
  }
  fi->keep_cache = 1;  // a sealed version never changes
  fi->noflush = 1;
  fi->fh = reinterpret_cast<uint64_t>(new ReadStream());
  if (fuse_reply_open(req, fi) != 0) delete reinterpret_cast<ReadStream*>(fi->fh);
}

void Release(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  delete reinterpret_cast<ReadStream*>(fi->fh);
  fuse_reply_err(req, 0);
}

void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  VolumeFs& fs = Fs(req);
  const MountNode* n = fs.tree().Get(ino);
  if (n == nullptr || n->is_dir) {
    fuse_reply_err(req, n == nullptr ? ENOENT : EISDIR);
    return;
  }
  if (off < 0) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  auto slices = fs.reader().Read(n->file_index, static_cast<uint64_t>(off), size,
                                 reinterpret_cast<ReadStream*>(fi->fh));
  if (!slices.ok()) {
    fuse_reply_err(req, EIO);  // the reader has reported the file, chunk and cause
    return;
  }
  std::vector<iovec> iov;
  iov.reserve(slices->size());
  for (const ReadSlice& s : *slices) {
    iov.push_back({const_cast<char*>(s.chunk->data()) + s.offset, s.size});
  }
  fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));  // copies before returning
}

void OpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  const MountNode* n = Fs(req).tree().Get(ino);
  if (n == nullptr || !n->is_dir) {
    fuse_reply_err(req, n == nullptr ? ENOENT : ENOTDIR);
    return;
  }
  if ((fi->flags & O_ACCMODE) != O_RDONLY) {
    fuse_reply_err(req, EROFS);
    return;
  }
  fi->cache_readdir = 1;
  fi->keep_cache = 1;
  fuse_reply_open(req, fi);
}

void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  VolumeFs& fs = Fs(req);
  const MountNode* n = fs.tree().Get(ino);
  if (n == nullptr || !n->is_dir) {
    fuse_reply_err(req, n == nullptr ? ENOENT : ENOTDIR);
    return;
  }
  // Entry k (k = 0: ".", 1: "..", then the children) carries offset k + 1, the next to read.
  std::vector<char> buf(size);
  size_t used = 0;
  const size_t total = 2 + n->children.size();
  for (size_t k = static_cast<size_t>(std::max<off_t>(off, 0)); k < total; ++k) {
    const MountNode* entry = k == 0 ? n : k == 1 ? fs.tree().Get(n->parent)
                                                 : fs.tree().Get(n->children[k - 2].second);
    const char* name = k == 0 ? "." : k == 1 ? ".." : n->children[k - 2].first.c_str();
    struct stat st;
    std::memset(&st, 0, sizeof(st));
    st.st_ino = entry->id;
    st.st_mode = entry->is_dir ? S_IFDIR : S_IFREG;
    const size_t need = fuse_add_direntry(req, buf.data() + used, size - used, name, &st,
                                          static_cast<off_t>(k + 1));
    if (need > size - used) break;
    used += need;
  }
  fuse_reply_buf(req, buf.data(), used);
}

void StatFs(fuse_req_t req, fuse_ino_t) {
  VolumeFs& fs = Fs(req);
  struct statvfs sv;
  std::memset(&sv, 0, sizeof(sv));
  sv.f_bsize = sv.f_frsize = 4096;
  sv.f_blocks = (fs.total_bytes() + 4095) / 4096;
  sv.f_files = fs.tree().node_count();
  sv.f_namemax = 255;
  sv.f_flag = ST_RDONLY;
  fuse_reply_statfs(req, &sv);
}

void GetXattr(fuse_req_t req, fuse_ino_t, const char*, size_t) { fuse_reply_err(req, ENODATA); }
void ListXattr(fuse_req_t req, fuse_ino_t, size_t size) {
  if (size == 0) fuse_reply_xattr(req, 0);
  else fuse_reply_buf(req, nullptr, 0);
}

// Every call that would change the file system.
void SetAttr(fuse_req_t req, fuse_ino_t, struct stat*, int, fuse_file_info*) {
  fuse_reply_err(req, EROFS);
}
void MkNod(fuse_req_t req, fuse_ino_t, const char*, mode_t, dev_t) { fuse_reply_err(req, EROFS); }
void MkDir(fuse_req_t req, fuse_ino_t, const char*, mode_t) { fuse_reply_err(req, EROFS); }
void Unlink(fuse_req_t req, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }
void SymLink(fuse_req_t req, const char*, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }
void Rename(fuse_req_t req, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned) {
  fuse_reply_err(req, EROFS);
}
void Link(fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }
void Write(fuse_req_t req, fuse_ino_t, const char*, size_t, off_t, fuse_file_info*) {
  fuse_reply_err(req, EROFS);
}
void Create(fuse_req_t req, fuse_ino_t, const char*, mode_t, fuse_file_info*) {
  fuse_reply_err(req, EROFS);
}
void SetXattr(fuse_req_t req, fuse_ino_t, const char*, const char*, size_t, int) {
  fuse_reply_err(req, EROFS);
}
void RemoveXattr(fuse_req_t req, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }
void Fallocate(fuse_req_t req, fuse_ino_t, int, off_t, off_t, fuse_file_info*) {
  fuse_reply_err(req, EROFS);
}

fuse_lowlevel_ops MakeOps() {
  fuse_lowlevel_ops ops;
  std::memset(&ops, 0, sizeof(ops));
  ops.init = Init;
  ops.lookup = Lookup;
  ops.getattr = GetAttr;
  ops.open = Open;
  ops.release = Release;
  ops.read = Read;
  ops.opendir = OpenDir;
  ops.readdir = ReadDir;
  ops.statfs = StatFs;
  ops.getxattr = GetXattr;
  ops.listxattr = ListXattr;
  ops.setattr = SetAttr;
  ops.mknod = MkNod;
  ops.mkdir = MkDir;
  ops.unlink = Unlink;
  ops.rmdir = Unlink;
  ops.symlink = SymLink;
  ops.rename = Rename;
  ops.link = Link;
  ops.write = Write;
  ops.create = Create;
  ops.setxattr = SetXattr;
  ops.removexattr = RemoveXattr;
  ops.fallocate = Fallocate;
  return ops;
}

struct ArgsDeleter {
  void operator()(fuse_args* a) const { fuse_opt_free_args(a); }
};
struct SessionDeleter {
  void operator()(fuse_session* s) const { fuse_session_destroy(s); }
};
struct LoopConfigDeleter {
  void operator()(fuse_loop_config* c) const { fuse_loop_cfg_destroy(c); }
};

}  // namespace

Status CheckMountPoint(const std::string& dir) {
  namespace fs = std::filesystem;
  // The FUSE mount of a process that died (SIGKILL) stays, with no one serving it: stat, or
  // only opendir while the kernel still caches the root's attributes, fails with ENOTCONN.
  const Status dead = FailedPrecondition(
      "mount point '" + dir +
      "' is a FUSE mount whose process is gone (Transport endpoint is not connected); unmount "
      "it with `fusermount3 -u " +
      dir + "` (or, as root, `umount -l " + dir + "`) and mount again");
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (ec == std::errc::not_connected) return dead;
  if (!fs::exists(st)) return FailedPrecondition("mount point '" + dir + "' does not exist");
  if (!fs::is_directory(st)) {
    return FailedPrecondition("mount point '" + dir + "' is not a directory");
  }
  const bool empty = fs::is_empty(dir, ec);
  if (ec == std::errc::not_connected) return dead;
  if (!empty || ec) {
    return FailedPrecondition("mount point '" + dir + "' is not an empty directory");
  }
  return Status::Ok();
}

VolumeFs::VolumeFs(const deltasync::VolumeManifest& manifest, const MountTree& tree,
                   VolumeReader& reader, ServeOptions options)
    : manifest_(manifest), tree_(tree), reader_(reader), options_(std::move(options)) {
  for (const auto& f : manifest_.files) total_bytes_ += f.size;
}

Status VolumeFs::Serve(const std::string& dir, const std::function<void()>& ready) {
  RETURN_IF_ERROR(CheckMountPoint(dir));
  static const fuse_lowlevel_ops kOps = MakeOps();
  fuse_args raw = FUSE_ARGS_INIT(0, nullptr);
  std::unique_ptr<fuse_args, ArgsDeleter> args(&raw);
  const std::string opts = "ro,default_permissions,fsname=" + options_.fsname + ",subtype=deltakv" +
                           (options_.allow_other ? ",allow_other" : "");
  if (fuse_opt_add_arg(&raw, "deltakv") != 0 || fuse_opt_add_arg(&raw, "-o") != 0 ||
      fuse_opt_add_arg(&raw, opts.c_str()) != 0) {
    return Internal("mount: out of memory building libfuse arguments");
  }
  std::unique_ptr<fuse_session, SessionDeleter> se(
      fuse_session_new(&raw, &kOps, sizeof(kOps), this));
  if (!se) return IoError("mount '" + dir + "': libfuse refused the session (see above)");
  if (fuse_set_signal_handlers(se.get()) != 0) {
    return IoError("mount '" + dir + "': cannot install signal handlers");
  }
  if (fuse_session_mount(se.get(), dir.c_str()) != 0) {
    fuse_remove_signal_handlers(se.get());
    std::string hint;
    if (options_.allow_other && geteuid() != 0) {
      hint =
          "; --allow-other for a user other than root needs a line `user_allow_other` in "
          "/etc/fuse.conf";
    }
    return IoError("mount '" + dir + "' failed (libfuse's reason is above)" + hint);
  }
  ready();
  std::unique_ptr<fuse_loop_config, LoopConfigDeleter> cfg(fuse_loop_cfg_create());
  fuse_loop_cfg_set_max_threads(cfg.get(), static_cast<unsigned>(options_.max_threads));
  const int rc = fuse_session_loop_mt(se.get(), cfg.get());
  fuse_session_unmount(se.get());
  fuse_remove_signal_handlers(se.get());
  // A signal ends the loop with the signal's number; that is a clean shutdown.
  if (rc < 0) return IoError("mount '" + dir + "': request loop failed: " + std::strerror(-rc));
  return Status::Ok();
}

}  // namespace deltakv::mount
