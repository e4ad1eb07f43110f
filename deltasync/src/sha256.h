// Private: incremental SHA-256 (OpenSSL EVP) with lowercase hex output.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace deltakv::deltasync {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(std::span<const uint8_t> bytes);
  // Returns 64 lowercase hex digits; the object must not be updated afterwards.
  std::string HexDigest();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::string Sha256Hex(std::span<const uint8_t> bytes);

}  // namespace deltakv::deltasync
