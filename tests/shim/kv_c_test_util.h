// Helpers for the KV tier C ABI tests: C layouts (deltakv_kv_layout) describing the fake engine
// KV memories of tests/kvtier/tier_test_util.h, and C keys.
#pragma once

#include <cstdint>
#include <numeric>
#include <vector>

#include "deltakv/deltakv_kv.h"
#include "kvtier/tier_test_util.h"

namespace deltakv::testing {

inline deltakv_kv_key CKey(const kvtier::PoolKey& k) { return deltakv_kv_key{k.lo, k.hi}; }
inline kvtier::PoolKey FromCKey(const deltakv_kv_key& k) { return kvtier::PoolKey{k.lo, k.hi}; }

// Keys KeyOf(first) .. KeyOf(first + n - 1).
inline std::vector<deltakv_kv_key> CKeys(uint64_t first, uint64_t n) {
  std::vector<deltakv_kv_key> keys;
  for (uint64_t i = 0; i < n; ++i) keys.push_back(CKey(kvtier::testing::KeyOf(first + i)));
  return keys;
}

inline std::vector<uint64_t> Iota(uint64_t first, uint64_t n) {
  std::vector<uint64_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

// A C layout with the arrays it points to (keep it alive while the layout is used; moving it
// keeps the arrays where they are).
struct CLayout {
  std::vector<deltakv_kv_layer> layers;
  std::vector<deltakv_kv_piece> pieces;
  deltakv_kv_layout layout{};
};

// Describes `mem` (of kind `kind`) as a C layout of kind `c_kind`: PIECES works for every fake
// layout, PER_LAYER for the per-layer fakes, CROSS_LAYER for the cross-layer fake.
inline CLayout DescribeLayout(kvtier::testing::FakeEngineKv& mem,
                              kvtier::testing::FakeLayoutKind kind, int32_t c_kind) {
  const kvtier::KvLayout l = mem.Layout();
  CLayout c;
  c.layout.kind = c_kind;
  c.layout.num_blocks = l.num_blocks();
  const std::vector<kvtier::KvPiece>& p = l.pieces();
  if (c_kind == DELTAKV_KV_LAYOUT_PIECES) {
    for (const kvtier::KvPiece& piece : p) {
      c.pieces.push_back(deltakv_kv_piece{piece.base, piece.stride, piece.bytes});
    }
    c.layout.pieces = c.pieces.data();
    c.layout.num_pieces = c.pieces.size();
  } else if (c_kind == DELTAKV_KV_LAYOUT_PER_LAYER) {
    const size_t per_layer = kind == kvtier::testing::FakeLayoutKind::kPerLayerKV ? 2 : 1;
    for (size_t i = 0; i < p.size(); i += per_layer) {
      c.layers.push_back(
          deltakv_kv_layer{p[i].base, per_layer == 2 ? p[i + 1].base : nullptr, p[i].stride});
    }
    c.layout.layers = c.layers.data();
    c.layout.num_layers = c.layers.size();
    c.layout.bytes_per_tensor = p[0].bytes;
  } else {
    c.layout.base = p[0].base;
    c.layout.block_bytes = p[0].bytes;
    c.layout.block_stride = p[0].stride;
  }
  return c;
}

}  // namespace deltakv::testing
