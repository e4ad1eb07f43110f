"""deltakv.Engine over numpy weights against a real sidecar: a delta published from numpy and
driven over HTTP goes live in the arrays in place (callbacks and poll mode); a failing pause
callback is reported, not hidden."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import deltakv
from conftest import TOKEN


def weights(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"layer.0.w": rng.standard_normal((64, 32), dtype=np.float32),
            "layer.0.b": rng.standard_normal(32, dtype=np.float32),
            "embed": rng.integers(0, 1 << 16, (128, 16), dtype=np.uint16)}  # BF16 bits


def step(w: dict, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    out = {k: v.copy() for k, v in w.items()}
    out["layer.0.w"][rng.integers(0, 64, 20), rng.integers(0, 32, 20)] += 0.5
    out["embed"][3, 4] ^= 0x0101
    return out


def as_published(w: dict) -> dict:
    return {k: (v, "BF16") if k == "embed" else v for k, v in w.items()}


def wait_attached(client: deltakv.SidecarClient, ranks: int = 1) -> None:
    deadline = time.time() + 20
    while len(client.status().get("ranks", [])) < ranks:
        assert time.time() < deadline, client.status()
        time.sleep(0.02)


def make_engine(sidecar, live: dict, **kw) -> deltakv.Engine:
    e = deltakv.Engine(shm_name=sidecar.shm, initial_version="v1", **kw)
    for name, arr in live.items():
        e.register_tensor(name, arr, dtype="BF16" if name == "embed" else None)
    return e


def test_sync_stats_before_any_sync(sidecar_factory):
    e = deltakv.Engine(shm_name="deltakv-py-no-sync-yet", attach_timeout_ms=50)
    assert e.sync_stats == {"outcome": "none", "sync_id": 0, "parts": 0, "bytes": 0,
                            "stage_us": 0, "pause_us": 0}
    e.close()


def test_sync_goes_live_in_the_arrays(sidecar_factory, tmp_path):
    s = sidecar_factory()
    v1, client = weights(1), deltakv.SidecarClient(s.url, token=TOKEN)
    v2 = step(v1, 2)
    live = {k: v.copy() for k, v in v1.items()}
    calls = {"pause": 0, "resume": 0, "derived": []}
    e = make_engine(s, live)
    e.set_callbacks(pause=lambda: calls.__setitem__("pause", calls["pause"] + 1),
                    resume=lambda: calls.__setitem__("resume", calls["resume"] + 1),
                    derived=lambda name, regions: calls["derived"].append((name, regions)))
    with e:
        e.start()
        assert e.state == "attached"
        wait_attached(client)
        deltakv.publish(as_published(v1), as_published(v2), str(tmp_path / "d12"),
                        parent_version="v1", version="v2")
        rec = client.sync_and_wait("v2", str(tmp_path / "d12"), timeout=60)
        assert rec["state"] == "live", rec
        for k in v2:
            assert np.array_equal(live[k], v2[k]), k
        assert (e.policy_version, e.version_id, e.state) == (1, "v2", "attached")
        assert calls["pause"] == 1 and calls["resume"] == 1
        names = {n for n, _ in calls["derived"]}
        assert names == {"layer.0.w", "embed"}
        for _, regions in calls["derived"]:  # one array per tensor: (offset, length) rows
            assert isinstance(regions, np.ndarray), type(regions)
            assert regions.dtype == np.uint64 and regions.ndim == 2 and regions.shape[1] == 2
            assert regions.shape[0] > 0
        assert all(length > 0 for _, regions in calls["derived"] for _o, length in regions)
        assert e.sync_error == ""
        stats = e.sync_stats
        assert stats["outcome"] == "committed", stats
        assert stats["sync_id"] > 0 and stats["parts"] >= 1, stats
        # Every changed byte was staged, at least one per tensor that changed.
        changed = sum(int(np.count_nonzero(v1[k].view(np.uint8) != v2[k].view(np.uint8)))
                      for k in v2)
        assert stats["bytes"] >= changed > 0, (stats, changed)
        assert stats["pause_us"] > 0, stats
    assert e.closed and e.state == "stopped"
    with pytest.raises(deltakv.FailedPreconditionError, match="closed"):
        e.sync_stats
    with pytest.raises(deltakv.FailedPreconditionError, match="closed"):
        e.start()


def check_regions(regions: list, old: np.ndarray, new: np.ndarray, name: str) -> None:
    """Regions of one tensor: sorted, apart, inside it, covering every changed byte, each
    starting and ending at a changed byte."""
    changed = np.flatnonzero(old != new)
    covered = np.zeros(new.size, dtype=bool)
    end = -1
    for offset, length in regions:
        assert length > 0 and offset > end, (name, offset, length, end)  # sorted, apart
        end = offset + length
        assert end <= new.size
        assert old[offset] != new[offset], (name, offset)
        assert old[end - 1] != new[end - 1], (name, end - 1)
        covered[offset:end] = True
    assert covered[changed].all(), name


def test_derived_regions_cover_every_change_across_plan_parts(sidecar_factory, tmp_path):
    """The derived-weights hook gets, per changed tensor, its touched regions: sorted, apart
    (adjacent records merged, also across plan parts), inside the tensor, covering every
    changed byte, each starting and ending at a changed byte (one rank, no split). The smallest
    plan buffer makes parts of 128 KiB, so the ~50 K records of this delta span several. A
    second sync that changes only "b" reports only "b", with none of the first sync's regions
    (the engine reuses the lists' memory)."""
    s = sidecar_factory(extra_args=["--plan-buffer-bytes", str(256 << 10)])
    client = deltakv.SidecarClient(s.url, token=TOKEN)
    rng = np.random.default_rng(11)
    v1 = {"a": rng.integers(0, 256, 3 << 20, dtype=np.uint8),
          "b": rng.integers(0, 256, 1 << 16, dtype=np.uint8)}
    v2 = {k: v.copy() for k, v in v1.items()}
    # Isolated bytes and pairs (a byte every 48 to 80: the planner merges only gaps <= 32),
    # a few long runs, and one longer than a part (its records, in several parts, adjoin).
    at = np.arange(0, (3 << 20) - 128, 64) + rng.integers(0, 16, (3 << 20) // 64 - 2)
    v2["a"][at] ^= rng.integers(1, 256, at.size, dtype=np.uint8)
    v2["a"][at[::7] + 1] ^= 0x5A
    for start in (1000, 1 << 20, (3 << 20) - 600):
        v2["a"][start:start + 300] ^= 0xFF
    v2["a"][2 << 20:(2 << 20) + (200 << 10)] ^= 0x33
    v2["b"][[0, 1, 2, 500, (1 << 16) - 1]] ^= 0x01
    live = {k: v.copy() for k, v in v1.items()}
    derived = {}
    e = make_engine(s, live)
    e.set_callbacks(derived=lambda name, regions: derived.setdefault(name, []).extend(
        (int(o), int(n)) for o, n in regions))
    with e:
        e.start()
        wait_attached(client)
        deltakv.publish(v1, v2, str(tmp_path / "d12"), parent_version="v1", version="v2")
        rec = client.sync_and_wait("v2", str(tmp_path / "d12"), timeout=60)
        assert rec["state"] == "live", rec
        assert rec["plan_parts"] >= 3, rec
        assert set(derived) == {"a", "b"}
        for name in v2:
            assert np.array_equal(live[name], v2[name]), name
            check_regions(derived[name], v1[name], v2[name], name)

        v3 = {k: v.copy() for k, v in v2.items()}
        v3["b"][rng.integers(0, 1 << 16, 3000)] ^= 0x10
        v3["b"][(1 << 16) - 40:] ^= 0x01
        derived.clear()
        deltakv.publish(v2, v3, str(tmp_path / "d23"), parent_version="v2", version="v3")
        rec = client.sync_and_wait("v3", str(tmp_path / "d23"), timeout=60)
        assert rec["state"] == "live", rec
        assert set(derived) == {"b"}
        for name in v3:
            assert np.array_equal(live[name], v3[name]), name
        check_regions(derived["b"], v2["b"], v3["b"], "b")


def test_poll_mode(sidecar_factory, tmp_path):
    s = sidecar_factory()
    v1, client = weights(3), deltakv.SidecarClient(s.url, token=TOKEN)
    v2 = step(v1, 4)
    live = {k: v.copy() for k, v in v1.items()}
    # A staging reserve (device memory set aside at start; the cpu backend has none to set
    # aside) changes nothing in the sync.
    with make_engine(s, live, poll_mode=True, staging_reserve_bytes=64 << 20) as e:
        e.start()
        wait_attached(client)
        deltakv.publish(as_published(v1), as_published(v2), str(tmp_path / "d"),
                        parent_version="v1", version="v2")
        result = {}
        t = threading.Thread(target=lambda: result.update(
            rec=client.sync_and_wait("v2", str(tmp_path / "d"), timeout=60)))
        t.start()
        committed, deadline = False, time.time() + 60
        while not committed and time.time() < deadline:
            committed = e.poll()  # the scheduler loop, between steps
            time.sleep(0.002)
        t.join(60)
        assert committed and result["rec"]["state"] == "live", result
        assert np.array_equal(live["layer.0.w"], v2["layer.0.w"])


# The callback's exception cannot reach a caller: it is reported as unraisable, like an
# exception in a thread, and the commit fails.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def _refuse():
    raise RuntimeError("the scheduler cannot pause now")


# A pause callback that raises, or returns a false value (numpy's False too), fails the commit.
@pytest.mark.parametrize("pause", [_refuse, lambda: np.False_], ids=["raises", "numpy-false"])
def test_a_failing_pause_is_reported(sidecar_factory, tmp_path, pause):
    s = sidecar_factory()
    v1, client = weights(5), deltakv.SidecarClient(s.url, token=TOKEN)
    v2 = step(v1, 6)
    live = {k: v.copy() for k, v in v1.items()}
    with make_engine(s, live) as e:
        e.set_callbacks(pause=pause)
        e.start()
        wait_attached(client)
        deltakv.publish(as_published(v1), as_published(v2), str(tmp_path / "d"),
                        parent_version="v1", version="v2")
        with pytest.raises(deltakv.SyncFailed) as info:
            client.sync_and_wait("v2", str(tmp_path / "d"), timeout=60)
        assert info.value.record["state"] == "diverged", info.value.record
        assert e.state == "diverged"
        assert "pause" in e.sync_error
        assert e.sync_stats["outcome"] == "diverged", e.sync_stats
        for k in v1:  # the pause failed before anything was written
            assert np.array_equal(live[k], v1[k]), k


def test_close_releases_the_callbacks(sidecar_factory):
    import gc
    import weakref

    class Owner:
        def pause(self):
            return True

    owner = Owner()
    ref = weakref.ref(owner)
    e = deltakv.Engine(shm_name="deltakv-py-no-such-segment", attach_timeout_ms=50)
    e.set_callbacks(pause=owner.pause)
    e.close()
    del owner
    gc.collect()
    assert ref() is None, "the closed engine still holds its callbacks"


def test_engine_in_a_callback_cycle_is_collected(sidecar_factory):
    import gc
    import weakref

    class Owner:
        def __init__(self):
            self.engine = deltakv.Engine(shm_name="deltakv-py-no-such-segment",
                                         attach_timeout_ms=50)
            self.engine.set_callbacks(pause=self.pause)  # owner -> engine -> bound method -> owner
            self.engine.register_tensor("w", np.zeros(4, np.float32))

        def pause(self):
            return True

    owner = Owner()
    engine = weakref.ref(owner.engine)
    ref = weakref.ref(owner)
    del owner
    gc.collect()
    assert ref() is None, "the cycle through the engine's callback was not collected"
    assert engine() is None


def test_registration_errors(sidecar_factory):
    e = deltakv.Engine(shm_name="deltakv-py-no-such-segment", attach_timeout_ms=50)
    ro = np.zeros(8, np.float32)
    ro.setflags(write=False)
    with pytest.raises(deltakv.InvalidArgumentError, match="read-only"):
        e.register_tensor("ro", ro)
    with pytest.raises(deltakv.InvalidArgumentError, match="C-contiguous"):
        e.register_tensor("strided", np.zeros((4, 4), np.float32)[:, ::2])
    with pytest.raises(deltakv.InvalidArgumentError, match="no dtype"):
        e.register_tensor("c", np.zeros(4, np.complex64))
    e.register_tensor("w", np.zeros(4, np.float32))
    with pytest.raises(deltakv.InvalidArgumentError):
        e.register_tensor("w", np.zeros(4, np.float32))  # twice
    # Bytes reinterpreted as another dtype keep their size: the last dimension scales (a
    # (4, 8) uint8 array is (4, 4) BF16), and a shape that says more bytes is refused.
    e.register_tensor("bf", np.zeros((4, 8), np.uint8), dtype="BF16")
    with pytest.raises(deltakv.InvalidArgumentError, match="whole BF16 elements"):
        e.register_tensor("odd", np.zeros((4, 7), np.uint8), dtype="BF16")
    with pytest.raises(deltakv.InvalidArgumentError, match="the array holds 32"):
        e.register_tensor("big", np.zeros((4, 8), np.uint8), dtype="BF16", shape=[4, 8])
    with pytest.raises(deltakv.NotFoundError, match="control segment"):
        e.start()
    with pytest.raises(deltakv.InvalidArgumentError, match="world_size"):
        deltakv.Engine(rank=2, world_size=2)
    e.close()
    e.close()
