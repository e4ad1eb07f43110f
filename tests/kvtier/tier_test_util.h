// Helpers for the tier API tests: a fake engine KV memory in the two engine layouts with a
// plain reference for where each byte of a block lives, and copy engines that fail or stall.
#pragma once

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "kvtier/copy_engine.h"
#include "kvtier/kv_layout.h"
#include "pool_test_util.h"

namespace deltakv::kvtier::testing {

inline constexpr uint8_t kCanary = 0xCD;  // bytes of engine memory outside every block

enum class FakeLayoutKind {
  kPerLayerKV,     // separate K and V tensors per layer
  kPerLayerFused,  // one tensor per layer
  kCrossLayer,     // one region per block holding all layers
};

// Engine KV memory of `layers` layers, `blocks` blocks, `tensor_bytes` bytes per block per
// tensor, with `pad` unused bytes after each run (stride = bytes + pad), filled with kCanary.
// The slot image of a block is layer 0 K, layer 0 V, layer 1 K, ... (fused: layer 0, layer 1,
// ...; cross-layer: the block's region), which ByteOf computes by plain index arithmetic,
// independently of KvLayout.
class FakeEngineKv {
 public:
  FakeEngineKv(FakeLayoutKind kind, uint64_t layers, uint64_t blocks, uint64_t tensor_bytes,
               uint64_t pad = 0)
      : kind_(kind), layers_(layers), blocks_(blocks), tensor_bytes_(tensor_bytes) {
    tensors_per_layer_ = kind == FakeLayoutKind::kPerLayerKV ? 2 : 1;
    block_bytes_ = layers * tensors_per_layer_ * tensor_bytes;
    if (kind == FakeLayoutKind::kCrossLayer) {
      stride_ = block_bytes_ + pad;
      buffers_.emplace_back(blocks * stride_, kCanary);
    } else {
      stride_ = tensor_bytes + pad;
      for (uint64_t t = 0; t < layers * tensors_per_layer_; ++t) {
        buffers_.emplace_back(blocks * stride_, kCanary);
      }
    }
  }

  uint64_t block_bytes() const { return block_bytes_; }
  uint64_t blocks() const { return blocks_; }

  KvLayout Layout() {
    StatusOr<KvLayout> layout = Status(StatusCode::kInternal, "unset");
    if (kind_ == FakeLayoutKind::kCrossLayer) {
      layout = KvLayout::CrossLayer(buffers_[0].data(), blocks_, block_bytes_, stride_);
    } else {
      std::vector<LayerTensors> layers;
      for (uint64_t l = 0; l < layers_; ++l) {
        LayerTensors t;
        t.k = buffers_[l * tensors_per_layer_].data();
        if (tensors_per_layer_ == 2) t.v = buffers_[l * 2 + 1].data();
        t.stride = stride_;
        layers.push_back(t);
      }
      layout = KvLayout::PerLayer(layers, blocks_, tensor_bytes_);
    }
    return std::move(layout).value();
  }

  // Where byte `j` of block `block`'s slot image lives (the reference).
  uint8_t* ByteOf(uint64_t block, uint64_t j) {
    if (kind_ == FakeLayoutKind::kCrossLayer) return &buffers_[0][block * stride_ + j];
    const uint64_t tensor = j / tensor_bytes_;
    return &buffers_[tensor][block * stride_ + j % tensor_bytes_];
  }

  void WriteBlock(uint64_t block, const std::vector<uint8_t>& image) {
    for (uint64_t j = 0; j < block_bytes_; ++j) *ByteOf(block, j) = image[j];
  }
  std::vector<uint8_t> ReadBlock(uint64_t block) {
    std::vector<uint8_t> image(block_bytes_);
    for (uint64_t j = 0; j < block_bytes_; ++j) image[j] = *ByteOf(block, j);
    return image;
  }
  // Bytes of engine memory that are kCanary but belong to no block image (padding) -- all of
  // them must stay kCanary whatever is loaded.
  bool CanariesIntact() const {
    size_t bad = 0;
    for (const auto& buf : buffers_) {
      const uint64_t run = kind_ == FakeLayoutKind::kCrossLayer ? block_bytes_ : tensor_bytes_;
      for (uint64_t i = 0; i < buf.size(); ++i) {
        if (i % stride_ >= run && buf[i] != kCanary) ++bad;
      }
    }
    return bad == 0;
  }

 private:
  FakeLayoutKind kind_;
  uint64_t layers_, blocks_, tensor_bytes_;
  uint64_t tensors_per_layer_ = 1;
  uint64_t block_bytes_ = 0;
  uint64_t stride_ = 0;
  std::vector<std::vector<uint8_t>> buffers_;
};

inline std::vector<uint8_t> ImageForKey(const PoolKey& key, uint64_t bytes) {
  std::vector<uint8_t> image(bytes);
  FillForKey(key, image.data(), bytes);
  return image;
}

// A completion whose outcome a test sets.
class ManualCopyEvent final : public CopyEvent {
 public:
  bool Done() const override { return done_.load(std::memory_order_acquire); }
  Status Wait() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_.load(); });
    return status_;
  }
  bool WaitFor(std::chrono::nanoseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [this] { return done_.load(); });
  }
  CopyTiming Timing() const override { return CopyTiming{1, Done() ? 2u : 0u}; }
  void Finish(Status status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      status_ = std::move(status);
      done_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> done_{false};
  Status status_;
};

// Copies nothing and fails every batch with DataLoss (a device error).
class FailingCopyEngine final : public CopyEngine {
 public:
  StatusOr<CopyCompletion> Submit(CopyDirection, std::vector<CopyRegion>) override {
    auto event = std::make_shared<ManualCopyEvent>();
    event->Finish(DataLoss("injected copy failure"));
    return CopyCompletion(event);
  }
  std::string_view name() const override { return "failing"; }
};

// Copies the first half of every region at once (unless told not to), then holds the batch open
// until Release(), when it copies the rest and completes. Counts the batches it holds.
class GatedCopyEngine final : public CopyEngine {
 public:
  explicit GatedCopyEngine(bool copy_half_first = true) : half_(copy_half_first) {}
  StatusOr<CopyCompletion> Submit(CopyDirection, std::vector<CopyRegion> regions) override {
    auto event = std::make_shared<ManualCopyEvent>();
    for (const CopyRegion& r : regions) {
      if (half_) std::memcpy(r.dst, r.src, r.bytes / 2);
    }
    std::lock_guard<std::mutex> lock(mu_);
    held_.push_back(Held{std::move(regions), event});
    return CopyCompletion(event);
  }
  std::string_view name() const override { return "gated"; }

  size_t held() {
    std::lock_guard<std::mutex> lock(mu_);
    return held_.size();
  }
  void Release() {
    std::vector<Held> held;
    {
      std::lock_guard<std::mutex> lock(mu_);
      held.swap(held_);
    }
    for (Held& h : held) {
      for (const CopyRegion& r : h.regions) std::memcpy(r.dst, r.src, r.bytes);
      h.event->Finish(Status::Ok());
    }
  }

 private:
  struct Held {
    std::vector<CopyRegion> regions;
    std::shared_ptr<ManualCopyEvent> event;
  };
  bool half_;
  std::mutex mu_;
  std::vector<Held> held_;
};

}  // namespace deltakv::kvtier::testing
