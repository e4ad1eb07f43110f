// Block keys of the host KV tier: the 128-bit names under which KV blocks are stored.
//
// A key names one full block of `block_tokens` tokens *and everything before it*: key_i is a
// digest of (key_{i-1}, the block's token ids, a digest of the key context), so equal keys mean
// equal prefixes, and a lookup walks a request's keys from the first until the first miss.
// The key context (model fingerprint, KV dtype and layout, tensor-parallel rank and size,
// adapter, salt/tenant) is part of every key, so blocks of different models, ranks or tenants
// never share a key. Only full blocks have keys; a trailing partial block has none. The exact
// bytes hashed, the hash choices (XXH3-128 by default, truncated SHA-256 as an option) and the
// test vectors are specified in docs/KEYS.md; this header is its implementation. Engines that
// already hash their blocks (vLLM block hashes) map those into keys with KeyFromEngineHash.
//
// Thread-safety: free functions are pure and may run concurrently; a KeyChain is a value owned
// by one thread at a time. Nothing here allocates per block: ChainKeys allocates its result and
// one scratch buffer per call, a KeyChain its buffer once at Create.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace deltakv::kvtier {

namespace internal {
class BlockHasher;  // kvtier/src/keys.cc
}  // namespace internal

// The version of docs/KEYS.md implemented here; it is hashed into every key.
inline constexpr uint32_t kKeySpecVersion = 1;
// Implementation caps (the spec's encoding allows more); inputs past them are rejected.
inline constexpr uint32_t kMaxBlockTokens = 1u << 16;
inline constexpr size_t kMaxContextFieldBytes = 4096;
inline constexpr size_t kMaxEngineHashBytes = 256;

// A 128-bit key. Its canonical form is 16 bytes (docs/KEYS.md §2): `hi` is bytes 0..7 read
// big-endian, `lo` bytes 8..15. ToHex prints the canonical bytes in order, so the hex of an
// XXH3 key is XXH3's canonical hex (high64 then low64) and the hex of a SHA-256 key is the
// first 32 hex digits of the SHA-256 hex digest.
struct BlockKey {
  uint64_t lo = 0;
  uint64_t hi = 0;

  friend bool operator==(const BlockKey&, const BlockKey&) = default;

  // The canonical 16 bytes.
  std::array<uint8_t, 16> Bytes() const;
  static BlockKey FromBytes(std::span<const uint8_t, 16> bytes);

  // 32 lowercase hex digits of the canonical bytes.
  std::string ToHex() const;
  // Parses exactly 32 hex digits (either case; no prefix, sign or whitespace). Returns
  // InvalidArgument naming the length or the offending position otherwise.
  static StatusOr<BlockKey> FromHex(std::string_view hex);
};

// The parent of a chain's first block: sixteen zero bytes.
inline constexpr BlockKey kRootKey{};

// For unordered containers. Keys are digests, so their bits are already uniform.
struct BlockKeyHash {
  size_t operator()(const BlockKey& k) const noexcept {
    return static_cast<size_t>(k.lo ^ ((k.hi << 29) | (k.hi >> 35)));
  }
};

enum class HashKind : uint8_t {
  kXxh3 = 0,    // XXH3-128, seed 0 (default: fast, not collision-resistant against an attacker)
  kSha256 = 1,  // SHA-256, first 16 bytes of the digest (for untrusted multi-tenant input)
};
// "xxh3" or "sha256" ("unknown" for values outside the enum).
std::string_view HashKindName(HashKind kind);

// What, besides the tokens, a KV block depends on. Absent (nullopt) and present-but-empty are
// different values and give different keys. Strings are hashed as raw bytes (UTF-8 expected).
struct KeyContext {
  std::optional<std::string> model_fingerprint;  // weights identity, e.g. "org/model@revision"
  std::optional<std::string> kv_dtype;           // e.g. "bfloat16", "fp8_e4m3"
  std::optional<std::string> kv_layout;          // e.g. "NHD", or a layout id of the engine
  std::optional<uint32_t> tp_rank;               // tensor-parallel rank of the KV shard
  std::optional<uint32_t> tp_size;               // tensor-parallel world size
  std::optional<std::string> adapter_id;         // LoRA / adapter identity
  std::optional<std::string> salt;               // cache salt or tenant id (isolation)
  HashKind kind = HashKind::kXxh3;
};

// OK if `ctx` can name keys: tp_rank and tp_size both absent or both present with
// tp_rank < tp_size; each string at most kMaxContextFieldBytes; kind a HashKind value.
// Otherwise InvalidArgument naming the field.
Status ValidateKeyContext(const KeyContext& ctx);

// The canonical encoding of the context's fields (docs/KEYS.md §3), for tests and tools.
// REQUIRES: ValidateKeyContext(ctx).ok().
std::vector<uint8_t> EncodeKeyContext(const KeyContext& ctx);

// The context digest hashed into every key (docs/KEYS.md §3). InvalidArgument if the context
// is invalid; Internal if the SHA-256 implementation fails.
StatusOr<BlockKey> ContextDigest(const KeyContext& ctx);

// Keys of the full blocks of `tokens`: tokens.size() / block_tokens keys, key i covering tokens
// [i * block_tokens, (i + 1) * block_tokens); trailing tokens of a partial block get none.
// The first block's parent is `*parent` when given (to continue a chain whose earlier blocks
// were keyed before), else kRootKey. Returns InvalidArgument if block_tokens is 0 or above
// kMaxBlockTokens or the context is invalid; Internal if SHA-256 fails.
StatusOr<std::vector<BlockKey>> ChainKeys(const KeyContext& ctx, std::span<const uint32_t> tokens,
                                          uint32_t block_tokens, const BlockKey* parent = nullptr);

// Keys a request's tokens as they arrive: after any sequence of Append calls, keys() equals
// ChainKeys(ctx, all tokens appended, block_tokens, parent).
class KeyChain {
 public:
  // InvalidArgument as ChainKeys; Internal if SHA-256 fails.
  static StatusOr<KeyChain> Create(const KeyContext& ctx, uint32_t block_tokens,
                                   const BlockKey* parent = nullptr);

  KeyChain(KeyChain&&) noexcept;
  KeyChain& operator=(KeyChain&&) noexcept;
  ~KeyChain();

  // Appends tokens and keys every block they complete. Returns Internal only if SHA-256 fails;
  // the chain is then broken and every later Append fails the same way.
  Status Append(std::span<const uint32_t> tokens);

  // Keys of all full blocks so far, first block first.
  std::span<const BlockKey> keys() const { return keys_; }
  // The parent of the next block: the last key, or the starting parent if there is none.
  const BlockKey& tail() const { return tail_; }
  uint64_t num_tokens() const { return num_tokens_; }
  // Tokens of the current partial block (in [0, block_tokens)).
  uint32_t partial_tokens() const { return partial_; }
  uint32_t block_tokens() const { return block_tokens_; }

 private:
  KeyChain(std::unique_ptr<internal::BlockHasher> hasher, uint32_t block_tokens,
           const BlockKey& parent);

  std::unique_ptr<internal::BlockHasher> hasher_;
  std::vector<BlockKey> keys_;
  BlockKey tail_;
  uint64_t num_tokens_ = 0;
  uint32_t partial_ = 0;
  uint32_t block_tokens_ = 0;
  Status broken_;
};

// Maps an engine's own block hash (opaque bytes, e.g. vLLM's 32-byte block hash; integer
// hashes as 8 little-endian bytes, docs/KEYS.md §5) to a key, under a domain tag of its own so
// it never equals a ChainKeys key. The engine hash must already cover the block's prefix and
// tokens. Returns InvalidArgument if the hash is empty or longer than kMaxEngineHashBytes or
// the context is invalid; Internal if SHA-256 fails.
StatusOr<BlockKey> KeyFromEngineHash(std::span<const uint8_t> engine_hash, const KeyContext& ctx);

// A 64-bit fingerprint of one block's token ids (XXH3-64, seed 0, over the ids as
// little-endian u32; docs/KEYS.md §6), stored next to a block to double-check a hit.
uint64_t TokenFingerprint(std::span<const uint32_t> tokens);

}  // namespace deltakv::kvtier

template <>
struct std::hash<deltakv::kvtier::BlockKey> {
  size_t operator()(const deltakv::kvtier::BlockKey& k) const noexcept {
    return deltakv::kvtier::BlockKeyHash()(k);
  }
};
