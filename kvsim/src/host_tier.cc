#include "host_tier.h"

#include <utility>
#include <vector>

#include "kvtier/kv_layout.h"

namespace deltakv::kvsim {

StatusOr<std::unique_ptr<HostTier>> HostTier::Create(const std::string& name, uint64_t slots,
                                                     uint64_t block_bytes, uint8_t* arena,
                                                     uint64_t gpu_blocks) {
  std::unique_ptr<HostTier> t(new HostTier());
  kvtier::CpuCopyEngineOptions eo;
  eo.threads = 0;  // copies run inside Submit: the replay is one thread and waits for each
  ASSIGN_OR_RETURN(t->engine_, kvtier::CpuCopyEngine::Create(eo));
  kvtier::SlotPoolOptions po;
  po.block_bytes = block_bytes;
  po.capacity_slots = slots;
  po.event_capacity = 0;
  po.if_exists = shm::IfExists::kReplace;
  po.unlink_on_destroy = true;
  ASSIGN_OR_RETURN(t->owner_, kvtier::SlotPool::Create(name, po));
  t->pool_bytes_ = t->owner_.segment().size();
  ASSIGN_OR_RETURN(kvtier::KvLayout layout,
                   kvtier::KvLayout::CrossLayer(arena, gpu_blocks, block_bytes));
  ASSIGN_OR_RETURN(t->client_, kvtier::KvTierClient::Open(name, layout, t->engine_.get()));
  return t;
}

Status HostTier::Store(std::span<const kvtier::PoolKey> keys, std::span<const uint64_t> blocks) {
  if (keys.empty()) return Status::Ok();
  ASSIGN_OR_RETURN(kvtier::StoreHandle h, client_->PrepareStore(keys));
  refused_blocks_ += h.refused();
  if (h.allocated() == 0) return client_->CompleteStore(h);
  stored_blocks_ += h.allocated();
  ASSIGN_OR_RETURN(kvtier::CopyCompletion c, client_->Store(h, blocks));
  (void)c;
  return client_->CompleteStore(h);
}

size_t HostTier::Lookup(std::span<const kvtier::PoolKey> keys) {
  ++lookups_;
  size_t n = client_->Lookup(keys);
  hit_blocks_ += n;
  return n;
}

Status HostTier::Load(std::span<const kvtier::PoolKey> keys, std::span<const uint64_t> blocks) {
  if (blocks.empty()) return Status::Ok();
  ASSIGN_OR_RETURN(kvtier::LoadHandle h, client_->PrepareLoad(keys, blocks.size()));
  ASSIGN_OR_RETURN(kvtier::CopyCompletion c, client_->Load(h, blocks));
  (void)c;
  RETURN_IF_ERROR(client_->CompleteLoad(h));
  ++loads_;
  loaded_blocks_ += blocks.size();
  return Status::Ok();
}

uint64_t HostTier::evictions() const { return client_->Stats().evictions; }

}  // namespace deltakv::kvsim
