// Key contexts, chained block keys, engine-hash keys and token fingerprints (docs/KEYS.md).
#include "kvtier/keys.h"

#include <openssl/evp.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

namespace deltakv::kvtier {
namespace {

// Domain tags, 16 bytes each (docs/KEYS.md §1).
constexpr char kContextTag[17] = "deltakv/kv-ctx\0\0";
constexpr char kBlockTag[17] = "deltakv/kv-block";
constexpr char kEngineTag[17] = "deltakv/kv-eng\0\0";
constexpr size_t kTagBytes = 16;

// Block message layout (docs/KEYS.md §4).
constexpr size_t kBlockVersionOffset = 16;
constexpr size_t kBlockContextOffset = 20;
constexpr size_t kBlockParentOffset = 36;
constexpr size_t kBlockCountOffset = 52;
constexpr size_t kBlockTokensOffset = 56;

void StoreLe32(uint32_t v, uint8_t* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

void AppendLe32(uint32_t v, std::vector<uint8_t>* out) {
  uint8_t b[4];
  StoreLe32(v, b);
  out->insert(out->end(), b, b + 4);
}

void AppendBytes(const void* p, size_t n, std::vector<uint8_t>* out) {
  const auto* b = static_cast<const uint8_t*>(p);
  out->insert(out->end(), b, b + n);
}

void AppendKey(const BlockKey& k, std::vector<uint8_t>* out) {
  const std::array<uint8_t, 16> b = k.Bytes();
  out->insert(out->end(), b.begin(), b.end());
}

// Writes the tokens as little-endian u32.
void StoreTokens(std::span<const uint32_t> tokens, uint8_t* dst) {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(dst, tokens.data(), tokens.size_bytes());
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) StoreLe32(tokens[i], dst + 4 * i);
  }
}

const EVP_MD* Sha256() {
  static const EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);  // never freed
  return md;
}

struct EvpCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using EvpCtx = std::unique_ptr<EVP_MD_CTX, EvpCtxFree>;

// H(message) for `kind`, in canonical byte order, into *out. `sha` is a reusable context
// (SHA-256 only). Returns false only if OpenSSL fails. (A bool, not a StatusOr: this runs per
// block, and a Status per block costs more than XXH3 of a small block.)
bool Digest(HashKind kind, EVP_MD_CTX* sha, std::span<const uint8_t> msg, BlockKey* out) {
  if (kind == HashKind::kXxh3) {
    const XXH128_hash_t h = XXH3_128bits(msg.data(), msg.size());
    *out = BlockKey{h.low64, h.high64};
    return true;
  }
  const EVP_MD* md = Sha256();
  uint8_t d[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (md == nullptr || sha == nullptr || EVP_DigestInit_ex2(sha, md, nullptr) != 1 ||
      EVP_DigestUpdate(sha, msg.data(), msg.size()) != 1 || EVP_DigestFinal_ex(sha, d, &n) != 1 ||
      n != 32) {
    return false;
  }
  *out = BlockKey::FromBytes(std::span<const uint8_t, 16>(d, 16));
  return true;
}

Status Sha256Failed() { return Internal("kvtier keys: OpenSSL SHA-256 failed"); }

// One SHA-256 context per thread for one-shot digests (contexts, engine hashes).
EVP_MD_CTX* ThreadSha256Context() {
  thread_local EvpCtx ctx(EVP_MD_CTX_new());
  return ctx.get();
}

StatusOr<BlockKey> OneShotDigest(HashKind kind, std::span<const uint8_t> msg) {
  BlockKey key;
  if (!Digest(kind, kind == HashKind::kSha256 ? ThreadSha256Context() : nullptr, msg, &key)) {
    return Sha256Failed();
  }
  return key;
}

void AppendTagAndVersion(const char* tag, std::vector<uint8_t>* out) {
  AppendBytes(tag, kTagBytes, out);
  AppendLe32(kKeySpecVersion, out);
}

Status ValidateBlockTokens(uint32_t block_tokens) {
  if (block_tokens == 0 || block_tokens > kMaxBlockTokens) {
    return InvalidArgument("kvtier keys: block_tokens " + std::to_string(block_tokens) +
                           " outside [1, " + std::to_string(kMaxBlockTokens) + "]");
  }
  return Status::Ok();
}

}  // namespace

namespace internal {

// Keeps one block message (tag, version, context digest, parent, count, tokens) in a buffer
// allocated once; callers write tokens into token_area() and call Hash per block.
class BlockHasher {
 public:
  static StatusOr<BlockHasher> Create(const KeyContext& ctx, uint32_t block_tokens) {
    RETURN_IF_ERROR(ValidateBlockTokens(block_tokens));
    ASSIGN_OR_RETURN(const BlockKey context, ContextDigest(ctx));
    BlockHasher h;
    h.kind_ = ctx.kind;
    if (h.kind_ == HashKind::kSha256) {
      h.sha_.reset(EVP_MD_CTX_new());
      if (h.sha_ == nullptr) return Internal("kvtier keys: EVP_MD_CTX_new failed");
    }
    h.message_.reserve(kBlockTokensOffset + 4 * size_t{block_tokens});
    AppendTagAndVersion(kBlockTag, &h.message_);
    AppendKey(context, &h.message_);
    AppendKey(kRootKey, &h.message_);
    AppendLe32(block_tokens, &h.message_);
    h.message_.resize(kBlockTokensOffset + 4 * size_t{block_tokens});
    return h;
  }

  uint8_t* token_area() { return message_.data() + kBlockTokensOffset; }

  // Sets *key to the key of the block now in token_area(), under `parent`. Returns false only
  // if SHA-256 fails.
  bool Hash(const BlockKey& parent, BlockKey* key) {
    const std::array<uint8_t, 16> p = parent.Bytes();
    std::memcpy(message_.data() + kBlockParentOffset, p.data(), p.size());
    return Digest(kind_, sha_.get(), message_, key);
  }

 private:
  HashKind kind_ = HashKind::kXxh3;
  EvpCtx sha_;
  std::vector<uint8_t> message_;
};

}  // namespace internal

Status ValidateKeyContext(const KeyContext& ctx) {
  if (ctx.kind != HashKind::kXxh3 && ctx.kind != HashKind::kSha256) {
    return InvalidArgument("kvtier key context: unknown hash kind " +
                           std::to_string(static_cast<int>(ctx.kind)));
  }
  if (ctx.tp_rank.has_value() != ctx.tp_size.has_value()) {
    return InvalidArgument("kvtier key context: tp_rank and tp_size must be given together");
  }
  if (ctx.tp_rank && *ctx.tp_rank >= *ctx.tp_size) {
    return InvalidArgument("kvtier key context: tp_rank " + std::to_string(*ctx.tp_rank) +
                           " not below tp_size " + std::to_string(*ctx.tp_size));
  }
  const std::pair<const char*, const std::optional<std::string>*> strings[] = {
      {"model_fingerprint", &ctx.model_fingerprint},
      {"kv_dtype", &ctx.kv_dtype},
      {"kv_layout", &ctx.kv_layout},
      {"adapter_id", &ctx.adapter_id},
      {"salt", &ctx.salt}};
  for (const auto& [name, value] : strings) {
    if (*value && (*value)->size() > kMaxContextFieldBytes) {
      return InvalidArgument("kvtier key context: " + std::string(name) + " is " +
                             std::to_string((*value)->size()) + " bytes, more than " +
                             std::to_string(kMaxContextFieldBytes));
    }
  }
  return Status::Ok();
}

std::vector<uint8_t> EncodeKeyContext(const KeyContext& ctx) {
  std::vector<uint8_t> out;
  auto put_string = [&out](uint8_t id, const std::optional<std::string>& v) {
    out.push_back(id);
    out.push_back(v ? 1 : 0);
    if (v) {
      AppendLe32(static_cast<uint32_t>(v->size()), &out);
      AppendBytes(v->data(), v->size(), &out);
    }
  };
  auto put_u32 = [&out](uint8_t id, const std::optional<uint32_t>& v) {
    out.push_back(id);
    out.push_back(v ? 1 : 0);
    if (v) AppendLe32(*v, &out);
  };
  put_string(1, ctx.model_fingerprint);
  put_string(2, ctx.kv_dtype);
  put_string(3, ctx.kv_layout);
  put_u32(4, ctx.tp_rank);
  put_u32(5, ctx.tp_size);
  put_string(6, ctx.adapter_id);
  put_string(7, ctx.salt);
  return out;
}

StatusOr<BlockKey> ContextDigest(const KeyContext& ctx) {
  RETURN_IF_ERROR(ValidateKeyContext(ctx));
  std::vector<uint8_t> msg;
  AppendTagAndVersion(kContextTag, &msg);
  const std::vector<uint8_t> fields = EncodeKeyContext(ctx);
  msg.insert(msg.end(), fields.begin(), fields.end());
  return OneShotDigest(ctx.kind, msg);
}

StatusOr<std::vector<BlockKey>> ChainKeys(const KeyContext& ctx, std::span<const uint32_t> tokens,
                                          uint32_t block_tokens, const BlockKey* parent) {
  ASSIGN_OR_RETURN(internal::BlockHasher hasher, internal::BlockHasher::Create(ctx, block_tokens));
  const size_t blocks = tokens.size() / block_tokens;
  std::vector<BlockKey> keys;
  keys.reserve(blocks);
  BlockKey prev = parent ? *parent : kRootKey;
  for (size_t i = 0; i < blocks; ++i) {
    StoreTokens(tokens.subspan(i * block_tokens, block_tokens), hasher.token_area());
    if (!hasher.Hash(prev, &prev)) return Sha256Failed();
    keys.push_back(prev);
  }
  return keys;
}

KeyChain::KeyChain(std::unique_ptr<internal::BlockHasher> hasher, uint32_t block_tokens,
                   const BlockKey& parent)
    : hasher_(std::move(hasher)), tail_(parent), block_tokens_(block_tokens) {}
KeyChain::KeyChain(KeyChain&&) noexcept = default;
KeyChain& KeyChain::operator=(KeyChain&&) noexcept = default;
KeyChain::~KeyChain() = default;

StatusOr<KeyChain> KeyChain::Create(const KeyContext& ctx, uint32_t block_tokens,
                                    const BlockKey* parent) {
  ASSIGN_OR_RETURN(internal::BlockHasher hasher, internal::BlockHasher::Create(ctx, block_tokens));
  return KeyChain(std::make_unique<internal::BlockHasher>(std::move(hasher)), block_tokens,
                  parent ? *parent : kRootKey);
}

Status KeyChain::Append(std::span<const uint32_t> tokens) {
  RETURN_IF_ERROR(broken_);
  while (!tokens.empty()) {
    const size_t take = std::min<size_t>(block_tokens_ - partial_, tokens.size());
    StoreTokens(tokens.first(take), hasher_->token_area() + 4 * size_t{partial_});
    tokens = tokens.subspan(take);
    partial_ += static_cast<uint32_t>(take);
    num_tokens_ += take;
    if (partial_ < block_tokens_) break;
    if (!hasher_->Hash(tail_, &tail_)) {
      broken_ = Sha256Failed();
      return broken_;
    }
    keys_.push_back(tail_);
    partial_ = 0;
  }
  return Status::Ok();
}

StatusOr<BlockKey> KeyFromEngineHash(std::span<const uint8_t> engine_hash, const KeyContext& ctx) {
  if (engine_hash.empty() || engine_hash.size() > kMaxEngineHashBytes) {
    return InvalidArgument("kvtier keys: engine hash of " + std::to_string(engine_hash.size()) +
                           " bytes; expected 1 to " + std::to_string(kMaxEngineHashBytes));
  }
  ASSIGN_OR_RETURN(const BlockKey context, ContextDigest(ctx));
  std::vector<uint8_t> msg;
  msg.reserve(kTagBytes + 4 + 16 + 4 + engine_hash.size());
  AppendTagAndVersion(kEngineTag, &msg);
  AppendKey(context, &msg);
  AppendLe32(static_cast<uint32_t>(engine_hash.size()), &msg);
  AppendBytes(engine_hash.data(), engine_hash.size(), &msg);
  return OneShotDigest(ctx.kind, msg);
}

uint64_t TokenFingerprint(std::span<const uint32_t> tokens) {
  if constexpr (std::endian::native == std::endian::little) {
    return XXH3_64bits(tokens.data(), tokens.size_bytes());
  } else {
    std::vector<uint8_t> bytes(tokens.size_bytes());
    StoreTokens(tokens, bytes.data());
    return XXH3_64bits(bytes.data(), bytes.size());
  }
}

}  // namespace deltakv::kvtier
