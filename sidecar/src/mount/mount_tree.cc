#include "mount/mount_tree.h"

#include <algorithm>
#include <unordered_map>

namespace deltakv::mount {

StatusOr<MountTree> MountTree::Build(const deltasync::VolumeManifest& manifest) {
  MountTree tree;
  MountNode root;
  root.id = kRootNode;
  root.parent = kRootNode;
  root.is_dir = true;
  root.mode = 0555;
  tree.nodes_.push_back(std::move(root));
  // Directory path ("" for the root) -> node id; file paths are checked against it too.
  std::unordered_map<std::string, uint64_t> by_path = {{"", kRootNode}};

  for (size_t i = 0; i < manifest.files.size(); ++i) {
    const deltasync::VolumeFile& f = manifest.files[i];
    RETURN_IF_ERROR(deltasync::ValidateVolumePath(f.path));
    uint64_t dir = kRootNode;
    size_t start = 0;
    while (true) {
      const size_t slash = f.path.find('/', start);
      const bool last = slash == std::string::npos;
      const std::string prefix = last ? f.path : f.path.substr(0, slash);
      const std::string name = f.path.substr(start, last ? std::string::npos : slash - start);
      auto it = by_path.find(prefix);
      if (it != by_path.end()) {
        const MountNode& existing = tree.nodes_[it->second - 1];
        if (last || !existing.is_dir) {
          return InvalidArgument("manifest path '" + f.path + "': '" + prefix +
                                 "' is named both as a file and as " +
                                 (existing.is_dir ? "a directory" : "another file"));
        }
        dir = it->second;
      } else {
        MountNode node;
        node.id = tree.nodes_.size() + 1;
        node.parent = dir;
        node.name = name;
        node.is_dir = !last;
        if (last) {
          node.mode = (f.mode & 0100) ? 0555 : 0444;
          node.size = f.size;
          node.file_index = i;
          ++tree.files_;
        } else {
          node.mode = 0555;
          ++tree.nodes_[dir - 1].subdirs;
        }
        tree.nodes_[dir - 1].children.emplace_back(name, node.id);
        by_path.emplace(prefix, node.id);
        dir = node.id;
        tree.nodes_.push_back(std::move(node));
      }
      if (last) break;
      start = slash + 1;
    }
  }
  for (MountNode& n : tree.nodes_) std::sort(n.children.begin(), n.children.end());
  return tree;
}

const MountNode* MountTree::Get(uint64_t id) const {
  if (id == 0 || id > nodes_.size()) return nullptr;
  return &nodes_[id - 1];
}

const MountNode* MountTree::Lookup(uint64_t parent, std::string_view name) const {
  const MountNode* dir = Get(parent);
  if (dir == nullptr || !dir->is_dir) return nullptr;
  auto it = std::lower_bound(
      dir->children.begin(), dir->children.end(), name,
      [](const std::pair<std::string, uint64_t>& c, std::string_view n) { return c.first < n; });
  if (it == dir->children.end() || it->first != name) return nullptr;
  return Get(it->second);
}

const MountNode* MountTree::Find(std::string_view path) const {
  const MountNode* node = Get(kRootNode);
  size_t start = 0;
  while (node != nullptr && start < path.size()) {
    const size_t slash = path.find('/', start);
    const size_t end = slash == std::string_view::npos ? path.size() : slash;
    node = Lookup(node->id, path.substr(start, end - start));
    start = end + 1;
  }
  return node;
}

}  // namespace deltakv::mount
