"""Live weight updates for a torch model, shared by the engine backends (deltakv.vllm,
deltakv.sglang): register a module's parameters with a deltakv engine handle in poll mode, and
apply a sync in place between steps. torch is imported by the caller's objects only."""
from __future__ import annotations

import time
from typing import Any, Dict, Iterable, Optional, Set, Tuple

from .engine import Engine
from .errors import DataLossError, DeltakvError, FailedPreconditionError
from .sidecar import SidecarClient

__all__ = ["register_module", "register_tensors", "apply_sync", "TORCH_DTYPES"]

TORCH_DTYPES = {"torch.bfloat16": "BF16", "torch.float16": "F16", "torch.float32": "F32",
                "torch.float64": "F64", "torch.int8": "I8", "torch.uint8": "U8",
                "torch.int16": "I16", "torch.int32": "I32", "torch.int64": "I64",
                "torch.bool": "BOOL", "torch.float8_e4m3fn": "F8_E4M3",
                "torch.float8_e5m2": "F8_E5M2"}

_IN_PROGRESS = (None, "queued", "fetching", "decoding", "staged", "committing", "live")


def register_module(model: Any, *, shm_name: str, rank: int, world_size: int,
                    initial_version: str, backend: str = "cpu",
                    layouts: Optional[Dict[str, str]] = None,
                    names: Optional[Dict[str, str]] = None,
                    attach_timeout_ms: int = 10000, derived: Any = None) -> Engine:
    """A started poll-mode handle over every parameter of `model` (named_parameters), in
    place. `layouts` maps a parameter name to its layout JSON (a shard or a fused tensor of the
    checkpoint's, deltasync/layout.h; absent = replicated); `names` maps a parameter name to
    its checkpoint tensor name (absent = the same); `derived(name, regions)` is the handle's
    derived-weights callback (deltakv.Engine)."""
    return register_tensors(((n, p.data) for n, p in model.named_parameters()),
                            shm_name=shm_name, rank=rank, world_size=world_size,
                            initial_version=initial_version, backend=backend, layouts=layouts,
                            names=names, attach_timeout_ms=attach_timeout_ms, derived=derived)


def register_tensors(tensors: Iterable[Tuple[str, Any]], *, shm_name: str, rank: int,
                     world_size: int, initial_version: str, backend: str = "cpu",
                     layouts: Optional[Dict[str, str]] = None,
                     names: Optional[Dict[str, str]] = None,
                     attach_timeout_ms: int = 10000, derived: Any = None) -> Engine:
    """register_module over (name, torch tensor) pairs."""
    e = Engine(shm_name=shm_name, rank=rank, world_size=world_size, backend=backend,
               initial_version=initial_version, poll_mode=True,
               attach_timeout_ms=attach_timeout_ms)
    try:
        for name, data in tensors:
            if not data.is_contiguous():
                raise DeltakvError(f"parameter {name!r} is not contiguous")
            e.register_tensor((names or {}).get(name, name), data,
                              dtype=TORCH_DTYPES.get(str(data.dtype)),
                              layout_json=(layouts or {}).get(name))
        if derived is not None:
            e.set_callbacks(derived=derived)
        e.start()
    except BaseException:
        e.close()
        raise
    return e


def apply_sync(e: Engine, rank: int, version: str, *, delta: Optional[str] = None,
               sidecar_url: Optional[str] = None, token: Optional[str] = None,
               token_file: Optional[str] = None, timeout_s: float = 600.0) -> None:
    """Polls `e` until it serves `version`, applying the commit in place inside this call.

    With sidecar_url and delta, rank 0 requests the sync; with sidecar_url, every rank also
    watches the sync's record, raises when it ends other than live, and returns once it is
    live (so the next sync can be requested at once). Raises DataLossError if
    the handle diverged, TimeoutError after timeout_s."""
    if not version:
        raise ValueError("version is required")
    client = None
    sync_id: Optional[str] = None
    seen: Set[Any] = set()
    if sidecar_url:
        client = SidecarClient(sidecar_url, token=token, token_file=token_file)
        # Records of earlier attempts at this version are not this update's.
        seen = {r.get("id") for r in client.status().get("history", [])}
        if delta and rank == 0:
            sync_id = client.sync(version, delta)
    deadline = time.monotonic() + timeout_s
    next_check = 0.0
    while e.version_id != version:
        e.poll()  # applies a pending commit (the engine runs no step meanwhile)
        if e.state == "diverged":
            raise DataLossError(f"sync to {version} diverged on rank {rank}: {e.sync_error}")
        now = time.monotonic()
        if client is not None and now >= next_check and e.version_id != version:
            next_check = now + 0.05
            rec = _record(client, sync_id, version, seen)
            if rec is not None and rec.get("state") not in _IN_PROGRESS:
                raise FailedPreconditionError(
                    f"sync to {version} ended {rec.get('state')}: {rec.get('error', '')}")
        if now > deadline:
            raise TimeoutError(f"rank {rank}: version {version} not committed within "
                               f"{timeout_s} s (serving {e.version_id!r}, state {e.state})")
        time.sleep(0.001)
    # Applied here; the sidecar records the sync live once every rank committed.
    while client is not None:
        rec = _record(client, sync_id, version, seen)
        if rec is not None and rec.get("state") == "live":
            return
        if rec is not None and rec.get("state") not in _IN_PROGRESS:
            raise FailedPreconditionError(
                f"sync to {version} ended {rec.get('state')}: {rec.get('error', '')}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank {rank}: version {version} applied, but the sidecar did "
                               f"not record the sync live within {timeout_s} s")
        time.sleep(0.005)


def _record(client: SidecarClient, sync_id: Optional[str], version: str,
            seen: Set[Any]) -> Optional[Dict[str, Any]]:
    if sync_id is not None:
        return client.get_sync(sync_id)
    for rec in reversed(client.status().get("history", [])):
        if rec.get("version") == version and rec.get("id") not in seen:
            return rec
    return None
