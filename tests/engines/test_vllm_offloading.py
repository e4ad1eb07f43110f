"""deltakv.vllm.DeltakvOffloadingSpec against vLLM's real offloading classes (the pinned vllm in
the cached venv), on CPU tensors and a real sidecar pool: the call sequences of vLLM's
OffloadingConnector scheduler and worker, with every KV byte checked."""
from __future__ import annotations

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
base = pytest.importorskip("vllm.v1.kv_offload.base")
from vllm.v1.kv_offload import config as vcfg  # noqa: E402
from vllm.v1.kv_offload.factory import OffloadingSpecFactory  # noqa: E402

import deltakv  # noqa: E402
from deltakv import vllm as dvllm  # noqa: E402

NUM_BLOCKS = 16
LAYERS = 2
PAGE = 2048  # bytes of one block in one canonical tensor
BLOCK = LAYERS * PAGE  # bytes one worker offloads per block


def make_config(pool: str, rank: int = 0, world: int = 1, events: bool = True,
                extra=None) -> vcfg.OffloadingConfig:
    return vcfg.OffloadingConfig(
        groups=(vcfg.OffloadingGroupConfig(tokens_per_block=16, layer_names=("l0", "l1"),
                                           group_id=0),),
        worker_kv_bytes_per_block=BLOCK,
        enable_kv_cache_events=events,
        extra_config={"spec_name": "DeltakvOffloadingSpec", "spec_module_path": "deltakv.vllm",
                      "deltakv_pool": pool, **(extra or {})},
        engine_id="test-engine",
        model=vcfg.OffloadingModelConfig(name="org/tiny@1", dtype="bfloat16"),
        cache=vcfg.OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=1),
        parallel=vcfg.OffloadingParallelConfig(
            rank=rank, world_size=world, tp_size=world, pp_size=1, pcp_size=1, dcp_size=1,
            data_parallel_index=0, data_parallel_size=1, data_parallel_rank_local=None,
            is_parallelism_agnostic=False),
        kv_cache_layout="NHD")


def kv_caches(seed: int):
    g = torch.Generator().manual_seed(seed)
    tensors = [torch.randint(-128, 127, (NUM_BLOCKS, PAGE), dtype=torch.int8, generator=g)
               for _ in range(LAYERS)]
    caches = base.CanonicalKVCaches(
        tensors=[base.CanonicalKVCacheTensor(tensor=t, page_size_bytes=PAGE) for t in tensors],
        group_data_refs=[[base.CanonicalKVCacheRef(tensor_idx=i, page_size_bytes=PAGE)
                          for i in range(LAYERS)]])
    return tensors, caches


def keys(n: int, start: int = 0):
    return [base.make_offload_key(bytes([i % 256]) * 31 + bytes([i // 256]), 0)
            for i in range(start, start + n)]


def gpu_spec(blocks):
    return base.GPULoadStoreSpec(list(blocks), group_sizes=[len(blocks)], block_indices=[0])


def run(worker, job_id):
    deadline = time.time() + 30
    while time.time() < deadline:
        for r in worker.get_finished():
            assert r.job_id == job_id
            return r
        time.sleep(0.001)
    raise AssertionError(f"job {job_id} did not finish")


def test_factory_loads_the_spec_by_module_path(sidecar_factory):
    s = sidecar_factory(kv_block_bytes=BLOCK, kv_slots=8)
    spec = OffloadingSpecFactory.create_spec(make_config(s.pool))
    assert isinstance(spec, dvllm.DeltakvOffloadingSpec)
    assert isinstance(spec.get_manager(), base.OffloadingManager)
    spec.get_manager().shutdown()


def test_store_then_reload_in_another_engine(sidecar_factory):
    """Engine A offloads as vLLM's scheduler and worker do; engine B (another spec, other KV
    memory, as a restarted engine) finds the prefix and loads it back byte for byte."""
    s = sidecar_factory(kv_block_bytes=BLOCK, kv_slots=32)
    ctx = base.ReqContext(req_id="r1")
    a = dvllm.DeltakvOffloadingSpec(make_config(s.pool))
    mgr = a.get_manager()
    src, caches = kv_caches(1)
    worker = a.get_worker(caches)
    ks = keys(6)
    mgr.on_new_request(ctx)
    with mgr.lock:
        assert [mgr.lookup(k, ctx) for k in ks] == [base.LookupResult.MISS] * 6
        out = mgr.prepare_store(ks, ctx)
    assert out.keys_to_store == ks and out.evicted_keys == []
    with mgr.lock:  # in flight: a second request sees it pending and does not store it again
        assert mgr.lookup(ks[0], ctx) == base.LookupResult.HIT_PENDING
        assert mgr.prepare_store(ks[:2], ctx).keys_to_store == []
    assert worker.submit_store(1, gpu_spec([3, 4, 5, 6, 7, 8]), out.store_spec)
    r = run(worker, 1)
    assert r.success and r.transfer_size == 6 * BLOCK
    with mgr.lock:
        mgr.complete_store(ks, ctx)
        events = list(mgr.take_events())
    assert [e.keys[0] for e in events] == ks and not any(e.removed for e in events)
    assert all(e.medium == base.Medium.CPU for e in events)
    mgr.on_schedule_end(base.ScheduleEndContext(new_req_ids=["r1"], preempted_req_ids=[]))

    b = dvllm.DeltakvOffloadingSpec(make_config(s.pool))
    mgr_b = b.get_manager()
    dst, caches_b = kv_caches(2)
    worker_b = b.get_worker(caches_b)
    ctx_b = base.ReqContext(req_id="r2")
    with mgr_b.lock:
        assert [mgr_b.lookup(k, ctx_b) for k in ks] == [base.LookupResult.HIT] * 6
        mgr_b.touch(ks, ctx_b)
        spec = mgr_b.prepare_load(ks[:4], ctx_b)
    assert worker_b.submit_load(7, spec, gpu_spec([10, 11, 12, 13]))
    assert run(worker_b, 7).success
    with mgr_b.lock:
        mgr_b.complete_load(ks[:4], ctx_b)
    mgr_b.on_schedule_end(base.ScheduleEndContext(new_req_ids=["r2"], preempted_req_ids=[]))
    for layer in range(LAYERS):
        assert torch.equal(dst[layer][10:14], src[layer][3:7])
    # Already stored: prepare_store skips them.
    with mgr_b.lock:
        assert mgr_b.prepare_store(ks, ctx_b).keys_to_store == []
    for m, w in ((mgr, worker), (mgr_b, worker_b)):
        w.shutdown()
        m.shutdown()


def test_evictions_preemption_and_reset(sidecar_factory):
    s = sidecar_factory(kv_block_bytes=BLOCK, kv_slots=4)
    spec = dvllm.DeltakvOffloadingSpec(make_config(s.pool))
    mgr = spec.get_manager()
    _src, caches = kv_caches(3)
    worker = spec.get_worker(caches)
    ctx = base.ReqContext(req_id="r")
    first, second = keys(4), keys(4, start=100)
    for job, ks in ((1, first), (2, second)):
        with mgr.lock:
            out = mgr.prepare_store(ks, ctx)
        worker.submit_store(job, gpu_spec(range(4)), out.store_spec)
        assert run(worker, job).success
        with mgr.lock:
            mgr.complete_store(ks, ctx)
    with mgr.lock:
        events = list(mgr.take_events())
        removed = [e.keys[0] for e in events if e.removed]
        assert removed == first  # the pool evicted the first request's blocks for the second
        assert [mgr.lookup(k, ctx) for k in first] == [base.LookupResult.MISS] * 4
        assert [mgr.lookup(k, ctx) for k in second] == [base.LookupResult.HIT] * 4
    # The HITs above pinned their blocks for this step: a store that would evict them cannot.
    with mgr.lock:
        out = mgr.prepare_store(keys(4, start=200), ctx)
    worker.submit_store(3, gpu_spec(range(4)), out.store_spec)
    assert run(worker, 3).success
    with mgr.lock:
        mgr.complete_store(out.keys_to_store, ctx)
        assert [mgr.lookup(k, ctx) for k in second] == [base.LookupResult.HIT] * 4
    # Preempted before its store ran: complete_store(success=False) clears the pending state.
    mgr.on_schedule_end(base.ScheduleEndContext(new_req_ids=[], preempted_req_ids=["r"]))
    with mgr.lock:
        pending = mgr.prepare_store(keys(2, start=300), ctx)
        assert mgr.lookup(pending.keys_to_store[0], ctx) == base.LookupResult.HIT_PENDING
        mgr.complete_store(pending.keys_to_store, ctx, success=False)
        assert mgr.lookup(pending.keys_to_store[0], ctx) == base.LookupResult.MISS
        mgr.on_request_finished(ctx)
        mgr.reset_cache()
        assert [mgr.lookup(k, ctx) for k in second] == [base.LookupResult.MISS] * 4
    mgr.on_schedule_end(base.ScheduleEndContext(new_req_ids=[], preempted_req_ids=[]))
    assert mgr.stats()["pool_ready_slots"] == 0
    worker.shutdown()
    mgr.shutdown()


def test_tensor_parallel_ranks_key_their_own_shards(sidecar_factory):
    s = sidecar_factory(kv_block_bytes=BLOCK, kv_slots=16)
    specs = [dvllm.DeltakvOffloadingSpec(make_config(s.pool, rank=r, world=2)) for r in (0, 1)]
    mgr = specs[0].get_manager()  # the scheduler (rank 0's config)
    shards = [kv_caches(10 + r) for r in (0, 1)]
    workers = [specs[r].get_worker(shards[r][1]) for r in (0, 1)]
    ctx = base.ReqContext(req_id="tp")
    ks = keys(3)
    with mgr.lock:
        out = mgr.prepare_store(ks, ctx)
    workers[0].submit_store(1, gpu_spec([0, 1, 2]), out.store_spec)
    assert run(workers[0], 1).success
    with mgr.lock:  # only rank 0's shard is there: not a hit
        assert mgr.lookup(ks[0], ctx) == base.LookupResult.HIT_PENDING
    workers[1].submit_store(2, gpu_spec([0, 1, 2]), out.store_spec)
    assert run(workers[1], 2).success
    with mgr.lock:
        mgr.complete_store(ks, ctx)
        assert mgr.lookup(ks[0], ctx) == base.LookupResult.HIT
        spec = mgr.prepare_load(ks[:1], ctx)
    for r in (0, 1):
        workers[r].submit_load(10 + r, spec, gpu_spec([5]))
        assert run(workers[r], 10 + r).success
    for layer in range(LAYERS):  # each rank got its own shard back, not the other's
        assert torch.equal(shards[0][0][layer][5], shards[0][0][layer][0])
        assert torch.equal(shards[1][0][layer][5], shards[1][0][layer][0])
        assert not torch.equal(shards[0][0][layer][0], shards[1][0][layer][0])
    with mgr.lock:
        mgr.complete_load(ks[:1], ctx)
    for w in workers:
        w.shutdown()
    mgr.shutdown()


def shard_key(key, rank: int, world: int) -> np.ndarray:
    """The pool key of one rank's shard of an offloaded block (docs/VLLM.md, docs/KEYS.md)."""
    ctx = deltakv.KeyContext(model_fingerprint="org/tiny@1", kv_dtype="bfloat16",
                             kv_layout="vllm:NHD", tp_rank=rank, tp_size=world)
    return deltakv.engine_hash_keys(ctx, [bytes(key)])


def test_tensor_parallel_events_report_whole_blocks(sidecar_factory):
    """TP 2: a block is reported STORED once both ranks' shards are stored, and REMOVED as soon
    as either shard goes (removed by another process, or evicted by the pool); each change
    once."""
    s = sidecar_factory(kv_block_bytes=BLOCK, kv_slots=6)
    specs = [dvllm.DeltakvOffloadingSpec(make_config(s.pool, rank=r, world=2)) for r in (0, 1)]
    mgr = specs[0].get_manager()
    workers = [specs[r].get_worker(kv_caches(20 + r)[1]) for r in (0, 1)]
    ctx = base.ReqContext(req_id="events")
    job = iter(range(1, 100))

    def store(rank, spec, blocks):
        j = next(job)
        workers[rank].submit_store(j, gpu_spec(blocks), spec)
        assert run(workers[rank], j).success

    def events():
        with mgr.lock:
            return [(e.keys[0], e.removed) for e in mgr.take_events()]

    ks = keys(2, start=500)
    with mgr.lock:
        out = mgr.prepare_store(ks, ctx)
    store(0, out.store_spec, [0, 1])
    assert events() == []  # rank 1's shards are missing
    store(1, out.store_spec, [0, 1])
    with mgr.lock:
        mgr.complete_store(ks, ctx)
    assert events() == [(ks[0], False), (ks[1], False)]
    assert events() == []

    # Another process removes rank 1's shard of ks[1]: the block is gone for vLLM.
    other = deltakv.KvClient(deltakv.CrossLayer(np.zeros((1, BLOCK), np.uint8)), pool_name=s.pool,
                             copy_threads=0)
    other.remove(shard_key(ks[1], 1, 2))
    assert events() == [(ks[1], True)]
    with mgr.lock:
        assert mgr.lookup(ks[1], ctx) == base.LookupResult.MISS
    # Stored again: rank 0's shard is still there, so the block is whole when rank 1's lands.
    with mgr.lock:
        out = mgr.prepare_store([ks[1]], ctx)
    assert out.keys_to_store == [ks[1]]
    store(1, out.store_spec, [1])
    with mgr.lock:
        mgr.complete_store([ks[1]], ctx)
    assert events() == [(ks[1], False)]

    # The pool evicts: 4 of its 6 slots hold ks; three blocks of rank 0 alone need a seventh
    # slot, and the least recently stored shard (rank 0's of ks[0]) goes. The new blocks are
    # not whole, so they are not reported.
    more = keys(3, start=600)
    with mgr.lock:
        out = mgr.prepare_store(more, ctx)
    store(0, out.store_spec, [2, 3, 4])
    assert events() == [(ks[0], True)]
    assert other.lookup(shard_key(ks[0], 0, 2)) == 0
    assert other.lookup(shard_key(ks[0], 1, 2)) == 1
    other.remove(shard_key(ks[0], 1, 2))  # the other shard of a block already reported gone
    assert events() == []
    other.close()
    for w in workers:
        w.shutdown()
    mgr.shutdown()


def test_refusals(sidecar_factory):
    s = sidecar_factory(kv_block_bytes=BLOCK, kv_slots=4)
    with pytest.raises(deltakv.UnimplementedError, match="blocks_per_chunk"):
        cfg = make_config(s.pool)
        cfg = vcfg.OffloadingConfig(**{**cfg.__dict__, "cache": vcfg.OffloadingCacheConfig(
            tokens_per_hash=16, blocks_per_chunk=2)})
        dvllm.DeltakvOffloadingSpec(cfg).get_worker(kv_caches(0)[1])
    with pytest.raises(deltakv.NotFoundError, match="kv-block-bytes"):
        dvllm.DeltakvOffloadingSpec(make_config("deltakv-no-such-pool.kv")).get_manager()
    # A pool whose slots are not one worker block: refused with both sizes named.
    s2 = sidecar_factory(kv_block_bytes=2 * BLOCK, kv_slots=4)
    with pytest.raises(deltakv.InvalidArgumentError, match=str(2 * BLOCK)):
        dvllm.DeltakvOffloadingSpec(make_config(s2.pool)).get_manager()
