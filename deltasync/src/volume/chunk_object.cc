#include "volume/chunk_object.h"

#include <zstd.h>

#include <algorithm>
#include <cstring>

#include "sha256.h"

namespace deltakv::deltasync {
namespace {

constexpr char kMagic[4] = {'D', 'K', 'V', 'C'};
constexpr uint8_t kVersion = 1;
constexpr uint8_t kCodecRaw = 0;
constexpr uint8_t kCodecZstd = 1;
constexpr uint8_t kCodecXorZstd = 2;
constexpr int kZstdLevel = 3;

std::string Header(uint8_t codec, uint64_t size) {
  std::string out(kMagic, sizeof(kMagic));
  out += static_cast<char>(kVersion);
  out += static_cast<char>(codec);
  out += std::string(2, '\0');
  for (int i = 0; i < 8; ++i) out += static_cast<char>((size >> (8 * i)) & 0xff);
  return out;
}

StatusOr<std::string> Decompress(const std::string& key, std::string_view payload, uint64_t size) {
  std::string out(size, '\0');
  const size_t n = ZSTD_decompress(out.data(), out.size(), payload.data(), payload.size());
  if (ZSTD_isError(n)) {
    return DataLoss("chunk object '" + key + "': zstd payload does not decompress to " +
                    std::to_string(size) + " bytes: " + ZSTD_getErrorName(n));
  }
  if (n != size) {
    return DataLoss("chunk object '" + key + "': zstd payload decompresses to " +
                    std::to_string(n) + " bytes, header says " + std::to_string(size));
  }
  return out;
}

// Checks the header of a chunk or delta object for `expected_size` bytes; returns the codec.
StatusOr<uint8_t> CheckHeader(const std::string& where, std::string_view object,
                              uint64_t expected_size) {
  if (object.size() < kChunkHeaderBytes || std::memcmp(object.data(), kMagic, 4) != 0) {
    return DataLoss(where + ": missing 'DKVC' header");
  }
  const auto version = static_cast<uint8_t>(object[4]);
  if (version != kVersion || object[6] != 0 || object[7] != 0) {
    return DataLoss(where + ": version " + std::to_string(version) +
                    " or reserved bytes not supported");
  }
  uint64_t size = 0;
  for (int i = 0; i < 8; ++i) size |= uint64_t{static_cast<uint8_t>(object[8 + i])} << (8 * i);
  if (size != expected_size) {
    return DataLoss(where + ": holds " + std::to_string(size) + " bytes, manifest says " +
                    std::to_string(expected_size));
  }
  return static_cast<uint8_t>(object[5]);
}

}  // namespace

std::string EncodeChunkObject(std::span<const uint8_t> chunk) {
  std::string compressed(ZSTD_compressBound(chunk.size()), '\0');
  const size_t n =
      ZSTD_compress(compressed.data(), compressed.size(), chunk.data(), chunk.size(), kZstdLevel);
  if (!ZSTD_isError(n) && n < chunk.size()) {
    compressed.resize(n);
    return Header(kCodecZstd, chunk.size()) + compressed;
  }
  return Header(kCodecRaw, chunk.size()) +
         std::string(reinterpret_cast<const char*>(chunk.data()), chunk.size());
}

uint64_t MaxChunkObjectBytes(uint64_t chunk_size) {
  return kChunkHeaderBytes + std::max<uint64_t>(ZSTD_compressBound(chunk_size), chunk_size);
}

std::string EncodeXorChunkObject(std::span<const uint8_t> chunk, std::span<const uint8_t> base) {
  std::string x(chunk.size(), '\0');
  for (size_t i = 0; i < chunk.size(); ++i) x[i] = static_cast<char>(chunk[i] ^ base[i]);
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, kZstdLevel);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  std::string frame(ZSTD_compressBound(x.size()), '\0');
  const size_t n = ZSTD_compress2(cctx, frame.data(), frame.size(), x.data(), x.size());
  ZSTD_freeCCtx(cctx);
  // Compressing into a buffer of ZSTD_compressBound bytes cannot fail.
  frame.resize(ZSTD_isError(n) ? 0 : n);
  return Header(kCodecXorZstd, chunk.size()) + frame;
}

StatusOr<std::string> ApplyXorChunkObject(const std::string& key, std::string_view object,
                                          std::string_view base) {
  const std::string where = "delta object '" + key + "'";
  ASSIGN_OR_RETURN(uint8_t codec, CheckHeader(where, object, base.size()));
  if (codec != kCodecXorZstd) {
    return DataLoss(where + ": codec " + std::to_string(codec) + " is not 2 (XOR + zstd)");
  }
  ASSIGN_OR_RETURN(std::string bytes,
                   Decompress(key, object.substr(kChunkHeaderBytes), base.size()));
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] ^= base[i];
  return bytes;
}

StatusOr<std::string> DecodeChunkObject(const std::string& key, std::string_view object,
                                        uint64_t expected_size, std::string_view expected_digest) {
  const std::string where = "chunk object '" + key + "'";
  ASSIGN_OR_RETURN(uint8_t codec, CheckHeader(where, object, expected_size));
  const uint64_t size = expected_size;
  const std::string_view payload = object.substr(kChunkHeaderBytes);
  std::string bytes;
  if (codec == kCodecZstd) {
    ASSIGN_OR_RETURN(bytes, Decompress(key, payload, size));
  } else if (codec == kCodecRaw && payload.size() == size) {
    bytes = std::string(payload);
  } else {
    return DataLoss(where + ": codec " + std::to_string(codec) + " with a " +
                    std::to_string(payload.size()) + "-byte payload for " + std::to_string(size) +
                    " bytes");
  }
  const std::string actual =
      Sha256Hex({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
  if (actual != expected_digest) {
    return DataLoss(where + ": sha256 of the chunk is " + actual + ", expected " +
                    std::string(expected_digest));
  }
  return bytes;
}

}  // namespace deltakv::deltasync
