// The docs/KEYS.md test vectors (computed by tests/kvtier/keys_reference.py, an independent
// Python implementation; keys_reference_test checks that this file, the spec and the reference
// agree), plus the properties keys must have and the hex form's error handling.
#include "kvtier/keys.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace deltakv::kvtier {
namespace {

std::vector<uint32_t> Range(uint32_t first, uint32_t last) {
  std::vector<uint32_t> v(last - first + 1);
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<uint8_t> HexBytes(std::string_view hex) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

std::string Hex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xf]);
  }
  return out;
}

// The contexts of docs/KEYS.md §7, by name.
KeyContext Context(const std::string& name, HashKind kind) {
  KeyContext c;
  c.kind = kind;
  if (name == "A") return c;
  if (name == "F" || name == "G") {
    c.model_fingerprint = name == "F" ? "ab" : "a";
    c.kv_dtype = name == "F" ? "c" : "bc";
    return c;
  }
  c.model_fingerprint = "meta-llama/Llama-3.1-8B@0e9e39f";
  c.kv_dtype = "bfloat16";
  c.kv_layout = "NHD";
  c.tp_rank = 0;
  c.tp_size = 2;
  if (name == "C") {
    c.adapter_id = "sql-lora";
    c.salt = "tenant-42";
  } else if (name == "D") {
    c.tp_rank = 1;
  } else if (name == "E") {
    c.salt = "";
  }
  return c;
}

std::vector<std::string> HexKeys(const std::vector<BlockKey>& keys) {
  std::vector<std::string> out;
  for (const BlockKey& k : keys) out.push_back(k.ToHex());
  return out;
}

std::vector<BlockKey> MustChain(const KeyContext& ctx, std::span<const uint32_t> tokens,
                                uint32_t block, const BlockKey* parent = nullptr) {
  auto keys = ChainKeys(ctx, tokens, block, parent);
  EXPECT_TRUE(keys.ok()) << keys.status().ToString();
  return keys.ok() ? *keys : std::vector<BlockKey>{};
}

TEST(KeyVectors, ContextEncoding) {
  const std::pair<std::string, std::string> kVectors[] = {
      {"A", "0100020003000400050006000700"},
      {"B",
       "01011f0000006d6574612d6c6c616d612f4c6c616d612d332e312d3842403065396533396602010800000062666"
       "c6f617431360301030000004e484404010000000005010200000006000700"},
      {"C",
       "01011f0000006d6574612d6c6c616d612f4c6c616d612d332e312d3842403065396533396602010800000062666"
       "c6f617431360301030000004e484404010000000005010200000006010800000073716c2d6c6f72610701090000"
       "0074656e616e742d3432"},
  };
  for (const auto& [name, hex] : kVectors) {
    EXPECT_EQ(Hex(EncodeKeyContext(Context(name, HashKind::kXxh3))), hex) << name;
  }
}

TEST(KeyVectors, ContextDigests) {
  struct Vector {
    std::string context;
    HashKind kind;
    std::string digest;
  };
  const Vector kVectors[] = {
      {"A", HashKind::kXxh3, "280eb28f39cb68f47ac2be53330a1cf2"},
      {"A", HashKind::kSha256, "9f00bbaa2cd9cc159a004035434e1273"},
      {"B", HashKind::kXxh3, "446895b5fb3244374e66186db92e7922"},
      {"B", HashKind::kSha256, "23bbfece250710b759a63767f7362b02"},
      {"C", HashKind::kXxh3, "c5cb336b9665a561ae17765b56160025"},
      {"C", HashKind::kSha256, "beb6b5aa045a84e8fd3837b8f4244e1f"},
      {"D", HashKind::kXxh3, "c2b83f5e485ca65190c392c0e06632a9"},
      {"D", HashKind::kSha256, "aba77855a46464bfa46f533a228a4d75"},
      {"E", HashKind::kXxh3, "03fd0484e76c6c18d98a4d9f302cc636"},
      {"E", HashKind::kSha256, "8444a9c21c07bafac3e4602d0020f944"},
      {"F", HashKind::kXxh3, "a6275fca4bb1f6501fecda7ccbc41b50"},
      {"F", HashKind::kSha256, "cc84585eafdbfc40196a036661916220"},
      {"G", HashKind::kXxh3, "58a9e511241b367ca5fb9dd62e73d2b6"},
      {"G", HashKind::kSha256, "340611c24d3b97d471d91dcc6a733554"},
  };
  for (const Vector& v : kVectors) {
    auto d = ContextDigest(Context(v.context, v.kind));
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(d->ToHex(), v.digest) << v.context << " " << HashKindName(v.kind);
  }
}

struct ChainVector {
  std::string context;
  HashKind kind;
  uint32_t block_tokens;
  std::string parent;  // empty: the root
  std::vector<uint32_t> tokens;
  std::vector<std::string> keys;
};

const std::vector<ChainVector>& ChainVectors() {
  static const std::vector<ChainVector> kVectors = {
      {"A",
       HashKind::kXxh3,
       4,
       "",
       Range(1, 10),
       {"a4b5c1a5c0f384a78fa039e5cfef3a2a", "16a06af42ae36c6f9de599e1ae99cac4"}},
      {"B",
       HashKind::kXxh3,
       4,
       "",
       Range(1, 10),
       {"6811a7517873892c0f2492ca0d09dda6", "988fe35c554d50f92303022707901e53"}},
      {"C",
       HashKind::kXxh3,
       4,
       "",
       Range(1, 10),
       {"b5834e559416d36569aa2d3ae62936e0", "e271871610679e7a70300cfe5e35aac3"}},
      {"D",
       HashKind::kXxh3,
       4,
       "",
       Range(1, 10),
       {"3fb9b2214f95baa028bd760958224ef9", "1215bb0d8c0989d98dd63a53df370f39"}},
      {"E",
       HashKind::kXxh3,
       4,
       "",
       Range(1, 10),
       {"5f65bd605409cd61ea09eb6b643fe516", "4dd27ff0e527dc2080d7e1825731cf11"}},
      {"F",
       HashKind::kXxh3,
       4,
       "",
       Range(1, 10),
       {"418a58242ef52ba616477cf417c95a5b", "2a3b094add835695e5d6508dcae2645e"}},
      {"G",
       HashKind::kXxh3,
       4,
       "",
       Range(1, 10),
       {"b0ea9ec0f172a3dcc7501ca6aeb783f7", "8ecbbc53b016bdd5fabf6597014ff3c5"}},
      {"A",
       HashKind::kXxh3,
       4,
       "",
       {1, 2, 3, 4, 5, 99, 7, 8, 9, 10},
       {"a4b5c1a5c0f384a78fa039e5cfef3a2a", "24ec9a2cdffb59b5bd7ac3d5b4f45504"}},
      {"A",
       HashKind::kXxh3,
       4,
       "a4b5c1a5c0f384a78fa039e5cfef3a2a",
       {5, 6, 7, 8},
       {"16a06af42ae36c6f9de599e1ae99cac4"}},
      {"A", HashKind::kXxh3, 4, "", {1, 2, 3}, {}},
      {"A", HashKind::kXxh3, 11, "", Range(1, 10), {}},
      {"B",
       HashKind::kXxh3,
       4,
       "",
       {0, 1, 2147483647, 2147483648, 4294967295, 151643, 128000, 42},
       {"c89e511107d4cab82a681aafaa85bda4", "803ba8de5b4aaa2d81344cc8c459a6a8"}},
      {"B",
       HashKind::kXxh3,
       3,
       "",
       {0, 1, 2147483647, 2147483648, 4294967295, 151643, 128000, 42},
       {"4d8e19c09d23f9f9b08d55fa5dee256c", "933c79afd781c56d64d1238586dae784"}},
      {"B",
       HashKind::kXxh3,
       8,
       "",
       {0, 1, 2147483647, 2147483648, 4294967295, 151643, 128000, 42},
       {"332c256c3138961b0b3311bc94db8514"}},
      {"B",
       HashKind::kXxh3,
       16,
       "",
       Range(0, 63),
       {"9f78f122fb427ae40a494673c0b5b3d9", "5605425dc3e40788c9ff2c7867ad599a",
        "da8d46a147a643a6a95afbf10252970d", "14a959f82fa7866129a4577f0e301e5e"}},
      {"A",
       HashKind::kSha256,
       4,
       "",
       Range(1, 10),
       {"8224ce8420ee20ceac254b6b4ced855e", "8c913f14f454a93902a245458879474f"}},
      {"B",
       HashKind::kSha256,
       4,
       "",
       Range(1, 10),
       {"77d168fe7902c2be478400db0db32301", "3305edef554ca224358ca792408bddf9"}},
      {"C",
       HashKind::kSha256,
       4,
       "",
       Range(1, 10),
       {"f66d75feb776253ddcc4787ad72ecf3f", "61282281bf883cca0c19cfe20f2de1be"}},
      {"D",
       HashKind::kSha256,
       4,
       "",
       Range(1, 10),
       {"029e878dfa2bab26db8ec18a857223a6", "c69742891a609e55ec7f6959cb22cd4b"}},
      {"E",
       HashKind::kSha256,
       4,
       "",
       Range(1, 10),
       {"227c06f10eccece1032527e4f63f6487", "41f6fb32fcdbc6983e9e2c0b6fff4a82"}},
      {"F",
       HashKind::kSha256,
       4,
       "",
       Range(1, 10),
       {"f7748b6cf75bcb2aae1b174d6bc8bd49", "5617b53c72bd1258347d2369ebe0ba5b"}},
      {"G",
       HashKind::kSha256,
       4,
       "",
       Range(1, 10),
       {"d0dfd87cdbb29f3e693e7b3fc25e91df", "b12d8b279715b86d111db910752c6e79"}},
      {"A",
       HashKind::kSha256,
       4,
       "",
       {1, 2, 3, 4, 5, 99, 7, 8, 9, 10},
       {"8224ce8420ee20ceac254b6b4ced855e", "29127ff455516cd84945e46d47572c85"}},
      {"A",
       HashKind::kSha256,
       4,
       "8224ce8420ee20ceac254b6b4ced855e",
       {5, 6, 7, 8},
       {"8c913f14f454a93902a245458879474f"}},
      {"A", HashKind::kSha256, 4, "", {1, 2, 3}, {}},
      {"A", HashKind::kSha256, 11, "", Range(1, 10), {}},
      {"B",
       HashKind::kSha256,
       4,
       "",
       {0, 1, 2147483647, 2147483648, 4294967295, 151643, 128000, 42},
       {"2f11848bad1c0d633f89e4987cfa7c1a", "ca737ee694c5448adb5174ba7d44c188"}},
      {"B",
       HashKind::kSha256,
       3,
       "",
       {0, 1, 2147483647, 2147483648, 4294967295, 151643, 128000, 42},
       {"4fe62ec44255291d9cfae6cec7bf1dd4", "9f6d96a159110227d67db50f4d256b4c"}},
      {"B",
       HashKind::kSha256,
       8,
       "",
       {0, 1, 2147483647, 2147483648, 4294967295, 151643, 128000, 42},
       {"b7e34f8605265933aad59a96b44998cb"}},
      {"B",
       HashKind::kSha256,
       16,
       "",
       Range(0, 63),
       {"f29fc022a392cd3784614eb29b9c7a8c", "e8c433bda843c08258f5e53cb5bde920",
        "9618e784853e1bab77bddf8fe5d2aff1", "18d45c10fb63d8ca856fea8f571bcfd6"}},
  };
  return kVectors;
}

TEST(KeyVectors, ChainKeys) {
  for (const ChainVector& v : ChainVectors()) {
    BlockKey parent = kRootKey;
    if (!v.parent.empty()) parent = *BlockKey::FromHex(v.parent);
    EXPECT_EQ(HexKeys(MustChain(Context(v.context, v.kind), v.tokens, v.block_tokens, &parent)),
              v.keys)
        << v.context << " " << HashKindName(v.kind) << " block " << v.block_tokens;
  }
}

TEST(KeyVectors, KeyChainMatchesVectors) {
  for (const ChainVector& v : ChainVectors()) {
    BlockKey parent = kRootKey;
    if (!v.parent.empty()) parent = *BlockKey::FromHex(v.parent);
    auto chain = KeyChain::Create(Context(v.context, v.kind), v.block_tokens, &parent);
    ASSERT_TRUE(chain.ok()) << chain.status().ToString();
    for (uint32_t t : v.tokens) ASSERT_TRUE(chain->Append(std::span(&t, 1)).ok());
    EXPECT_EQ(HexKeys({chain->keys().begin(), chain->keys().end()}), v.keys) << v.context;
    EXPECT_EQ(chain->partial_tokens(), v.tokens.size() % v.block_tokens);
  }
}

TEST(KeyVectors, EngineHashes) {
  struct Vector {
    std::string context;
    HashKind kind;
    std::string engine_hash;
    std::string key;
  };
  const Vector kVectors[] = {
      {"A", HashKind::kXxh3, "fa8e730bce6dbc9102511486407c1db4ac6ee0c9cc367b8766a707fd0eae2ac0",
       "53aee552edae35ce3a5ba86a9565ab4d"},
      {"A", HashKind::kXxh3, "efcdab8967452301", "84f3f98cc9a05724dc19795bcee334e5"},
      {"A", HashKind::kXxh3, "feffffffffffffff", "ec7114d686f43e9c4f45ecbed8cc7bfb"},
      {"B", HashKind::kXxh3, "fa8e730bce6dbc9102511486407c1db4ac6ee0c9cc367b8766a707fd0eae2ac0",
       "4f8a403f1267064b8bd3b4230df49400"},
      {"B", HashKind::kXxh3, "efcdab8967452301", "ad889a88aa8f92c43fbc421da96a6945"},
      {"B", HashKind::kXxh3, "feffffffffffffff", "3030a6d089b365ef53ac4073b233dbda"},
      {"A", HashKind::kSha256, "fa8e730bce6dbc9102511486407c1db4ac6ee0c9cc367b8766a707fd0eae2ac0",
       "d5c8b413be4da1058dce4cc3155ab20d"},
      {"A", HashKind::kSha256, "efcdab8967452301", "6098f01caf59197ca5b7bad2112ca281"},
      {"A", HashKind::kSha256, "feffffffffffffff", "c978c85bf24c7ae71720f8a5e680a7c2"},
      {"B", HashKind::kSha256, "fa8e730bce6dbc9102511486407c1db4ac6ee0c9cc367b8766a707fd0eae2ac0",
       "38ab8d24ffa600d43044b7e0fe9ae544"},
      {"B", HashKind::kSha256, "efcdab8967452301", "b329c03db0b00af8e715ebbf31ec8c37"},
      {"B", HashKind::kSha256, "feffffffffffffff", "bbcb4b3acfd38b2c246a3dbb935b239c"},
  };
  for (const Vector& v : kVectors) {
    auto key = KeyFromEngineHash(HexBytes(v.engine_hash), Context(v.context, v.kind));
    ASSERT_TRUE(key.ok()) << key.status().ToString();
    EXPECT_EQ(key->ToHex(), v.key) << v.context << " " << v.engine_hash;
  }
}

TEST(KeyVectors, TokenFingerprints) {
  const std::pair<std::vector<uint32_t>, uint64_t> kVectors[] = {
      {{}, 0x2d06800538d394c2u},
      {{0}, 0x48b2c92616fc193du},
      {{1, 2, 3, 4}, 0x6fc1ebd4f4d6ea31u},
      {{0, 1, 2147483647, 2147483648, 4294967295, 151643, 128000, 42}, 0x1e83d6ca096ed992u},
      {Range(0, 15), 0x79c2079c74a8ee4du},
  };
  for (const auto& [tokens, fp] : kVectors) EXPECT_EQ(TokenFingerprint(tokens), fp);
}

// ---- properties ----------------------------------------------------------------------------

class KeyProperties : public ::testing::TestWithParam<HashKind> {
 protected:
  KeyContext Ctx() const { return Context("C", GetParam()); }
  std::vector<uint32_t> RandomTokens(size_t n, uint32_t seed) const {
    std::mt19937 rng(seed);
    std::vector<uint32_t> v(n);
    for (uint32_t& t : v) t = static_cast<uint32_t>(rng());
    return v;
  }
};

TEST_P(KeyProperties, PrefixKeysArePrefixOfKeys) {
  const std::vector<uint32_t> tokens = RandomTokens(1000, 1);
  for (uint32_t block : {1u, 3u, 16u, 64u}) {
    const std::vector<BlockKey> all = MustChain(Ctx(), tokens, block);
    ASSERT_EQ(all.size(), tokens.size() / block);
    for (size_t n : {size_t{0}, size_t{1}, size_t{block}, size_t{block + 1}, size_t{517}}) {
      const std::vector<BlockKey> prefix = MustChain(Ctx(), std::span(tokens).first(n), block);
      ASSERT_EQ(prefix.size(), n / block);
      EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), all.begin())) << block << " " << n;
    }
  }
}

TEST_P(KeyProperties, ContinuingFromAParentEqualsOneChain) {
  const std::vector<uint32_t> tokens = RandomTokens(96, 2);
  const std::vector<BlockKey> all = MustChain(Ctx(), tokens, 16);
  const std::vector<BlockKey> tail = MustChain(Ctx(), std::span(tokens).subspan(32), 16, &all[1]);
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), all.begin() + 2));
}

TEST_P(KeyProperties, ChangingAnyTokenChangesThatBlockAndAllLater) {
  const uint32_t block = 8;
  std::vector<uint32_t> tokens = RandomTokens(64, 3);
  const std::vector<BlockKey> base = MustChain(Ctx(), tokens, block);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] ^= 1u << (i % 32);
    const std::vector<BlockKey> changed = MustChain(Ctx(), tokens, block);
    tokens[i] ^= 1u << (i % 32);
    for (size_t b = 0; b < base.size(); ++b) {
      if (b < i / block) {
        EXPECT_EQ(changed[b], base[b]) << "token " << i << " block " << b;
      } else {
        EXPECT_NE(changed[b], base[b]) << "token " << i << " block " << b;
      }
    }
  }
}

TEST_P(KeyProperties, ChangingAnyExtraKeyChangesEveryKey) {
  const std::vector<uint32_t> tokens = RandomTokens(48, 4);
  std::vector<KeyContext> variants;
  const KeyContext base = Ctx();
  auto add = [&](auto mutate) {
    KeyContext c = base;
    mutate(c);
    variants.push_back(c);
  };
  add([](KeyContext&) {});
  add([](KeyContext& c) { c.model_fingerprint = "meta-llama/Llama-3.1-8B@0e9e39e"; });
  add([](KeyContext& c) { c.model_fingerprint.reset(); });
  add([](KeyContext& c) { c.kv_dtype = "fp8_e4m3"; });
  add([](KeyContext& c) { c.kv_dtype.reset(); });
  add([](KeyContext& c) { c.kv_layout = "HND"; });
  add([](KeyContext& c) { c.kv_layout = ""; });
  add([](KeyContext& c) { c.tp_rank = 1; });
  add([](KeyContext& c) { c.tp_size = 4; });
  add([](KeyContext& c) { c.tp_rank.reset(), c.tp_size.reset(); });
  add([](KeyContext& c) { c.adapter_id = "sql-lora2"; });
  add([](KeyContext& c) { c.adapter_id.reset(); });
  add([](KeyContext& c) { c.salt = "tenant-43"; });
  add([](KeyContext& c) { c.salt = ""; });
  add([](KeyContext& c) { c.salt.reset(); });
  // Moving bytes between adjacent fields must not collide (length prefixes).
  add([](KeyContext& c) { c.model_fingerprint = "meta-llama/Llama-3.1-8B@0e9e39fb"; });
  add([](KeyContext& c) { c.kv_dtype = "float16"; });
  std::unordered_set<BlockKey> seen;
  for (const KeyContext& c : variants) {
    for (const BlockKey& k : MustChain(c, tokens, 16)) EXPECT_TRUE(seen.insert(k).second);
    auto engine = KeyFromEngineHash(HexBytes("0102030405060708"), c);
    ASSERT_TRUE(engine.ok());
    EXPECT_TRUE(seen.insert(*engine).second);
  }
  EXPECT_EQ(seen.size(), variants.size() * 4);
}

TEST_P(KeyProperties, BlockSizeIsPartOfTheKey) {
  const std::vector<uint32_t> tokens = RandomTokens(64, 5);
  EXPECT_NE(MustChain(Ctx(), tokens, 16)[1], MustChain(Ctx(), tokens, 32)[0]);
}

TEST_P(KeyProperties, IncrementalChainEqualsChainKeys) {
  const std::vector<uint32_t> tokens = RandomTokens(2000, 6);
  std::mt19937 rng(7);
  for (uint32_t block : {1u, 5u, 16u, 256u}) {
    auto chain = KeyChain::Create(Ctx(), block);
    ASSERT_TRUE(chain.ok());
    size_t at = 0;
    while (at < tokens.size()) {
      const size_t n = std::min<size_t>(rng() % 300, tokens.size() - at);
      ASSERT_TRUE(chain->Append(std::span(tokens).subspan(at, n)).ok());
      at += n;
      const std::vector<BlockKey> want = MustChain(Ctx(), std::span(tokens).first(at), block);
      ASSERT_EQ(std::vector<BlockKey>(chain->keys().begin(), chain->keys().end()), want);
      EXPECT_EQ(chain->num_tokens(), at);
      EXPECT_EQ(chain->partial_tokens(), at % block);
      EXPECT_EQ(chain->tail(), want.empty() ? kRootKey : want.back());
    }
  }
}

TEST_P(KeyProperties, EngineKeysNeverEqualChainKeysOfTheSameBytes) {
  // A block message and an engine message differ in their domain tag.
  const std::vector<uint32_t> tokens = {1, 2, 3, 4};
  const BlockKey chained = MustChain(Ctx(), tokens, 4)[0];
  auto engine = KeyFromEngineHash(
      std::span(reinterpret_cast<const uint8_t*>(tokens.data()), tokens.size() * 4), Ctx());
  ASSERT_TRUE(engine.ok());
  EXPECT_NE(chained, *engine);
}

std::string KindName(const ::testing::TestParamInfo<HashKind>& p) {
  return std::string(HashKindName(p.param));
}

INSTANTIATE_TEST_SUITE_P(BothHashes, KeyProperties,
                         ::testing::Values(HashKind::kXxh3, HashKind::kSha256), KindName);

// ---- bad input ------------------------------------------------------------------------------

TEST(KeyErrors, BadBlockTokens) {
  const std::vector<uint32_t> tokens = Range(1, 10);
  EXPECT_EQ(ChainKeys({}, tokens, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ChainKeys({}, tokens, kMaxBlockTokens + 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(ChainKeys({}, tokens, kMaxBlockTokens).ok());
  EXPECT_EQ(KeyChain::Create({}, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(KeyErrors, BadContexts) {
  KeyContext rank_only;
  rank_only.tp_rank = 0;
  KeyContext rank_too_big;
  rank_too_big.tp_rank = 2;
  rank_too_big.tp_size = 2;
  KeyContext long_salt;
  long_salt.salt = std::string(kMaxContextFieldBytes + 1, 'x');
  KeyContext bad_kind;
  bad_kind.kind = static_cast<HashKind>(7);
  const std::vector<uint32_t> tokens = Range(1, 8);
  for (const KeyContext& c : {rank_only, rank_too_big, long_salt, bad_kind}) {
    EXPECT_EQ(ValidateKeyContext(c).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(ChainKeys(c, tokens, 4).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(KeyChain::Create(c, 4).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(KeyFromEngineHash(HexBytes("01"), c).status().code(), StatusCode::kInvalidArgument);
  }
  long_salt.salt->pop_back();
  EXPECT_TRUE(ValidateKeyContext(long_salt).ok());
}

TEST(KeyErrors, BadEngineHashLength) {
  EXPECT_EQ(KeyFromEngineHash({}, {}).status().code(), StatusCode::kInvalidArgument);
  const std::vector<uint8_t> too_long(kMaxEngineHashBytes + 1, 0xab);
  EXPECT_EQ(KeyFromEngineHash(too_long, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(KeyFromEngineHash(std::span(too_long).first(kMaxEngineHashBytes), {}).ok());
}

// ---- hex form -------------------------------------------------------------------------------

TEST(BlockKeyHex, RoundTripAndByteOrder) {
  const BlockKey k{0x08090a0b0c0d0e0fULL, 0x0001020304050607ULL};
  EXPECT_EQ(k.ToHex(), "000102030405060708090a0b0c0d0e0f");
  EXPECT_EQ(Hex(k.Bytes()), "000102030405060708090a0b0c0d0e0f");
  EXPECT_EQ(BlockKey::FromBytes(k.Bytes()), k);
  auto parsed = BlockKey::FromHex("000102030405060708090A0B0C0D0E0F");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, k);
  std::mt19937_64 rng(8);
  for (int i = 0; i < 1000; ++i) {
    const BlockKey r{rng(), rng()};
    auto back = BlockKey::FromHex(r.ToHex());
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, r);
  }
}

TEST(BlockKeyHex, RejectsBadInput) {
  const std::string good = "000102030405060708090a0b0c0d0e0f";
  for (std::string bad :
       {std::string(), good.substr(1), good + "0", "0x" + good.substr(2), " " + good.substr(1),
        good.substr(0, 31) + "g", good.substr(0, 10) + "-" + good.substr(11),
        good.substr(0, 31) + std::string(1, '\0')}) {
    auto k = BlockKey::FromHex(bad);
    EXPECT_EQ(k.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(BlockKey::FromHex(good.substr(0, 31) + "g").status().message().find("character 31"),
            std::string::npos);
}

TEST(BlockKeyHex, HashingForUnorderedContainers) {
  std::unordered_set<BlockKey> set;
  std::unordered_map<BlockKey, int, BlockKeyHash> map;
  const std::vector<BlockKey> keys = MustChain({}, Range(0, 1023), 4);
  for (const BlockKey& k : keys) {
    set.insert(k);
    map[k] = 1;
  }
  EXPECT_EQ(set.size(), keys.size());
  EXPECT_EQ(map.size(), keys.size());
  EXPECT_EQ(std::hash<BlockKey>()(keys[0]), BlockKeyHash()(keys[0]));
}

}  // namespace
}  // namespace deltakv::kvtier
