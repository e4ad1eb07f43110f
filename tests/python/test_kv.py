"""deltakv.KvClient against a real sidecar's pool: store and reload across two processes, every
byte checked; the handle API; events, stats and errors."""
from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest

import deltakv
from deltakv import kv as dkv

BLOCK = 4096
CTX = dict(model_fingerprint="py/test@1", kv_dtype="bfloat16")


def pattern(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, BLOCK), dtype=np.uint8)


def child_store(pool: str, q) -> None:
    try:
        mem = pattern(7, 8)
        with deltakv.KvClient(deltakv.CrossLayer(mem), pool_name=pool) as c:
            keys = deltakv.chain_keys(deltakv.KeyContext(**CTX), np.arange(8 * 16), 16)
            out = c.store(keys, np.arange(8))
            q.put(("ok", out.tolist()))
    except Exception as e:  # reported to the parent
        q.put(("error", repr(e)))


def test_store_in_one_process_load_in_another(sidecar_factory):
    s = sidecar_factory(kv_block_bytes=BLOCK, kv_slots=64)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=child_store, args=(s.pool, q))
    p.start()
    status, outcomes = q.get(timeout=60)
    p.join(30)
    assert status == "ok", outcomes
    assert outcomes == [dkv.STORE_ALLOCATED] * 8

    mem = np.zeros((16, BLOCK), np.uint8)
    with deltakv.KvClient(deltakv.CrossLayer(mem), pool_name=s.pool) as c:
        assert (c.block_bytes, c.capacity_slots) == (BLOCK, 64)
        keys = deltakv.chain_keys(deltakv.KeyContext(**CTX), np.arange(8 * 16), 16)
        assert c.lookup(keys) == 8
        c.load(keys, blocks=np.arange(8, 16))
        assert np.array_equal(mem[8:], pattern(7, 8))
        assert not mem[:8].any()
        # Another salt: other keys, nothing stored.
        other = deltakv.chain_keys(deltakv.KeyContext(**CTX, salt="tenant-b"), np.arange(128), 16)
        assert c.lookup(other) == 0
        with pytest.raises(deltakv.NotFoundError):
            c.load(other[:1], [0])
        st = c.stats()
        assert st["pool_ready_slots"] == 8 and st["load_bytes"] == 8 * BLOCK


def test_per_layer_handles_events_and_errors(sidecar_factory):
    layers, per = 4, BLOCK // 8  # K and V per layer: 8 runs of 512 bytes make one block
    s = sidecar_factory(kv_block_bytes=BLOCK, kv_slots=4)
    k = [np.random.default_rng(i).integers(0, 256, (6, per), dtype=np.uint8) for i in range(layers)]
    v = [np.random.default_rng(10 + i).integers(0, 256, (6, per), dtype=np.uint8)
         for i in range(layers)]
    keys = deltakv.chain_keys(deltakv.KeyContext(**CTX), np.arange(6 * 16), 16)
    with deltakv.KvClient(deltakv.PerLayer(k, v), pool_name=s.pool, copy_threads=0) as c:
        h = c.prepare_store(keys[:5])
        assert list(h.outcomes) == [dkv.STORE_ALLOCATED] * 4 + [dkv.STORE_REFUSED]
        assert h.info()["refused"] == 1
        c.start_store(h, [0, 1, 2, 3, 0])  # the refused key's entry is ignored
        assert h.wait(1000)
        c.complete_store(h)
        h.free()
        h.free()  # idempotent
        with pytest.raises(deltakv.FailedPreconditionError, match="freed"):
            h.info()
        events = c.drain_events()
        assert [e[0] for e in events] == [dkv.EVENT_STORED] * 4
        assert c.lookup(keys) == 4
        # Reload into other engine blocks, byte for byte.
        h = c.prepare_load(keys[:2])
        assert h.size == 2
        c.start_load(h, [4, 5])
        c.complete_load(h)
        h.free()
        for layer in range(layers):
            assert np.array_equal(k[layer][4:6], k[layer][0:2])
            assert np.array_equal(v[layer][4:6], v[layer][0:2])
        with pytest.raises(deltakv.InvalidArgumentError, match="repeated|twice"):
            c.prepare_store(np.concatenate([keys[5:6], keys[5:6]]))
        with pytest.raises(ValueError, match=r"shape \(n, 2\)"):
            c.lookup(np.zeros((3, 3), np.uint64))
        c.remove(keys[0])
        with pytest.raises(deltakv.NotFoundError):
            c.remove(keys[0])
        assert c.lookup(keys) == 0
    assert c.closed
    with pytest.raises(deltakv.FailedPreconditionError, match="closed"):
        c.lookup(keys)


def test_keys_match_the_documented_vectors():
    # docs/KEYS.md: chain A, tokens 1..4 in one block of 4, every context field absent.
    k = deltakv.chain_keys(deltakv.KeyContext(), [1, 2, 3, 4], 4)
    assert f"{int(k[0, 1]):016x}{int(k[0, 0]):016x}" == "a4b5c1a5c0f384a78fa039e5cfef3a2a"
    assert deltakv.chain_keys(deltakv.KeyContext(), [1, 2, 3], 4).shape == (0, 2)
    assert deltakv.engine_hash_keys(deltakv.KeyContext(), [b"\x01" * 32, b"\x02" * 32]).shape == (2, 2)
    assert deltakv.engine_hash_keys(deltakv.KeyContext(), [1, 2, 3]).shape == (3, 2)
    assert isinstance(deltakv.token_fingerprint([1, 2, 3]), int)
    with pytest.raises(deltakv.InvalidArgumentError, match="block_tokens"):
        deltakv.chain_keys(deltakv.KeyContext(), [1, 2], 0)
    with pytest.raises(deltakv.InvalidArgumentError, match="tp_rank"):
        deltakv.chain_keys(deltakv.KeyContext(tp_rank=3, tp_size=2), [1, 2], 2)


def test_engine_hashes_convert_as_documented():
    # docs/KEYS.md §5: a 64-bit int is 8 bytes little endian modulo 2**64, a larger one 32 bytes
    # big endian (the digest it holds), a hex str the bytes it encodes.
    ctx = deltakv.KeyContext()
    digest = bytes(range(1, 33))

    def same(a, b):
        assert np.array_equal(deltakv.engine_hash_keys(ctx, a), deltakv.engine_hash_keys(ctx, b))

    same([-2], [bytes.fromhex("feffffffffffffff")])
    same([2**64 - 1], [b"\xff" * 8])
    same([int.from_bytes(digest, "big")], [digest])
    same([digest.hex()], [digest])
    same([np.int64(5)], [(5).to_bytes(8, "little")])
    with pytest.raises(ValueError, match="different lengths"):
        deltakv.engine_hash_keys(ctx, [1, 2**64])
    for bad in ([-(2**63) - 1], [2**256], ["not hex"]):
        with pytest.raises(ValueError):
            deltakv.engine_hash_keys(ctx, bad)
    with pytest.raises(TypeError):
        deltakv.engine_hash_keys(ctx, [1.5])


def test_integer_arguments_are_checked_not_cast():
    # Tokens, keys and blocks are unsigned integers of their width: anything else is refused
    # (ValueError or TypeError), never wrapped around or truncated.
    ctx = deltakv.KeyContext()
    for tokens in ([-1] * 4, [2**32] * 4, np.full(4, -1, np.int64), np.full(4, 2**40, np.int64)):
        with pytest.raises(ValueError, match="tokens"):
            deltakv.chain_keys(ctx, tokens, 4)
        with pytest.raises(ValueError, match="tokens"):
            deltakv.token_fingerprint(tokens)
    with pytest.raises(TypeError, match="tokens"):
        deltakv.chain_keys(ctx, [1.5, 2, 3, 4], 4)
    assert np.array_equal(deltakv.chain_keys(ctx, np.arange(1, 5, dtype=np.int64), 4),
                          deltakv.chain_keys(ctx, [1, 2, 3, 4], 4))
    from deltakv import kv
    for keys in ([[-1, -1]], [[2**64, 0]], np.array([[1.5, 2]])):
        with pytest.raises((ValueError, TypeError), match="keys"):
            kv._keys(keys)
    for blocks in ([-1], [2**64], [1.5]):
        with pytest.raises((ValueError, TypeError), match="blocks"):
            kv._blocks(blocks)
    assert kv._keys(np.zeros((0, 2), np.int64)).shape == (0, 2)
    # Keys as Python ints, one half at or above 2**63 (about half of all keys): numpy alone
    # would make floats of them.
    big = (2**63 + 5, 7)
    assert kv._keys([big, (1, 2)]).tolist() == [[2**63 + 5, 7], [1, 2]]
    assert kv._keys(big).tolist() == [[2**63 + 5, 7]]
    parent = np.array([big], np.uint64)
    assert np.array_equal(deltakv.chain_keys(ctx, [1, 2, 3, 4], 4, big),
                          deltakv.chain_keys(ctx, [1, 2, 3, 4], 4, parent))
    with pytest.raises(TypeError, match="keys"):
        kv._keys([(2**63 + 5, 7.0)])
    client = kv.KvClient.__new__(kv.KvClient)  # remove checks its key before the client
    with pytest.raises(ValueError, match="one key"):
        client.remove(np.zeros((0, 2)))


def test_opening_errors(sidecar_factory):
    with pytest.raises(deltakv.NotFoundError, match="kv-block-bytes"):
        deltakv.KvClient(deltakv.CrossLayer(np.zeros((2, BLOCK), np.uint8)),
                         pool_name="deltakv-py-no-such-pool.kv")
    s = sidecar_factory(kv_block_bytes=BLOCK, kv_slots=4)
    with pytest.raises(deltakv.InvalidArgumentError, match=str(BLOCK)):
        deltakv.KvClient(deltakv.CrossLayer(np.zeros((2, BLOCK // 2), np.uint8)), pool_name=s.pool)
    ro = np.zeros((2, BLOCK), np.uint8)
    ro.setflags(write=False)
    with pytest.raises(deltakv.InvalidArgumentError, match="writable"):
        deltakv.KvClient(deltakv.CrossLayer(ro), pool_name=s.pool)
    with pytest.raises(deltakv.UnimplementedError):
        deltakv.KvClient(deltakv.CrossLayer(np.zeros((2, BLOCK), np.uint8)), pool_name=s.pool,
                         copy_backend="cuda")


def test_layout_reaching_past_its_arrays_is_refused():
    # A layout whose blocks lie past the end of one of its arrays would let a load write past
    # it: refused before the pool is opened (this pool does not exist), naming the array.
    no_pool = "deltakv-py-no-such-pool.kv"
    mem = np.zeros((8, BLOCK), np.uint8)
    small = np.zeros((2, BLOCK // 8), np.uint8)
    big = np.zeros((8, BLOCK // 8), np.uint8)
    refused = [
        (deltakv.CrossLayer(mem, num_blocks=1_000_000), "CrossLayer memory"),
        (deltakv.CrossLayer(mem, num_blocks=9), "CrossLayer memory"),
        (deltakv.CrossLayer(mem, block_stride=2 * BLOCK), "CrossLayer memory"),
        (deltakv.PerLayer(k=[big, small], v=[big.copy(), big.copy()]), r"PerLayer k\[1\]"),
        (deltakv.PerLayer(k=[big, big.copy()], v=[big.copy(), small]), r"PerLayer v\[1\]"),
        (deltakv.PerLayer(k=[big], num_blocks=9), r"PerLayer k\[0\]"),
        (deltakv.Pieces([(mem, BLOCK, BLOCK)], num_blocks=9), "Pieces piece 0"),
    ]
    for layout, what in refused:
        with pytest.raises(deltakv.InvalidArgumentError, match=what + ".*bytes, but the array"):
            deltakv.KvClient(layout, pool_name=no_pool)
    fits = [
        deltakv.CrossLayer(mem),
        deltakv.CrossLayer(mem, num_blocks=4, block_stride=2 * BLOCK),
        deltakv.CrossLayer(mem.ctypes.data, num_blocks=1_000_000, block_bytes=BLOCK),  # trusted
        deltakv.PerLayer(k=[big, big.copy()], v=[big.copy(), None]),
        deltakv.Pieces([(mem, BLOCK, BLOCK)], num_blocks=8),
    ]
    for layout in fits:
        with pytest.raises(deltakv.NotFoundError):
            deltakv.KvClient(layout, pool_name=no_pool)


def test_messages_name_what_is_wrong():
    with pytest.raises(deltakv.InvalidArgumentError, match=r"shape \(0, 4096\) has no blocks"):
        deltakv.KvClient(deltakv.CrossLayer(np.zeros((0, BLOCK), np.uint8)),
                         pool_name="deltakv-py-no-such-pool.kv")
    ctx = deltakv.KeyContext()
    for hashes, hash_bytes in (([b""], None), ([b"\x01" * 257], None), (b"", 0)):
        with pytest.raises(deltakv.InvalidArgumentError, match="1 to 256 bytes long, not"):
            deltakv.engine_hash_keys(ctx, hashes, hash_bytes)
    assert deltakv.engine_hash_keys(ctx, [b"\x01" * 256]).shape == (1, 2)
    assert deltakv.engine_hash_keys(ctx, [b"\x01"]).shape == (1, 2)
