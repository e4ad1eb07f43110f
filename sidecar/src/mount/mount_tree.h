// MountTree: the directory tree of one sealed volume version, built from its manifest.
//
// A manifest lists files only; directories are implied by the paths ("a/b/c.bin" implies "a"
// and "a/b"). The tree gives every directory and file a node numbered from 1 (the root, which
// is also FUSE's root inode) in a stable order: the root, then nodes in the order the manifest
// paths first name them. Files carry their manifest index, size and read-only mode (0444, or
// 0555 for a file pushed executable); directories are 0555. Children are kept sorted by name
// bytes, so listings are deterministic.
//
// Ownership: the tree owns copies of the names; it refers to files by index into the manifest
// it was built from, which the caller keeps alongside it.
// Thread-safety: immutable after Build; any number of threads may read it at once.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "deltasync/volume.h"

namespace deltakv::mount {

inline constexpr uint64_t kRootNode = 1;

struct MountNode {
  uint64_t id = 0;      // 1-based; kRootNode is the root directory
  uint64_t parent = 0;  // the root is its own parent
  std::string name;     // last path component; empty for the root
  bool is_dir = false;
  uint32_t mode = 0;     // permission bits: 0555 for directories, 0444 or 0555 for files
  uint64_t size = 0;     // file size in bytes; 0 for directories
  size_t file_index = 0;  // index into VolumeManifest::files (files only)
  uint64_t subdirs = 0;   // number of child directories (directories only)
  // Children sorted by name bytes (directories only).
  std::vector<std::pair<std::string, uint64_t>> children;
};

class MountTree {
 public:
  // Builds the tree of a manifest's files. InvalidArgument naming the path if a path is not
  // a valid volume path, names a file twice, or names a file where another path needs a
  // directory (the manifest parser rejects all of these; the check is repeated here so a tree
  // never holds an ambiguous node).
  static StatusOr<MountTree> Build(const deltasync::VolumeManifest& manifest);

  // Returns the node with this id, or nullptr if there is none.
  const MountNode* Get(uint64_t id) const;
  // Returns the child `name` of directory `parent`, or nullptr if `parent` is not a
  // directory or has no such child.
  const MountNode* Lookup(uint64_t parent, std::string_view name) const;
  // Returns the node at a '/'-separated relative path ("" is the root), or nullptr.
  const MountNode* Find(std::string_view path) const;

  size_t node_count() const { return nodes_.size(); }
  uint64_t file_count() const { return files_; }
  uint64_t directory_count() const { return nodes_.size() - files_; }

 private:
  std::vector<MountNode> nodes_;  // nodes_[id - 1]
  uint64_t files_ = 0;
};

}  // namespace deltakv::mount
