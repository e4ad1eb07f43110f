"""deltakv.sglang.DeltakvHiCacheStorage against SGLang's real HiCache classes (the pinned sglang
in the cached venv): real host pools (MHA layer_first / page_first / page_first_direct, MLA
layer_first / page_first / page_first_direct, Mamba state) on CPU, the backend made by SGLang's
StorageBackendFactory ("dynamic"), real HostPoolGroup / PoolTransfer objects for the v2 calls,
and real sidecar pools; every byte of every moved page is checked."""
from __future__ import annotations

import hashlib
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pytest.importorskip("sglang.srt.mem_cache.hicache_storage")
    from sglang.srt.mem_cache.device_pool_info import (  # noqa: E402
        KVBufferLayout, KVBuffers, MambaStateBufferInfo, MHABufferInfo, MLABufferInfo)
    from sglang.srt.mem_cache.hicache_storage import (  # noqa: E402
        HiCacheStorageConfig, PoolHitPolicy, PoolName, PoolTransfer, count_pool_hits)
    from sglang.srt.mem_cache.pool_host.group import HostPoolGroup, PoolEntry  # noqa: E402
    from sglang.srt.mem_cache.pool_host.mamba import MambaPoolHost  # noqa: E402
    from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost  # noqa: E402
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory  # noqa: E402

import deltakv  # noqa: E402
from deltakv import sglang as dsglang  # noqa: E402

LAYERS, HEADS, HEAD_DIM, PAGE = 2, 2, 8, 4   # tokens per page
HOST_PAGES = 8
DEVICE_TOKENS = 16
KV_LORA, ROPE = 8, 4
DTYPE = torch.bfloat16


def _ptrs(bufs):
    return torch.tensor([b.data_ptr() for b in bufs], dtype=torch.uint64)


def mha_host_pool(layout: str) -> MHATokenToKVPoolHost:
    # the device pool's K/V buffers as MHATokenToKVPool._mha_buffer_info describes them
    k = [torch.zeros(DEVICE_TOKENS, HEADS, HEAD_DIM, dtype=DTYPE) for _ in range(LAYERS)]
    v = [torch.zeros(DEVICE_TOKENS, HEADS, HEAD_DIM, dtype=DTYPE) for _ in range(LAYERS)]
    info = MHABufferInfo(
        buffers=KVBuffers(k=tuple(k), v=tuple(v), k_data_ptrs=_ptrs(k), v_data_ptrs=_ptrs(v),
                          layout=KVBufferLayout.NHD),
        page_size=PAGE, head_num=HEADS, head_dim=HEAD_DIM, v_head_dim=HEAD_DIM, dtype=DTYPE,
        device=torch.device("cpu"))
    pool = MHATokenToKVPoolHost(info, 2.0, 0, PAGE, layout, pin_memory=False, device="cpu",
                                device_capacity_tokens=DEVICE_TOKENS, start_layer=0,
                                end_layer=LAYERS, host_token_capacity=HOST_PAGES * PAGE)
    pool._keep = (k, v)
    return pool


def mla_host_pool(layout: str):
    from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost
    rows = [torch.zeros(DEVICE_TOKENS, 1, KV_LORA + ROPE, dtype=DTYPE) for _ in range(LAYERS)]
    info = MLABufferInfo(buffers=tuple(rows), data_ptrs=_ptrs(rows),
                         layer_indices=tuple(range(LAYERS)), device_layer_num=LAYERS,
                         page_size=PAGE, kv_lora_rank=KV_LORA, qk_rope_head_dim=ROPE,
                         kv_cache_dim=KV_LORA + ROPE, dtype=DTYPE, device=torch.device("cpu"))
    pool = MLATokenToKVPoolHost(info, 2.0, 0, PAGE, layout, pin_memory=False,
                                device="cpu", device_capacity_tokens=DEVICE_TOKENS,
                                start_layer=0, end_layer=LAYERS, target_layer_num=LAYERS,
                                host_token_capacity=HOST_PAGES * PAGE)
    pool._keep = rows
    return pool


def mamba_host_pool() -> MambaPoolHost:
    """Mamba state (page_size 1): a float32 temporal state and a bfloat16 conv state per layer
    and slot, 136 bytes a slot."""
    info = MambaStateBufferInfo(temporal=torch.zeros(LAYERS, 6, 3, 4, dtype=torch.float32),
                                conv=(torch.zeros(LAYERS, 6, 5, 2, dtype=DTYPE),))
    pool = MambaPoolHost(info, 2.0, 0, device_capacity=6, pin_memory=False, device="cpu",
                         layout="page_first")
    pool._keep = info
    return pool


def is_mla(kind: str) -> bool:
    return kind.startswith("mla")


def layout_of(kind: str) -> str:
    """kind: an MHA host layout, or "mla" / "mla_<layout>" (plain "mla": page_first)."""
    if kind == "mla":
        return "page_first"
    return kind[len("mla_"):] if is_mla(kind) else kind


def make_pool(kind: str):
    return mla_host_pool(layout_of(kind)) if is_mla(kind) else mha_host_pool(kind)


def page_tensor(pool, kind: str, page: int):
    """Page `page` of the host pool's kv_buffer, as SGLang's layouts index it."""
    kv, toks = pool.kv_buffer, slice(page * PAGE, (page + 1) * PAGE)
    layout = layout_of(kind)
    if layout == "page_first_direct":
        return kv[page] if is_mla(kind) else kv[:, page]
    if layout == "layer_first":
        return kv[:, toks] if is_mla(kind) else kv[:, :, toks]
    return kv[toks] if is_mla(kind) else kv[:, toks]


def page_runs(pool):
    """The (offset into kv_buffer, bytes) runs of each host page, from get_page_buffer_meta."""
    base = pool.kv_buffer.data_ptr()
    out = []
    for p in range(pool.page_num):
        ptrs, sizes = pool.get_page_buffer_meta(torch.arange(p * PAGE, (p + 1) * PAGE))
        out.append([(int(a) - base, int(s)) for a, s in zip(ptrs, sizes)])
    return out


def page_bytes_of(pool) -> int:
    return sum(s for _o, s in page_runs(pool)[0])


def page_view(pool, page: int) -> bytes:
    flat = pool.kv_buffer.view(-1).view(torch.uint8).numpy()
    return b"".join(flat[o:o + s].tobytes() for o, s in page_runs(pool)[page])


def randomize(pool, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    buffers = pool.kv_buffer if isinstance(pool.kv_buffer, list) else [pool.kv_buffer]
    for b in buffers:
        flat = b.view(-1).view(torch.uint8)
        flat.copy_(torch.randint(0, 256, flat.shape, dtype=torch.uint8, generator=g))


def config(pool_name: str, kind: str, tp_rank: int = 0, tp_size: int = 1,
           model: str = "org/tiny@1", v1: bool = True, pools=None, cp_rank: int = 0,
           cp_size: int = 1, **dcp) -> HiCacheStorageConfig:
    extra = {"backend_name": "deltakv", "module_path": "deltakv.sglang",
             "class_name": "DeltakvHiCacheStorage", "deltakv_pool": pool_name}
    if v1:
        extra["interface_v1"] = 1
    if pools:
        extra["deltakv_pools"] = pools
    return HiCacheStorageConfig(tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1,
                                attn_cp_rank=cp_rank, attn_cp_size=cp_size,
                                is_mla_model=is_mla(kind), enable_storage_metrics=False,
                                is_page_first_layout=layout_of(kind) != "layer_first",
                                model_name=model, extra_config=extra, **dcp)


def backend(cfg: HiCacheStorageConfig, host_pool):
    b = StorageBackendFactory.create_backend("dynamic", cfg, host_pool)
    assert isinstance(b, dsglang.DeltakvHiCacheStorage)
    b.register_mem_pool_host(host_pool)  # as HiCacheController does
    return b


def keys(n: int, start: int = 0, tag: str = "p"):
    return [hashlib.sha256(f"{tag}{i}".encode()).hexdigest() for i in range(start, start + n)]


def host_indices(pages):
    if not pages:
        return torch.zeros(0, dtype=torch.int64)
    return torch.cat([torch.arange(p * PAGE, (p + 1) * PAGE) for p in pages])


KINDS = ["layer_first", "page_first", "page_first_direct", "mla", "mla_layer_first",
         "mla_page_first_direct"]


@pytest.mark.parametrize("kind", KINDS)
def test_two_engines_share_pages_byte_exact(sidecar_factory, kind):
    a_pool = make_pool(kind)
    pb = page_bytes_of(a_pool)
    assert pb == a_pool.get_size_per_token() * PAGE
    s = sidecar_factory(kv_block_bytes=pb, kv_slots=32)
    a = backend(config(s.pool, kind), a_pool)
    randomize(a_pool, 1)
    ks = keys(4)
    src_pages = [1, 3, 4, 6]
    assert a.batch_exists(ks) == 0
    assert a.batch_set_v1(ks, host_indices(src_pages)) == [True] * 4
    assert a.batch_exists(ks) == 4 and a.exists(ks[0])

    # a second engine: its own host pool and backend, same pool and config
    b_pool = make_pool(kind)
    randomize(b_pool, 2)
    b = backend(config(s.pool, kind), b_pool)
    assert b.batch_exists(ks) == 4
    dst_pages = [7, 2, 5, 0]
    untouched = {p: page_view(b_pool, p) for p in range(HOST_PAGES) if p not in dst_pages}
    assert b.batch_get_v1(ks, host_indices(dst_pages)) == [True] * 4
    for sp, dp in zip(src_pages, dst_pages):
        assert page_view(b_pool, dp) == page_view(a_pool, sp)
    for p, before in untouched.items():
        assert page_view(b_pool, p) == before
    # the same bytes seen through the kv_buffer directly (the page of every layer / K,V)
    for sp, dp in zip(src_pages, dst_pages):
        sa, sb = page_tensor(a_pool, kind, sp), page_tensor(b_pool, kind, dp)
        assert torch.equal(sa.contiguous().view(torch.uint8), sb.contiguous().view(torch.uint8))
    stats = b.get_stats()
    assert stats is not None
    a.close()
    b.close()
    assert a.get_stats() is None


@pytest.mark.parametrize("kind", KINDS)
def test_prefix_semantics(sidecar_factory, kind):
    a_pool = make_pool(kind)
    s = sidecar_factory(kv_block_bytes=page_bytes_of(a_pool), kv_slots=32)
    a = backend(config(s.pool, kind), a_pool)
    randomize(a_pool, 3)
    ks = keys(5, tag="prefix")
    # store pages 0, 1 and 3 of the chain; 2 is missing
    assert a.batch_set_v1([ks[0], ks[1], ks[3]], host_indices([0, 1, 3])) == [True] * 3
    assert a.batch_exists(ks) == 2
    assert a.batch_exists(ks[3:4]) == 1
    assert a.batch_exists([ks[2], ks[3]]) == 0
    assert a.batch_exists([]) == 0
    b_pool = make_pool(kind)
    randomize(b_pool, 4)
    b = backend(config(s.pool, kind), b_pool)
    before = {p: page_view(b_pool, p) for p in range(HOST_PAGES)}
    dst = [4, 5, 6, 7, 2]
    assert b.batch_get_v1(ks, host_indices(dst)) == [True, True, False, False, False]
    assert page_view(b_pool, 4) == page_view(a_pool, 0)
    assert page_view(b_pool, 5) == page_view(a_pool, 1)
    for p in (6, 7, 2, 0, 1, 3):  # pages after the first miss stay as they were
        assert page_view(b_pool, p) == before[p]
    assert b.batch_get_v1([ks[2], ks[3]], host_indices([6, 7])) == [False, False]
    assert page_view(b_pool, 7) == before[7]
    assert b.batch_get_v1([], host_indices([])) == []
    assert b.batch_set_v1([], host_indices([])) == []
    with pytest.raises(deltakv.InvalidArgumentError):
        b.batch_get_v1(ks[:2], host_indices([4]))  # 1 page of indices for 2 keys
    a.close()
    b.close()


@pytest.mark.parametrize("kind", KINDS)
def test_key_isolation(sidecar_factory, kind):
    a_pool = make_pool(kind)
    s = sidecar_factory(kv_block_bytes=page_bytes_of(a_pool), kv_slots=32)
    a = backend(config(s.pool, kind), a_pool)
    randomize(a_pool, 5)
    ks = keys(3, tag="iso")
    assert a.batch_set_v1(ks, host_indices([0, 1, 2])) == [True] * 3

    other_model_pool = make_pool(kind)
    other_model = backend(config(s.pool, kind, model="org/other@1"), other_model_pool)
    assert other_model.batch_exists(ks) == 0
    assert other_model.batch_get_v1(ks, host_indices([3, 4, 5])) == [False] * 3

    rank_pool = make_pool(kind)
    randomize(rank_pool, 6)
    rank1 = backend(config(s.pool, kind, tp_rank=1, tp_size=2), rank_pool)
    if is_mla(kind):
        # MLA pages are the same on every rank: rank 1 reads rank 0's pages; it is not the
        # storage writer, so its stores report success without storing anything
        assert rank1.batch_exists(ks) == 3
        assert rank1.batch_get_v1(ks, host_indices([5, 6, 7])) == [True] * 3
        for sp, dp in zip([0, 1, 2], [5, 6, 7]):
            assert page_view(rank_pool, dp) == page_view(a_pool, sp)
        extra = keys(1, tag="iso-rank1")
        assert rank1.batch_set_v1(extra, host_indices([0])) == [True]
        assert a.batch_exists(extra) == 0
    else:
        assert rank1.batch_exists(ks) == 0
        assert rank1.batch_get_v1(ks, host_indices([5, 6, 7])) == [False] * 3
        # and the tp_size=2 rank 0 is not tp_size=1 rank 0 either
        r0_pool = make_pool(kind)
        r0 = backend(config(s.pool, kind, tp_rank=0, tp_size=2), r0_pool)
        assert r0.batch_exists(ks) == 0
        r0.close()
    # context parallelism: each CP rank holds a slice of every page, so its pages are its own
    cp_pool = make_pool(kind)
    cp1 = backend(config(s.pool, kind, cp_rank=1, cp_size=2), cp_pool)
    assert cp1.batch_exists(ks) == 0
    assert cp1.batch_get_v1(ks, host_indices([5, 6, 7])) == [False] * 3
    for b in (a, other_model, rank1, cp1):
        b.close()


def test_decode_context_parallelism_is_refused(sidecar_factory):
    """With DCP each rank holds a slice of every MLA page under the same page hash: refused at
    construction rather than keyed as whole pages."""
    s = sidecar_factory(kv_block_bytes=512, kv_slots=8)
    cfg = config(s.pool, "mla", tp_rank=1, tp_size=2, dcp_size=2, dcp_rank=1,
                 logical_page_size=2 * PAGE)
    with pytest.raises(deltakv.UnimplementedError, match="dcp_size 2"):
        StorageBackendFactory.create_backend("dynamic", cfg, make_pool("mla"))


@pytest.mark.parametrize("kind, other_kind", [
    ("layer_first", "page_first"), ("page_first", "layer_first"),
    ("page_first", "page_first_direct"), ("mla", "mla_layer_first"),
    ("mla_page_first_direct", "mla")])
def test_layouts_do_not_share_keys(sidecar_factory, kind, other_kind):
    # same page bytes, different host layout: the page bytes are arranged differently
    a_pool = make_pool(kind)
    o_pool = make_pool(other_kind)
    assert page_bytes_of(a_pool) == page_bytes_of(o_pool)
    s = sidecar_factory(kv_block_bytes=page_bytes_of(a_pool), kv_slots=16)
    a = backend(config(s.pool, kind), a_pool)
    o = backend(config(s.pool, other_kind), o_pool)
    ks = keys(2, tag="layout")
    assert a.batch_set_v1(ks, host_indices([0, 1])) == [True, True]
    assert o.batch_exists(ks) == 0
    a.close()
    o.close()


@pytest.mark.parametrize("kind", KINDS)
def test_legacy_flat_pages_round_trip_apart_from_v1(sidecar_factory, kind):
    a_pool = make_pool(kind)
    pb = page_bytes_of(a_pool)
    s = sidecar_factory(kv_block_bytes=pb, kv_slots=32)
    a = backend(config(s.pool, kind, v1=False), a_pool)
    v1 = backend(config(s.pool, kind), make_pool(kind))
    g = torch.Generator().manual_seed(7)
    flat = [torch.randint(0, 256, (pb,), dtype=torch.uint8, generator=g) for _ in range(3)]
    ks = keys(3, tag="legacy")
    assert a.set(ks[0], flat[0]) is True
    assert a.batch_set(ks[1:], flat[1:]) is True
    assert a.set(ks[0], None) is False
    # a flat page in a typed tensor (SGLang's flat pages carry the pool dtype)
    typed = flat[0].clone().view(DTYPE)
    assert a.set(keys(1, tag="typed")[0], typed) is True
    out = a.get(keys(1, tag="typed")[0])
    assert bytes(np.asarray(out)) == flat[0].numpy().tobytes()

    got = a.get(ks[0])
    assert isinstance(got, np.ndarray) and got.tobytes() == flat[0].numpy().tobytes()
    target = torch.zeros(pb, dtype=torch.uint8)
    assert a.get(ks[1], target_location=target) is target
    assert torch.equal(target, flat[1])
    targets = [torch.zeros(pb // 2, dtype=DTYPE) for _ in range(2)]
    res = a.batch_get(ks[1:], targets)
    assert res[0] is targets[0] and res[1] is targets[1]
    for t, f in zip(targets, flat[1:]):
        assert torch.equal(t.view(torch.uint8), f)
    assert a.get(keys(1, tag="never")[0]) is None
    assert a.batch_get([keys(1, tag="never")[0], ks[2]])[0] is None
    with pytest.raises(deltakv.InvalidArgumentError):
        a.set(keys(1, tag="short")[0], torch.zeros(pb - 2, dtype=torch.uint8))

    # the flat keys are not the zero-copy path's keys, either way round
    assert v1.batch_exists(ks) == 0
    assert v1.batch_get_v1(ks[:1], host_indices([0])) == [False]
    randomize(v1.mem_pool_host, 8)
    vk = keys(1, tag="v1page")
    assert v1.batch_set_v1(vk, host_indices([2])) == [True]
    assert a.get(vk[0]) is None
    assert v1.batch_exists(vk) == 1
    a.close()
    v1.close()


@pytest.mark.parametrize("kind", KINDS)
def test_sidecar_block_size_must_equal_page_bytes(sidecar_factory, kind):
    pool = make_pool(kind)
    pb = page_bytes_of(pool)
    s = sidecar_factory(kv_block_bytes=pb * 2, kv_slots=8)
    b = StorageBackendFactory.create_backend("dynamic", config(s.pool, kind), pool)
    with pytest.raises(deltakv.InvalidArgumentError) as e:
        b.register_mem_pool_host(pool)
    msg = str(e.value)
    assert str(pb) in msg and str(pb * 2) in msg, msg


def test_unregistered_backend_refuses(sidecar_factory):
    s = sidecar_factory(kv_block_bytes=512, kv_slots=8)
    pool = make_pool("layer_first")
    b = StorageBackendFactory.create_backend("dynamic", config(s.pool, "layer_first"), pool)
    with pytest.raises(deltakv.DeltakvError):
        b.batch_exists(keys(1))
    assert b.get_stats() is None
    b.close()


# ---- v2: hybrid host pools (HostPoolGroup entries) ---------------------------------------------

MAMBA_BYTES = 136  # mamba_host_pool's slot


def hybrid(kv_pool, cfg, kind: str = "page_first"):
    """A real HostPoolGroup of KV (the anchor), SWA (an MHA pool) and Mamba state, attached to
    the backend as SGLang's HybridCacheController.attach_storage_backend does."""
    kv = make_pool(kind)
    swa = mha_host_pool("page_first")
    mamba = mamba_host_pool()
    group = HostPoolGroup([
        PoolEntry(name=PoolName.KV, host_pool=kv, device_pool=None, layer_mapper=lambda i: i,
                  is_primary_index_anchor=True),
        PoolEntry(name=PoolName.SWA, host_pool=swa, device_pool=None, layer_mapper=lambda i: i),
        PoolEntry(name=PoolName.MAMBA, host_pool=mamba, device_pool=None,
                  layer_mapper=lambda i: i)])
    b = StorageBackendFactory.create_backend("dynamic", cfg, group.anchor_entry.host_pool)
    b.register_mem_pool_host(group.anchor_entry.host_pool)
    for entry in group.entries:
        b.register_mem_host_pool_v2(entry.host_pool, entry.name)
    b.on_host_pools_registered()
    return b, group


def slot_bytes(pool, slot: int) -> bytes:
    """A Mamba slot's bytes (temporal, then conv), as get_page_buffer_meta lays them out."""
    ptrs, sizes = pool.get_page_buffer_meta(torch.tensor([slot]))
    out = b""
    for buf, ptr, size in zip([pool.temporal_buffer, *pool.conv_buffer], ptrs, sizes):
        flat = buf.view(-1).view(torch.uint8).numpy()
        off = int(ptr) - buf.data_ptr()
        out += flat[off:off + int(size)].tobytes()
    return out


def swa(keys_, pages, policy=PoolHitPolicy.ALL_PAGES):
    return PoolTransfer(name=PoolName.SWA, keys=list(keys_), host_indices=host_indices(pages),
                        hit_policy=policy)


def mamba(keys_, slots):
    return PoolTransfer(name=PoolName.MAMBA, keys=list(keys_),
                        host_indices=torch.tensor(slots, dtype=torch.int64),
                        hit_policy=PoolHitPolicy.TRAILING_PAGES)


@pytest.mark.parametrize("kind", ["layer_first", "page_first_direct"])
def test_v2_hybrid_pools_round_trip(sidecar_factory, kind):
    kv_pool = make_pool(kind)
    pb = page_bytes_of(kv_pool)
    s = sidecar_factory(kv_block_bytes=pb, kv_slots=64)  # KV and SWA pages (the same size)
    sm = sidecar_factory(kv_block_bytes=MAMBA_BYTES, kv_slots=16)
    cfg = config(s.pool, kind, pools={"mamba": sm.pool})
    a, ga = hybrid(s.pool, cfg, kind)
    for i, e in enumerate(ga.entries):
        randomize(e.host_pool, 20 + i)
    a_kv, a_swa, a_mamba = (ga.get_pool(n) for n in (PoolName.KV, PoolName.SWA, PoolName.MAMBA))
    ks = keys(4, tag="hybrid")
    # as the controller backs up a request: KV through v1, the side pools through v2 (SWA
    # pages for the first 3 pages, the Mamba state of the prefix that ends at page 2)
    assert a.batch_set_v1(ks, host_indices([0, 1, 2, 3])) == [True] * 4
    out = a.batch_set_v2([swa(ks[:3], [4, 5, 6]), mamba(ks[1:2], [3])])
    assert out == {PoolName.SWA: [True] * 3, PoolName.MAMBA: [True]}
    assert count_pool_hits(out) == {PoolName.SWA: 3, PoolName.MAMBA: 1}

    b, gb = hybrid(s.pool, cfg, kind)
    for i, e in enumerate(gb.entries):
        randomize(e.host_pool, 30 + i)
    b_kv, b_swa, b_mamba = (gb.get_pool(n) for n in (PoolName.KV, PoolName.SWA, PoolName.MAMBA))
    r = b.batch_exists_v2(ks, [swa(ks, [0, 1, 2, 3]), mamba(ks[-1:], [0])])
    # SWA covers prefixes 1-3; a one-page Mamba window only the prefix ending at page 2
    assert (r.kv_hit_pages, r.restorable_prefix_pages) == (2, [2])
    assert r.extra_pool_hit_pages == {PoolName.KV: 4, PoolName.SWA: 3, PoolName.MAMBA: 2}
    r = b.batch_exists_v2(ks, [swa(ks, [0, 1, 2, 3])])
    assert (r.kv_hit_pages, r.restorable_prefix_pages) == (3, [1, 2, 3])
    r = b.batch_exists_v2(ks, [])
    assert (r.kv_hit_pages, r.extra_pool_hit_pages) == (4, {PoolName.KV: 4})

    before_swa = page_view(b_swa, 7)
    got = b.batch_get_v2([swa(ks[:3] + ks[3:], [2, 3, 0, 7]), mamba(ks[1:2], [5])])
    assert got == {PoolName.SWA: [True, True, True, False], PoolName.MAMBA: [True]}
    for sp, dp in zip([4, 5, 6], [2, 3, 0]):
        assert page_view(b_swa, dp) == page_view(a_swa, sp)
    assert page_view(b_swa, 7) == before_swa  # after the first miss: untouched
    assert slot_bytes(b_mamba, 5) == slot_bytes(a_mamba, 3)
    # the KV pool through v2 too: the same pages as v1 stored
    assert b.batch_get_v2([PoolTransfer(name=PoolName.KV, keys=ks[:2],
                                        host_indices=host_indices([6, 7]))]) == {
        PoolName.KV: [True, True]}
    assert page_view(b_kv, 6) == page_view(a_kv, 0) and page_view(b_kv, 7) == page_view(a_kv, 1)
    # pools are keyed apart: SWA pages are not KV pages under the same hash
    assert b.batch_exists(ks[3:]) == 1
    assert b.batch_get_v2([swa(ks[3:], [1])]) == {PoolName.SWA: [False]}
    a.close()
    b.close()


def test_v2_misses_and_refusals(sidecar_factory):
    kv_pool = make_pool("page_first")
    pb = page_bytes_of(kv_pool)
    s = sidecar_factory(kv_block_bytes=pb, kv_slots=32)
    sm = sidecar_factory(kv_block_bytes=MAMBA_BYTES, kv_slots=8)
    cfg = config(s.pool, "page_first", pools={"mamba": sm.pool})
    b, g = hybrid(s.pool, cfg)
    randomize(g.get_pool(PoolName.SWA), 40)
    never = keys(3, tag="never")
    r = b.batch_exists_v2(never, [swa(never, [0, 1, 2]), mamba(never[-1:], [0])])
    assert (r.kv_hit_pages, r.extra_pool_hit_pages, r.restorable_prefix_pages) == (0, {}, [])
    before = {p: page_view(g.get_pool(PoolName.SWA), p) for p in range(HOST_PAGES)}
    assert b.batch_get_v2([swa(never, [0, 1, 2]), mamba(never[:1], [2])]) == {
        PoolName.SWA: [False] * 3, PoolName.MAMBA: [False]}
    assert {p: page_view(g.get_pool(PoolName.SWA), p) for p in range(HOST_PAGES)} == before
    assert b.batch_set_v2([]) == {} and b.batch_get_v2([]) == {}
    # host indices that do not cover the keys move nothing (SGLang's contract), the other
    # transfers of the call still move
    ks = keys(2, tag="refuse")
    out = b.batch_set_v2([swa(ks, [0]), mamba(ks[:1], [1])])
    assert out == {PoolName.SWA: [False, False], PoolName.MAMBA: [True]}
    assert b.batch_set_v1(ks, host_indices([0, 1])) == [True, True]
    with pytest.raises(deltakv.UnimplementedError, match="block_groups"):
        b.batch_exists_v2(ks, [swa(ks, [0, 1], PoolHitPolicy.BLOCK_GROUPS)])
    unknown = PoolTransfer(name=PoolName.INDEXER, keys=ks, host_indices=host_indices([0, 1]))
    with pytest.raises(deltakv.FailedPreconditionError, match="indexer"):
        b.batch_get_v2([unknown])
    with pytest.raises(deltakv.FailedPreconditionError, match="indexer"):
        b.batch_exists_v2(ks, [unknown])
    with pytest.raises(deltakv.InvalidArgumentError, match="register_mem_pool_host"):
        b.register_mem_host_pool_v2(make_pool("page_first"), PoolName.KV)
    # a side pool whose pages are not the deltakv pool's slot: both sizes and the pool named
    with pytest.raises(deltakv.InvalidArgumentError) as e:
        b.register_mem_host_pool_v2(mamba_host_pool(), PoolName.DRAFT)  # onto the KV pool
    msg = str(e.value)
    assert "draft" in msg and str(MAMBA_BYTES) in msg and str(pb) in msg, msg
    b.close()


def test_v2_mla_pages_shared_mamba_state_per_rank(sidecar_factory):
    """An MLA model's KV pages are the same on every rank (the storage writer stores them);
    its Mamba state is sharded: every rank stores and reads its own."""
    kv_pool = make_pool("mla")
    s = sidecar_factory(kv_block_bytes=page_bytes_of(kv_pool), kv_slots=32)
    sm = sidecar_factory(kv_block_bytes=MAMBA_BYTES, kv_slots=16)
    ss = sidecar_factory(kv_block_bytes=page_bytes_of(make_pool("page_first")), kv_slots=16)
    ranks, groups = [], []
    for r in (0, 1):
        pools = {"mamba": sm.pool, "swa": ss.pool}
        b, g = hybrid(s.pool, config(s.pool, "mla", tp_rank=r, tp_size=2, pools=pools), "mla")
        for i, e in enumerate(g.entries):
            randomize(e.host_pool, 50 + 10 * r + i)
        ranks.append(b)
        groups.append(g)
    ks = keys(2, tag="mla-hybrid")
    for b in ranks:  # as the controller: rank 1 is no writer, its v1 store is skipped
        assert b.batch_set_v1(ks, host_indices([0, 1])) == [True, True]
        assert b.batch_set_v2([mamba(ks[-1:], [4 + ranks.index(b)])]) == {
            PoolName.MAMBA: [True]}
    for r, b in enumerate(ranks):
        res = b.batch_exists_v2(ks, [mamba(ks[-1:], [0])])
        assert (res.kv_hit_pages, res.restorable_prefix_pages) == (2, [2])
        assert b.batch_get_v2([mamba(ks[-1:], [9])]) == {PoolName.MAMBA: [True]}
        # each rank got its own state back, not the other rank's
        assert slot_bytes(groups[r].get_pool(PoolName.MAMBA), 9) == \
            slot_bytes(groups[r].get_pool(PoolName.MAMBA), 4 + r)
        assert b.batch_get_v1(ks, host_indices([6, 7])) == [True, True]
        assert page_view(groups[r].get_pool(PoolName.KV), 6) == \
            page_view(groups[0].get_pool(PoolName.KV), 0)
    assert slot_bytes(groups[0].get_pool(PoolName.MAMBA), 4) != \
        slot_bytes(groups[1].get_pool(PoolName.MAMBA), 5)
    # the SWA side pool is an MHA pool (this rank's heads): keyed per rank even on MLA
    assert ranks[0].batch_set_v2([swa(ks, [2, 3])]) == {PoolName.SWA: [True, True]}
    assert ranks[1].batch_exists_v2(ks, [swa(ks, [0, 1])]).kv_hit_pages == 0
    for b in ranks:
        b.close()
