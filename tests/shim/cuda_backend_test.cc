// The cuda device backend against a host mirror of device memory: gather, prepared and
// unprepared scatter of many small and some long ranges, and the errors. Without a CUDA device
// only the "no device" error is checked; the rest is skipped (tools/device-check.sh runs it on
// a GPU machine).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "deltasync/checkpoint.h"
#include "deltasync/delta_manifest.h"
#include "deltasync/engine_tensors.h"
#include "deltasync/plan_verify.h"
#include "deltasync/publisher.h"
#include "deltasync/sync_planner.h"
#include "deltasync/synthetic.h"
#include "shim/device_backend.h"
#include "shim/plan_stage.h"
#include "shim/weight_checksum.h"
#include "test_util.h"

namespace deltakv::shim {
namespace {

bool HaveDevice() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// Device memory plus the host copy it should equal.
struct Mirror {
  explicit Mirror(size_t n) : host(n) {
    std::mt19937_64 rng(n);
    for (auto& b : host) b = static_cast<uint8_t>(rng());
    EXPECT_EQ(cudaMalloc(&device, n), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(device, host.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Mirror() { cudaFree(device); }
  std::vector<uint8_t> Download() const {
    std::vector<uint8_t> out(host.size());
    EXPECT_EQ(cudaMemcpy(out.data(), device, out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  uint8_t* at(size_t off) { return static_cast<uint8_t*>(device) + off; }
  void* device = nullptr;
  std::vector<uint8_t> host;
};

// Sorted, disjoint ranges: mostly 1-8 bytes, some up to 1000 (several kernel pieces).
std::vector<std::pair<size_t, size_t>> Ranges(size_t size, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::pair<size_t, size_t>> out;
  size_t pos = 0;
  while (out.size() < count) {
    pos += rng() % 200;
    size_t len = rng() % 10 == 0 ? 1 + rng() % 1000 : 1 + rng() % 8;
    if (pos + len > size) break;
    out.push_back({pos, len});
    pos += len;
  }
  return out;
}

TEST(CudaBackend, NoDeviceIsAClearError) {
  if (HaveDevice()) GTEST_SKIP() << "a CUDA device is present";
  auto b = MakeDeviceBackend("cuda");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(b.status().message().find("needs a CUDA device"), std::string::npos);
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
    auto b = MakeDeviceBackend("cuda");
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    backend = std::move(b).value();
    EXPECT_EQ(backend->name(), "cuda");
  }
  std::unique_ptr<DeviceBackend> backend;
};

TEST_F(CudaBackendTest, GatherMatchesDeviceBytes) {
  Mirror m(1 << 22);
  auto ranges = Ranges(m.host.size(), 50000, 1);
  std::vector<std::vector<uint8_t>> out(ranges.size());
  std::vector<CopyOp> ops;
  for (size_t i = 0; i < ranges.size(); ++i) {
    out[i].resize(ranges[i].second);
    ops.push_back({m.at(ranges[i].first), out[i].data(), ranges[i].second});
  }
  ASSERT_TRUE(backend->Gather(ops).ok());
  for (size_t i = 0; i < ranges.size(); ++i) {
    ASSERT_TRUE(std::equal(out[i].begin(), out[i].end(), m.host.begin() + ranges[i].first)) << i;
  }
}

// The device kernel's sums equal AdlerDelta::AddBytes on the host for small and long ranges,
// at positions near the modulus and past 2^32; device bytes are unchanged.
TEST_F(CudaBackendTest, ChecksumRangesMatchesTheHostSums) {
  Mirror m(3 << 20);
  auto ranges = Ranges(m.host.size(), 20000, 4);
  ranges.push_back({m.host.size() - (1 << 20), 1 << 20});  // many kernel pieces
  std::vector<ChecksumRange> in;
  std::vector<deltasync::AdlerDelta> want(ranges.size()), got(ranges.size());
  const uint64_t bases[] = {0, 65520, (uint64_t{1} << 33) + 7};
  for (size_t i = 0; i < ranges.size(); ++i) {
    const uint64_t position = bases[i % 3] + ranges[i].first;
    in.push_back({m.at(ranges[i].first), ranges[i].second, position});
    want[i].AddBytes(position, {m.host.data() + ranges[i].first, ranges[i].second});
  }
  ASSERT_TRUE(backend->ChecksumRanges(in, got).ok());
  for (size_t i = 0; i < ranges.size(); ++i) {
    ASSERT_EQ(got[i].s1(), want[i].s1()) << i;
    ASSERT_EQ(got[i].s2(), want[i].s2()) << i;
  }
  EXPECT_EQ(m.Download(), m.host);
  std::vector<deltasync::AdlerDelta> one(1);
  std::vector<uint8_t> host(16);
  ChecksumRange bad{host.data(), host.size(), 0};
  EXPECT_EQ(backend->ChecksumRanges({&bad, 1}, one).code(), StatusCode::kInvalidArgument);
}

// The engine's staging path on the device, end to end at TP1: a real delta planned by the
// sidecar's planner, staged by StagePart (on the cuda backend: XOR and partial sums in a device
// kernel, the new bytes kept in device memory) and committed gives the same sums as the cpu
// backend, verifies against the delta, leaves
// the device holding the new checkpoint, and the live checksums on the device match it.
TEST_F(CudaBackendTest, EngineStagingPathOnTheDevice) {
  using namespace deltasync;
  deltakv::testing::TempDir tmp;
  std::vector<SyntheticFile> layout = {{"model.safetensors",
                                        {{"w", DType::kBF16, {512, 256}},
                                         {"n", DType::kF32, {256}},
                                         {"b", DType::kBF16, {64}}}}};
  ASSERT_TRUE(GenerateCheckpoint(tmp / "v1", layout, 5).ok());
  MutationOptions mo;
  mo.density = 0.02;
  ASSERT_TRUE(MutateCheckpoint(tmp / "v1", tmp / "v2", mo).ok());
  ASSERT_TRUE(PublishDelta(PublishOptions{tmp / "v1", tmp / "v2", tmp / "d"}).ok());
  auto m = ParseDeltaManifest(deltakv::testing::ReadAll(tmp / "d/manifest.json")).value();
  auto v1 = Checkpoint::Open(tmp / "v1").value();
  auto v2 = Checkpoint::Open(tmp / "v2").value();

  EngineTensorTable table{0, 1, "v1", {}};
  std::vector<std::unique_ptr<Mirror>> device;
  std::vector<std::vector<uint8_t>> host;
  for (const TensorDecl& d : layout[0].tensors) {
    TensorLayout l = *TensorLayout::Replicated(d.shape, d.dtype, 1);
    table.tensors.push_back({d.name, d.dtype, l.canonical_bytes(), l});
    auto bytes = v1.Bytes(*v1.Find(d.name));
    host.emplace_back(bytes.begin(), bytes.end());
    device.push_back(std::make_unique<Mirror>(bytes.size()));
    device.back()->host = host.back();
    ASSERT_EQ(cudaMemcpy(device.back()->device, bytes.data(), bytes.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  auto ranks = ToRankTensorTables({table}).value();
  auto plan_tables = PlanTensorTables(m, ranks).value();
  std::vector<uint64_t> words((64 << 20) / 8);
  std::span<uint8_t> buffer(reinterpret_cast<uint8_t*>(words.data()), words.size() * 8);
  std::vector<WritePlanWriter> writers;
  writers.emplace_back(buffer, plan_tables[0]);
  auto store = MakeFileStore(tmp / "d");
  ASSERT_TRUE(BuildSyncPlans(m, *store, ranks, writers, {}).ok());
  const uint64_t used = writers[0].Finish().value();
  std::vector<uint8_t> plan_copy(buffer.begin(), buffer.begin() + used);  // cpu run's own copy

  auto run = [&](DeviceBackend& b, std::span<uint8_t> plan, std::vector<LocalTensor> locals,
                 std::vector<StagedTensor>* staged) {
    auto reader = WritePlanReader::Open(plan).value();
    staged->assign(reader.tensors().size(), StagedTensor{});
    auto prepared = b.StagePart(reader, locals, staged);  // the engine's one call per part
    ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
    ASSERT_TRUE(b.CommitScatter(**prepared).ok());
  };
  std::vector<LocalTensor> device_locals, host_locals;
  for (size_t i = 0; i < host.size(); ++i) {
    device_locals.push_back({table.tensors[i].name, device[i]->device, host[i].size()});
    host_locals.push_back({table.tensors[i].name, host[i].data(), host[i].size()});
  }
  std::vector<StagedTensor> on_device, on_host;
  run(*backend, buffer.first(used), device_locals, &on_device);
  auto cpu = MakeDeviceBackend("cpu").value();
  run(*cpu, plan_copy, host_locals, &on_host);
  for (size_t t = 0; t < m.tensors.size(); ++t) {
    EXPECT_EQ(on_device[t].delta.s1(), on_host[t].delta.s1()) << m.tensors[t].name;
    EXPECT_EQ(on_device[t].delta.s2(), on_host[t].delta.s2()) << m.tensors[t].name;
    EXPECT_EQ(on_device[t].full.s1(), on_host[t].full.s1()) << m.tensors[t].name;
    EXPECT_EQ(on_device[t].full.s2(), on_host[t].full.s2()) << m.tensors[t].name;
    EXPECT_EQ(on_device[t].bytes_changed, on_host[t].bytes_changed) << m.tensors[t].name;
    EXPECT_TRUE(VerifyStagedTensor(m.tensors[t].name, plan_tables[0][t], on_device[t].delta,
                                   on_device[t].full)
                    .ok());
  }
  for (size_t i = 0; i < host.size(); ++i) {
    auto want = v2.Bytes(*v2.Find(table.tensors[i].name));
    EXPECT_EQ(device[i]->Download(), std::vector<uint8_t>(want.begin(), want.end()))
        << table.tensors[i].name;
  }
  uint64_t read = 0;
  auto sums = ChecksumWeights(device_locals, table.tensors, 0, *backend, {}, &read);
  ASSERT_TRUE(sums.ok()) << sums.status().ToString();
  for (size_t i = 0; i < host.size(); ++i) {
    auto want = v2.Bytes(*v2.Find(table.tensors[i].name));
    EXPECT_EQ((*sums)[i].owned.Apply(Adler32OfZeros(want.size()), want.size()), Adler32(want));
  }
}

// StagePart parts back to back, as the engine stages them (each part's bytes and descriptors
// go through the same pinned buffer): records of 1 to 300 bytes (several kernel pieces), owners
// and replicas, and a full-verify tensor give the cpu backend's sums and bytes; a part with a
// record outside its tensor fails with InvalidArgument and leaves the sums as they were; the
// two good parts committed together leave the device holding old ^ delta.
TEST_F(CudaBackendTest, StagedPartsBackToBackMatchTheCpuBackend) {
  using deltasync::PlanTensor;
  Mirror w0(1 << 20), w1(4096);
  const std::vector<PlanTensor> table = {{0, 0, 1 << 20, 0, 0},
                                         {1, deltasync::kPlanTensorFullVerify, 4096, 0, 0}};
  std::vector<uint8_t> h0 = w0.host, h1 = w1.host;  // the cpu backend's copies
  const std::vector<LocalTensor> device_locals = {{"w", w0.device, w0.host.size()},
                                                  {"n", w1.device, w1.host.size()}};
  const std::vector<LocalTensor> host_locals = {{"w", h0.data(), h0.size()},
                                                {"n", h1.data(), h1.size()}};
  std::mt19937_64 rng(11);
  auto make_part = [&](uint64_t first, bool bad) {
    std::vector<uint64_t> words(1 << 18);
    deltasync::WritePlanWriter writer(
        {reinterpret_cast<uint8_t*>(words.data()), words.size() * 8}, table);
    uint64_t pos = first;
    for (int k = 0; k < 3000; ++k) {
      const uint64_t len = rng() % 8 == 0 ? 1 + rng() % 300 : 1 + rng() % 8;
      if (pos + len > (1u << 20)) break;
      std::vector<uint8_t> x(len);
      for (auto& b : x) b = static_cast<uint8_t>(rng() | 1);
      EXPECT_TRUE(writer.Add(0, pos, pos, x, rng() % 4 != 0).ok());
      pos += len + rng() % 100;
    }
    std::vector<uint8_t> dense(4096);
    for (auto& b : dense) b = static_cast<uint8_t>(rng());
    EXPECT_TRUE(writer.Add(1, 0, 0, dense, true).ok());
    if (bad) {
      EXPECT_TRUE(writer.Add(1, 4000, 0, std::vector<uint8_t>(200, 1), true).ok());
    }
    words.resize((writer.Finish().value() + 7) / 8);
    return words;
  };
  auto stage = [&](DeviceBackend& b, std::vector<uint64_t> words,
                   const std::vector<LocalTensor>& locals, std::vector<StagedTensor>* sums) {
    std::span<uint8_t> plan(reinterpret_cast<uint8_t*>(words.data()), words.size() * 8);
    auto reader = deltasync::WritePlanReader::Open(plan).value();
    return b.StagePart(reader, locals, sums);
  };
  auto cpu = MakeDeviceBackend("cpu").value();
  const std::vector<uint64_t> a = make_part(0, false), bad = make_part(10, true),
                              c = make_part(5, false);
  std::vector<StagedTensor> on_device(2), on_host(2);
  std::vector<std::unique_ptr<PreparedScatter>> device_parts, host_parts;
  for (const auto* words : {&a, &bad, &c}) {
    auto d = stage(*backend, *words, device_locals, &on_device);
    auto h = stage(*cpu, *words, host_locals, &on_host);
    if (words == &bad) {
      EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << d.status().ToString();
      EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
    } else {
      ASSERT_TRUE(d.ok()) << d.status().ToString();
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      EXPECT_EQ((*d)->ops(), (*h)->ops());
      device_parts.push_back(std::move(*d));
      host_parts.push_back(std::move(*h));
    }
    for (int t = 0; t < 2; ++t) {
      EXPECT_EQ(on_device[t].delta.s1(), on_host[t].delta.s1()) << t;
      EXPECT_EQ(on_device[t].delta.s2(), on_host[t].delta.s2()) << t;
      EXPECT_EQ(on_device[t].full.s1(), on_host[t].full.s1()) << t;
      EXPECT_EQ(on_device[t].full.s2(), on_host[t].full.s2()) << t;
      EXPECT_EQ(on_device[t].bytes_changed, on_host[t].bytes_changed) << t;
    }
  }
  EXPECT_EQ(w0.Download(), w0.host);  // staging writes no weight byte
  ASSERT_TRUE(backend->CommitScatters(device_parts).ok());
  ASSERT_TRUE(cpu->CommitScatters(host_parts).ok());
  EXPECT_EQ(w0.Download(), h0);
  EXPECT_EQ(w1.Download(), h1);
  EXPECT_NE(h0, w0.host);
}

// The staging reserve comes from the device's pool and stays usable for staging afterwards; a
// reserve the device cannot hold is ResourceExhausted; without registered tensors there is no
// device to reserve on, so nothing happens.
TEST_F(CudaBackendTest, StagingReserveIsTakenFromThePool) {
  Mirror w(1 << 16);
  const std::vector<LocalTensor> locals = {{"w", w.device, w.host.size()}};
  ASSERT_TRUE(backend->ReserveStaging(64 << 20, locals).ok());
  EXPECT_TRUE(backend->ReserveStaging(64 << 20, {}).ok());
  EXPECT_EQ(backend->ReserveStaging(uint64_t{1} << 50, locals).code(),
            StatusCode::kResourceExhausted);
  std::vector<uint8_t> x(100, 0x5a);
  std::vector<uint64_t> words(1 << 10);
  const std::vector<deltasync::PlanTensor> table = {{0, 0, w.host.size(), 0, 0}};
  deltasync::WritePlanWriter writer({reinterpret_cast<uint8_t*>(words.data()), words.size() * 8},
                                    table);
  ASSERT_TRUE(writer.Add(0, 1000, 1000, x, true).ok());
  const uint64_t used = writer.Finish().value();
  auto reader = deltasync::WritePlanReader::Open(
                    {reinterpret_cast<uint8_t*>(words.data()), used})
                    .value();
  std::vector<StagedTensor> sums(1);
  auto prepared = backend->StagePart(reader, locals, &sums);
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  ASSERT_TRUE(backend->CommitScatter(**prepared).ok());
  for (size_t i = 0; i < x.size(); ++i) w.host[1000 + i] ^= 0x5a;
  EXPECT_EQ(w.Download(), w.host);
}

TEST_F(CudaBackendTest, PreparedScatterWritesExactlyTheRanges) {
  Mirror m(1 << 22);
  auto ranges = Ranges(m.host.size(), 80000, 2);
  ScatterBatch batch;
  size_t total = 0;
  for (auto& r : ranges) total += r.second;
  batch.data.resize(total);
  std::mt19937_64 rng(3);
  uint8_t* at = batch.data.data();
  for (auto& [off, len] : ranges) {
    for (size_t i = 0; i < len; ++i) at[i] = static_cast<uint8_t>(rng());
    std::copy(at, at + len, m.host.begin() + off);
    batch.ops.push_back({m.at(off), at, len});
    at += len;
  }
  auto p = backend->PrepareScatter(std::move(batch));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)->ops(), ranges.size());
  ASSERT_TRUE(backend->CommitScatter(**p).ok());
  EXPECT_EQ(m.Download(), m.host);
}

TEST_F(CudaBackendTest, CommitScattersWritesEveryPartInOrder) {
  // Three parts in one commit (one of them empty); the third rewrites bytes the first wrote,
  // so the device must end with the third's values: parts apply in order.
  Mirror m(1 << 20);
  std::mt19937_64 rng(5);
  std::vector<std::unique_ptr<PreparedScatter>> parts;
  auto part = [&](uint64_t first, uint64_t count, uint64_t stride, uint64_t len) {
    ScatterBatch batch;
    batch.data.resize(count * len);
    for (uint64_t k = 0; k < count; ++k) {
      const uint64_t off = first + k * stride;
      uint8_t* at = batch.data.data() + k * len;
      for (uint64_t i = 0; i < len; ++i) at[i] = static_cast<uint8_t>(rng());
      std::copy(at, at + len, m.host.begin() + off);
      batch.ops.push_back({m.at(off), at, len});
    }
    auto p = backend->PrepareScatter(std::move(batch));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    parts.push_back(std::move(*p));
  };
  part(100, 2000, 300, 3);
  part(0, 0, 1, 1);
  part(100, 1000, 600, 70);
  ASSERT_TRUE(backend->CommitScatters(parts).ok());
  EXPECT_EQ(m.Download(), m.host);
  EXPECT_TRUE(backend->CommitScatters({}).ok());
}

TEST_F(CudaBackendTest, UnpreparedScatterAndEmptyBatches) {
  Mirror m(1 << 16);
  std::vector<uint8_t> src = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<CopyOp> ops = {{m.at(0), src.data(), 1}, {m.at(100), src.data() + 1, 8}};
  ASSERT_TRUE(backend->Scatter(ops).ok());
  m.host[0] = 1;
  std::copy(src.begin() + 1, src.end(), m.host.begin() + 100);
  EXPECT_EQ(m.Download(), m.host);
  EXPECT_TRUE(backend->Scatter({}).ok());
  EXPECT_TRUE(backend->Gather({}).ok());
  auto p = backend->PrepareScatter({});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(backend->CommitScatter(**p).ok());
}

TEST_F(CudaBackendTest, HostPointersAreRefused) {
  std::vector<uint8_t> not_device(16), out(4);
  CopyOp op{not_device.data(), out.data(), 4};
  Status s = backend->Gather({&op, 1});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
}

}  // namespace
}  // namespace deltakv::shim
