"""deltakv.sglang.DeltakvHiCacheStorage against SGLang's real HiCache classes (the pinned sglang
in the cached venv): real host pools (MHA layer_first / page_first, MLA page_first) on CPU, the
backend made by SGLang's StorageBackendFactory ("dynamic"), and a real sidecar pool; every
byte of every moved page is checked."""
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
        KVBufferLayout, KVBuffers, MHABufferInfo, MLABufferInfo)
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig  # noqa: E402
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


def mla_host_pool():
    from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost
    rows = [torch.zeros(DEVICE_TOKENS, 1, KV_LORA + ROPE, dtype=DTYPE) for _ in range(LAYERS)]
    info = MLABufferInfo(buffers=tuple(rows), data_ptrs=_ptrs(rows),
                         layer_indices=tuple(range(LAYERS)), device_layer_num=LAYERS,
                         page_size=PAGE, kv_lora_rank=KV_LORA, qk_rope_head_dim=ROPE,
                         kv_cache_dim=KV_LORA + ROPE, dtype=DTYPE, device=torch.device("cpu"))
    pool = MLATokenToKVPoolHost(info, 2.0, 0, PAGE, "page_first", pin_memory=False,
                                device="cpu", device_capacity_tokens=DEVICE_TOKENS,
                                start_layer=0, end_layer=LAYERS, target_layer_num=LAYERS,
                                host_token_capacity=HOST_PAGES * PAGE)
    pool._keep = rows
    return pool


def make_pool(kind: str):
    if kind == "mla":
        try:
            return mla_host_pool()
        except Exception as e:  # pragma: no cover - depends on the pinned sglang
            pytest.skip(f"MLATokenToKVPoolHost cannot be built on CPU: {e!r}")
    return mha_host_pool(kind)


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
    flat = pool.kv_buffer.view(-1).view(torch.uint8)
    flat.copy_(torch.randint(0, 256, flat.shape, dtype=torch.uint8, generator=g))


def config(pool_name: str, kind: str, tp_rank: int = 0, tp_size: int = 1,
           model: str = "org/tiny@1", v1: bool = True) -> HiCacheStorageConfig:
    extra = {"backend_name": "deltakv", "module_path": "deltakv.sglang",
             "class_name": "DeltakvHiCacheStorage", "deltakv_pool": pool_name}
    if v1:
        extra["interface_v1"] = 1
    return HiCacheStorageConfig(tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1,
                                attn_cp_rank=0, attn_cp_size=1, is_mla_model=kind == "mla",
                                enable_storage_metrics=False,
                                is_page_first_layout=kind != "layer_first",
                                model_name=model, extra_config=extra)


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


KINDS = ["layer_first", "page_first", "mla"]


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
    # the same bytes seen through the kv_buffer directly (token slices of every layer / K,V)
    for sp, dp in zip(src_pages, dst_pages):
        if kind == "layer_first":
            sa = a_pool.kv_buffer[:, :, sp * PAGE:(sp + 1) * PAGE]
            sb = b_pool.kv_buffer[:, :, dp * PAGE:(dp + 1) * PAGE]
        elif kind == "page_first":
            sa = a_pool.kv_buffer[:, sp * PAGE:(sp + 1) * PAGE]
            sb = b_pool.kv_buffer[:, dp * PAGE:(dp + 1) * PAGE]
        else:
            sa = a_pool.kv_buffer[sp * PAGE:(sp + 1) * PAGE]
            sb = b_pool.kv_buffer[dp * PAGE:(dp + 1) * PAGE]
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
    if kind == "mla":
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
    for b in (a, other_model, rank1):
        b.close()


@pytest.mark.parametrize("kind", ["layer_first", "page_first"])
def test_layouts_do_not_share_keys(sidecar_factory, kind):
    # same page bytes, different host layout: the page bytes are arranged differently
    a_pool = make_pool(kind)
    other_kind = "page_first" if kind == "layer_first" else "layer_first"
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
