"""The KV pool lives as long as its sidecar: a second sidecar refused on the same --shm-name
leaves the running one's pool alone, and a client of a pool that a sidecar's exit or restart
removed is told so instead of storing where nobody will find the blocks."""
from __future__ import annotations

import os
import signal
import subprocess

import numpy as np
import pytest

import deltakv
from sidecar_proc import TOKEN  # noqa: F401  (the token file's content)

BLOCK = 4096
CTX = dict(model_fingerprint="py/lifetime@1", kv_dtype="bfloat16")


def keys_for(n: int, salt: str = "") -> np.ndarray:
    return deltakv.chain_keys(deltakv.KeyContext(**CTX, salt=salt), np.arange(n * 16), 16)


def test_a_refused_second_sidecar_leaves_the_pool(sidecar_factory):
    s = sidecar_factory(kv_block_bytes=BLOCK, kv_slots=16)
    mem = np.random.default_rng(1).integers(0, 256, (4, BLOCK), dtype=np.uint8)
    with deltakv.KvClient(deltakv.CrossLayer(mem), pool_name=s.pool) as c:
        c.store(keys_for(4), np.arange(4))
        second = subprocess.run(
            [os.environ["DELTAKV_BIN"], "sidecar", "--listen", "127.0.0.1:0", "--token-file",
             s.token_file, "--shm-name", s.shm, "--kv-block-bytes", str(BLOCK),
             "--kv-capacity-slots", "8"], capture_output=True, text=True, timeout=60)
        assert second.returncode == 2, second.stderr
        assert "still alive" in second.stderr
        assert "KV pool ready" not in second.stderr
        # The running sidecar's pool is still the one under the name, blocks and all.
        assert c.lookup(keys_for(4)) == 4
    out = np.zeros((4, BLOCK), np.uint8)
    with deltakv.KvClient(deltakv.CrossLayer(out), pool_name=s.pool) as c:
        assert c.capacity_slots == 16
        c.load(keys_for(4), np.arange(4))
        assert np.array_equal(out, mem)


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_a_client_of_a_removed_or_replaced_pool_is_told(sidecar_factory, how):
    s = sidecar_factory(kv_block_bytes=BLOCK, kv_slots=16)
    mem = np.random.default_rng(2).integers(0, 256, (4, BLOCK), dtype=np.uint8)
    old = deltakv.KvClient(deltakv.CrossLayer(mem), pool_name=s.pool)
    old.store(keys_for(2), np.arange(2))
    if how == "stop":
        s.proc.send_signal(signal.SIGTERM)  # a graceful stop removes the pool
    else:
        s.proc.kill()  # the pool stays until the next sidecar replaces it
    s.proc.wait(30)
    if how == "kill":
        assert old.lookup(keys_for(2)) == 2  # nothing replaced it yet: still the live pool
        sidecar_factory(kv_block_bytes=BLOCK, kv_slots=16, shm=s.shm)
    with pytest.raises(deltakv.FailedPreconditionError, match="removed or replaced"):
        old.lookup(keys_for(2))
    with pytest.raises(deltakv.FailedPreconditionError, match="removed or replaced"):
        old.store(keys_for(4, salt="after"), np.arange(4))
    with pytest.raises(deltakv.FailedPreconditionError, match="removed or replaced"):
        old.load(keys_for(2), np.arange(2))
    old.close()
    if how == "stop":
        sidecar_factory(kv_block_bytes=BLOCK, kv_slots=16, shm=s.shm)
    # A new client of the new pool works; the old pool's blocks are not in it.
    with deltakv.KvClient(deltakv.CrossLayer(np.zeros((4, BLOCK), np.uint8)),
                          pool_name=s.pool) as c:
        assert c.lookup(keys_for(2)) == 0
        c.store(keys_for(4, salt="after"), np.arange(4))
        assert c.lookup(keys_for(4, salt="after")) == 4
