// VolumeFs: one sealed volume version served read-only through FUSE (libfuse3, low-level API).
//
// The tree is built from the manifest at construction; nothing else is read until a file is
// read, so mounting costs the same for any volume size. Inode numbers are MountTree node ids;
// attributes and entries are immutable, so the kernel may cache them (entry and attribute
// timeouts of a day, keep_cache on open). Files are 0444 (0555 if executable), directories
// 0555, owned by the mounting user, timestamped with the version's creation time; only the
// mounting user may use the mount unless ServeOptions::allow_other is set. Every call
// that would change anything fails with EROFS, and the mount itself is read-only with
// default_permissions. Reads go through a VolumeReader; a read that cannot be verified fails
// with EIO and its error line goes to the error sink.
//
// Ownership: borrows the manifest, tree and reader, which must outlive Serve.
// Thread-safety: Serve runs libfuse's multi-threaded loop; the callbacks only read the tree
// and go through the (thread-safe) reader.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"
#include "deltasync/volume.h"
#include "mount/mount_tree.h"
#include "mount/volume_reader.h"

namespace deltakv::mount {

struct ServeOptions {
  std::string fsname = "deltakv";  // shown in /proc/mounts
  int64_t mtime = 0;               // unix seconds for every node's timestamps
  double cache_timeout_s = 86400;  // kernel entry/attribute cache timeout
  int max_threads = 16;            // libfuse worker threads
  // FUSE's allow_other: users other than the mounting one may use the mount (the modes above
  // then apply to them). Without it the kernel refuses every other user, root included. A user
  // other than root needs `user_allow_other` in /etc/fuse.conf for it.
  bool allow_other = false;
};

class VolumeFs {
 public:
  VolumeFs(const deltasync::VolumeManifest& manifest, const MountTree& tree, VolumeReader& reader,
           ServeOptions options);

  // Mounts on `dir`, calls ready() once the kernel mount exists, then serves requests until
  // the file system is unmounted (fusermount3 -u) or the process gets SIGINT, SIGTERM or
  // SIGHUP, and unmounts before returning. FailedPrecondition if `dir` is not an empty
  // directory (or is the mount of a process that died); IoError if the mount fails (libfuse
  // prints its reason to stderr; with allow_other, the message says what a user other than
  // root needs) or the loop ends with an error.
  Status Serve(const std::string& dir, const std::function<void()>& ready);

  // For the callbacks (the low-level API passes this object as userdata).
  const deltasync::VolumeManifest& manifest() const { return manifest_; }
  const MountTree& tree() const { return tree_; }
  VolumeReader& reader() { return reader_; }
  const ServeOptions& options() const { return options_; }
  uint64_t total_bytes() const { return total_bytes_; }

 private:
  const deltasync::VolumeManifest& manifest_;
  const MountTree& tree_;
  VolumeReader& reader_;
  const ServeOptions options_;
  uint64_t total_bytes_ = 0;
};

// OK if `dir` is an existing, empty directory; FailedPrecondition saying what it is otherwise,
// and for a FUSE mount left by a process that died (ENOTCONN) how to unmount it.
Status CheckMountPoint(const std::string& dir);

}  // namespace deltakv::mount
