#include "mount/mount_tree.h"

#include <gtest/gtest.h>

namespace deltakv::mount {
namespace {

deltasync::VolumeFile File(std::string path, uint64_t size, uint32_t mode = 0644) {
  deltasync::VolumeFile f;
  f.path = std::move(path);
  f.size = size;
  f.mode = mode;
  return f;
}

std::vector<std::string> Names(const MountNode& dir) {
  std::vector<std::string> out;
  for (const auto& c : dir.children) out.push_back(c.first);
  return out;
}

TEST(MountTree, DirectoriesAreImpliedByPaths) {
  deltasync::VolumeManifest m;
  m.files = {File("a/b/c.bin", 10), File("a/b/d.txt", 0), File("a/e", 3, 0755),
             File("model.safetensors", 1000), File("z/y/x/w", 1)};
  auto tree = MountTree::Build(m);
  ASSERT_TRUE(tree.ok()) << tree.status().ToString();
  EXPECT_EQ(tree->file_count(), 5u);
  EXPECT_EQ(tree->directory_count(), 6u);  // root, a, a/b, z, z/y, z/y/x
  const MountNode* root = tree->Get(kRootNode);
  ASSERT_NE(root, nullptr);
  EXPECT_TRUE(root->is_dir);
  EXPECT_EQ(root->mode, 0555u);
  EXPECT_EQ(Names(*root), (std::vector<std::string>{"a", "model.safetensors", "z"}));
  EXPECT_EQ(root->subdirs, 2u);
  const MountNode* b = tree->Find("a/b");
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(b->is_dir);
  EXPECT_EQ(Names(*b), (std::vector<std::string>{"c.bin", "d.txt"}));
  EXPECT_EQ(tree->Get(b->parent), tree->Find("a"));
  const MountNode* e = tree->Find("a/e");
  ASSERT_NE(e, nullptr);
  EXPECT_FALSE(e->is_dir);
  EXPECT_EQ(e->mode, 0555u);
  EXPECT_EQ(e->size, 3u);
  EXPECT_EQ(e->file_index, 2u);
  const MountNode* c = tree->Lookup(b->id, "c.bin");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->mode, 0444u);
  EXPECT_EQ(c->file_index, 0u);
  EXPECT_EQ(tree->Find("a/b/d.txt")->size, 0u);
  EXPECT_EQ(tree->Find(""), root);
  EXPECT_EQ(tree->Find("a/missing"), nullptr);
  EXPECT_EQ(tree->Lookup(c->id, "x"), nullptr);  // a file has no children
  EXPECT_EQ(tree->Get(0), nullptr);
  EXPECT_EQ(tree->Get(tree->node_count() + 1), nullptr);
}

TEST(MountTree, EmptyManifestIsAnEmptyRoot) {
  auto tree = MountTree::Build(deltasync::VolumeManifest{});
  ASSERT_TRUE(tree.ok());
  EXPECT_EQ(tree->node_count(), 1u);
  EXPECT_TRUE(tree->Get(kRootNode)->children.empty());
}

TEST(MountTree, RefusesAFileThatIsAlsoADirectory) {
  deltasync::VolumeManifest m;
  m.files = {File("a", 1), File("a/b", 1)};
  auto tree = MountTree::Build(m);
  ASSERT_FALSE(tree.ok());
  EXPECT_EQ(tree.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tree.status().message().find("'a'"), std::string::npos);
  m.files = {File("a/b", 1), File("a", 1)};
  EXPECT_FALSE(MountTree::Build(m).ok());
  m.files = {File("x", 1), File("x", 2)};
  EXPECT_FALSE(MountTree::Build(m).ok());
  m.files = {File("../etc/passwd", 1)};
  EXPECT_FALSE(MountTree::Build(m).ok());
}

}  // namespace
}  // namespace deltakv::mount
