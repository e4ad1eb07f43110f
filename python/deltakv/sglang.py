"""SGLang: a HiCache storage backend (L3) over the deltakv sidecar's host KV pool, and a weight
updater that applies deltakv syncs to a model's parameters in place.

HiCache storage
    python -m sglang.launch_server ... --enable-hierarchical-cache \
        --hicache-storage-backend dynamic \
        --hicache-storage-backend-extra-config '{"backend_name": "deltakv",
            "module_path": "deltakv.sglang", "class_name": "DeltakvHiCacheStorage",
            "interface_v1": 1, "deltakv_pool": "deltakv.kv"}'

With interface_v1 (the zero-copy path), pages move between SGLang's host pool (L2) and the pool
directly: the pages' runs in the host pool (get_page_buffer_meta: per layer K and V for
"layer_first", one K and one V run per page for "page_first" / "page_first_direct", one run
for MLA) are the pieces of a deltakv layout, so a pool slot holds one page and the copies run
on the client's copy threads. The sidecar's --kv-block-bytes must be the page's bytes (the sum
of those runs). Without interface_v1 SGLang uses the older get/set calls with flat page
tensors; they are served through a staging page and keyed apart ("flat" layout), so the two
paths never read each other's bytes.

Keys: the page hash strings, under a key context of the model name, the host pool's dtype and
layout, and the tensor-parallel rank (MLA pages are the same on every rank: tp is left out and
only the storage writer stores). extra_config: deltakv_pool (default "deltakv.kv"),
deltakv_copy_threads (2), deltakv_salt.

Weight updates
    updater = deltakv.sglang.DeltakvWeightUpdater(model, shm_name="deltakv", tp_rank=r,
                                                  tp_size=n, initial_version="step-100")
    updater.update("step-101", delta="s3://...", sidecar_url="http://127.0.0.1:8470")

registers the parameters of the model (the torch.nn.Module SGLang's model runner holds), and
applies a sync in place between steps, as SGLang's update_weights_from_* hooks do; it is the
same mechanism as deltakv.vllm.DeltakvWeightTransferEngine.

Through SGLang's own update API (a custom weight loader)
    python -m sglang.launch_server ... --custom-weight-loader deltakv.sglang.load_update
    engine.update_weights_from_tensor(deltakv.sglang.attach_request(
        shm_name="deltakv", initial_version="step-100"), load_format=deltakv.sglang.LOADER)
    engine.update_weights_from_tensor(deltakv.sglang.update_request(
        "step-101", delta="s3://...", sidecar_url="http://127.0.0.1:8470",
        token_file="/etc/deltakv/token"), load_format=deltakv.sglang.LOADER)

SGLang calls load_update(model, named_tensors) on every tensor-parallel worker. The request is
one uint8 tensor named "deltakv.request" holding JSON: "attach" registers the worker's model
with a handle (once per model; every rank attaches before any update), "update" applies a sync
in place inside the call, as DeltakvWeightUpdater.update does.
"""
from __future__ import annotations

import json
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from sglang.srt.mem_cache.hicache_storage import (HiCacheStorage, HiCacheStorageConfig,
                                                  HiCacheStorageExtraInfo)

from . import kv as _kv
from .errors import DeltakvError, FailedPreconditionError, InvalidArgumentError, NotFoundError
from .torch_weights import apply_sync, register_module

__all__ = ["DeltakvHiCacheStorage", "DeltakvWeightUpdater", "load_update", "attach_request",
           "update_request", "LOADER"]


def _pieces_of(pool: Any) -> Tuple[List[Tuple[int, int, int]], int]:
    """The (base, stride, bytes) runs of one page in the host pool, and the number of pages,
    from get_page_buffer_meta: page p's runs are at base + p * stride."""
    page = int(pool.page_size)
    pages = int(pool.size) // page
    if pages < 2:
        raise InvalidArgumentError("the host pool holds fewer than 2 pages")
    import torch
    first = pool.get_page_buffer_meta(torch.arange(0, page))
    second = pool.get_page_buffer_meta(torch.arange(page, 2 * page))
    last = pool.get_page_buffer_meta(torch.arange((pages - 1) * page, pages * page))
    if first is None:
        raise InvalidArgumentError(f"{type(pool).__name__} gives no page buffer metadata")
    (p0, sizes), (p1, _s1), (pl, _sl) = first, second, last
    pieces = []
    for i, (a, b, size) in enumerate(zip(p0, p1, sizes)):
        stride = int(b) - int(a)
        if int(pl[i]) != int(a) + (pages - 1) * stride:
            raise InvalidArgumentError(f"{type(pool).__name__}: run {i} of a page is not at a "
                                       "fixed stride from page to page")
        pieces.append((int(a), stride, int(size)))
    return pieces, pages


class DeltakvHiCacheStorage(HiCacheStorage):
    """HiCacheStorage over the deltakv pool (see the module docstring)."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Optional[dict] = None):
        self.config = storage_config
        self.extra = dict(storage_config.extra_config or {})
        self.pool_name = str(self.extra.get("deltakv_pool", "deltakv.kv"))
        self.copy_threads = int(self.extra.get("deltakv_copy_threads", 2))
        self.is_mla = bool(storage_config.is_mla_model)
        self.writer = storage_config.is_storage_writer
        self._client: Optional[_kv.KvClient] = None
        self._stage_client: Optional[_kv.KvClient] = None
        self._stage: Optional[np.ndarray] = None
        self._ctx: Optional[_kv.KeyContext] = None
        self._flat_ctx: Optional[_kv.KeyContext] = None
        self.page_size = 0

    # --- setup ---------------------------------------------------------------------------
    def _context(self, layout: str) -> _kv.KeyContext:
        c = self.config
        tp = {} if self.is_mla else {"tp_rank": int(c.tp_rank), "tp_size": int(c.tp_size)}
        salt = self.extra.get("deltakv_salt")
        return _kv.KeyContext(model_fingerprint=str(c.model_name or ""),
                              kv_dtype=str(getattr(self.mem_pool_host, "dtype", "")),
                              kv_layout=f"sglang:{layout}:pp{c.pp_rank}of{c.pp_size}",
                              salt=None if salt is None else str(salt), **tp)

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        super().register_mem_pool_host(mem_pool_host)
        pieces, pages = _pieces_of(mem_pool_host)
        self.page_size = int(mem_pool_host.page_size)
        self._client = _kv.KvClient(_kv.Pieces(pieces, num_blocks=pages),
                                    pool_name=self.pool_name, copy_threads=self.copy_threads)
        self._ctx = self._context(str(getattr(mem_pool_host, "layout", "unknown")))
        self._flat_ctx = self._context("flat")
        page_bytes = sum(p[2] for p in pieces)
        self._stage = np.zeros((1, page_bytes), np.uint8)
        self._stage_client = _kv.KvClient(_kv.CrossLayer(self._stage), pool_name=self.pool_name,
                                          copy_threads=0)

    def _live(self) -> _kv.KvClient:
        if self._client is None:
            raise DeltakvError("register_mem_pool_host was not called")
        return self._client

    def _keys(self, ctx: Optional[_kv.KeyContext], keys: Sequence[str]) -> np.ndarray:
        assert ctx is not None
        raw = [k.encode() for k in keys]
        if not raw:
            return np.zeros((0, 2), np.uint64)
        if len({len(r) for r in raw}) == 1:
            return _kv.engine_hash_keys(ctx, raw)
        return np.concatenate([_kv.engine_hash_keys(ctx, [r]) for r in raw])

    def _blocks(self, host_indices: Any, n: int) -> np.ndarray:
        idx = np.asarray(host_indices.cpu() if hasattr(host_indices, "cpu") else host_indices,
                         dtype=np.int64).reshape(-1)
        if len(idx) != n * self.page_size:
            raise InvalidArgumentError(f"{len(idx)} host indices for {n} pages of "
                                       f"{self.page_size} tokens")
        return (idx[::self.page_size] // self.page_size).astype(np.uint64)

    # --- zero-copy (interface_v1) ----------------------------------------------------------
    def batch_exists(self, keys: List[str],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        return self._live().lookup(self._keys(self._ctx, keys)) if keys else 0

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    def batch_set_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        if not keys:
            return []
        blocks = self._blocks(host_indices, len(keys))
        if not self.writer:  # MLA replicas: one writer stores the shared pages
            return [True] * len(keys)
        outcomes = self._live().store(self._keys(self._ctx, keys), blocks)
        return [int(o) != _kv.STORE_REFUSED for o in outcomes]

    def batch_get_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        if not keys:
            return []
        client = self._live()
        blocks = self._blocks(host_indices, len(keys))
        pool_keys = self._keys(self._ctx, keys)
        for _attempt in range(2):  # a page evicted between lookup and pin: look again
            hits = client.lookup(pool_keys)
            if hits == 0:
                break
            try:
                client.load(pool_keys[:hits], blocks[:hits])
                return [True] * hits + [False] * (len(keys) - hits)
            except NotFoundError:
                continue
        return [False] * len(keys)

    # --- flat pages (the older interface) ---------------------------------------------------
    def set(self, key: str, value: Optional[Any] = None, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> bool:
        if value is None:
            return False
        if not self.writer:
            return True
        assert self._stage is not None and self._stage_client is not None
        flat = np.frombuffer(_as_bytes(value), np.uint8)
        if flat.size != self._stage.shape[1]:
            raise InvalidArgumentError(f"a page of {flat.size} bytes; the pool's pages are "
                                       f"{self._stage.shape[1]}")
        self._stage[0, :] = flat
        out = self._stage_client.store(self._keys(self._flat_ctx, [key]), [0])
        return int(out[0]) != _kv.STORE_REFUSED

    def batch_set(self, keys: List[str], values: Optional[Any] = None,
                  target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> bool:
        return all(self.set(k, v) for k, v in zip(keys, values or []))

    def get(self, key: str, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> Any:
        assert self._stage is not None and self._stage_client is not None
        keys = self._keys(self._flat_ctx, [key])
        try:
            self._stage_client.load(keys, [0])
        except NotFoundError:
            return None
        if target_location is None:
            return self._stage[0].copy()
        dst = np.frombuffer(_as_writable(target_location), np.uint8)
        dst[:] = self._stage[0]
        return target_location

    def batch_get(self, keys: List[str], target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> List[Any]:
        targets = target_locations or [None] * len(keys)
        return [self.get(k, t) for k, t in zip(keys, targets)]

    # --- housekeeping ----------------------------------------------------------------------
    def clear(self) -> None:
        """Nothing to clear locally: the pool is shared (its blocks age out by eviction)."""

    def get_stats(self) -> Optional[Dict[str, Any]]:
        return None if self._client is None else self._client.stats()

    def close(self) -> None:
        for c in (self._client, self._stage_client):
            if c is not None:
                c.close()
        self._client = self._stage_client = None


def _as_bytes(t: Any) -> memoryview:
    if hasattr(t, "detach"):  # torch
        t = t.detach().contiguous().view(-1)
        import torch
        return memoryview(t.view(torch.uint8).numpy())
    return memoryview(np.ascontiguousarray(t)).cast("B")


def _as_writable(t: Any) -> memoryview:
    if hasattr(t, "detach"):
        import torch
        return memoryview(t.view(-1).view(torch.uint8).numpy())
    return memoryview(t).cast("B")


class DeltakvWeightUpdater:
    """Applies deltakv syncs to a torch model's parameters in place (poll mode)."""

    def __init__(self, model: Any, *, shm_name: str = "deltakv", tp_rank: int = 0,
                 tp_size: int = 1, initial_version: str = "", backend: str = "cpu",
                 layouts: Optional[Dict[str, str]] = None,
                 names: Optional[Dict[str, str]] = None, attach_timeout_ms: int = 10000):
        self.handle = register_module(model, shm_name=shm_name, rank=tp_rank,
                                      world_size=tp_size, initial_version=initial_version,
                                      backend=backend, layouts=layouts, names=names,
                                      attach_timeout_ms=attach_timeout_ms)
        self.rank = tp_rank

    def update(self, version: str, *, delta: Optional[str] = None,
               sidecar_url: Optional[str] = None, token: Optional[str] = None,
               token_file: Optional[str] = None, timeout_s: float = 600.0) -> None:
        apply_sync(self.handle, self.rank, version, delta=delta, sidecar_url=sidecar_url,
                         token=token, token_file=token_file, timeout_s=timeout_s)

    def close(self) -> None:
        self.handle.close()


# ---- SGLang's update_weights_from_tensor with a custom weight loader --------------------------

LOADER = "deltakv.sglang.load_update"
_REQUEST = "deltakv.request"
_UPDATERS: "weakref.WeakKeyDictionary[Any, DeltakvWeightUpdater]" = weakref.WeakKeyDictionary()


def _request(fields: Dict[str, Any]) -> List[Tuple[str, Any]]:
    import torch
    raw = bytearray(json.dumps(fields).encode())
    return [(_REQUEST, torch.frombuffer(raw, dtype=torch.uint8).clone())]


def attach_request(*, shm_name: str = "deltakv", initial_version: str = "",
                   backend: str = "cpu", layouts: Optional[Dict[str, str]] = None,
                   names: Optional[Dict[str, str]] = None,
                   attach_timeout_ms: int = 10000) -> List[Tuple[str, Any]]:
    """named_tensors for update_weights_from_tensor: register each worker's model."""
    return _request(dict(op="attach", shm_name=shm_name, initial_version=initial_version,
                         backend=backend, layouts=layouts or {}, names=names or {},
                         attach_timeout_ms=attach_timeout_ms))


def update_request(version: str, *, delta: Optional[str] = None,
                   sidecar_url: Optional[str] = None, token: Optional[str] = None,
                   token_file: Optional[str] = None,
                   timeout_s: float = 600.0) -> List[Tuple[str, Any]]:
    """named_tensors for update_weights_from_tensor: apply the sync to `version`."""
    return _request(dict(op="update", version=version, delta=delta, sidecar_url=sidecar_url,
                         token=token, token_file=token_file, timeout_s=timeout_s))


def _tp() -> Tuple[int, int]:
    try:
        from sglang.srt.distributed import (get_tensor_model_parallel_rank,
                                            get_tensor_model_parallel_world_size)
        return get_tensor_model_parallel_rank(), get_tensor_model_parallel_world_size()
    except Exception:  # noqa: BLE001 (no model-parallel group: one rank)
        return 0, 1


def load_update(model: Any, named_tensors: Sequence[Tuple[str, Any]]) -> None:
    """SGLang custom weight loader (see the module docstring)."""
    reqs = [t for n, t in named_tensors if n == _REQUEST]
    if len(reqs) != 1 or len(named_tensors) != 1:
        raise InvalidArgumentError(f"the deltakv loader takes one {_REQUEST!r} tensor "
                                   "(attach_request / update_request), not "
                                   f"{[n for n, _t in named_tensors]}")
    try:
        req = json.loads(bytes(reqs[0].cpu().numpy().tobytes()).decode())
        op = req.pop("op")
    except (ValueError, KeyError, UnicodeDecodeError) as e:
        raise InvalidArgumentError(f"malformed {_REQUEST!r} tensor: {e}") from e
    if op == "attach":
        if model in _UPDATERS:
            raise FailedPreconditionError("this model is attached to a deltakv handle already")
        rank, world = _tp()
        _UPDATERS[model] = DeltakvWeightUpdater(model, tp_rank=rank, tp_size=world, **req)
    elif op == "update":
        updater = _UPDATERS.get(model)
        if updater is None:
            raise FailedPreconditionError("no deltakv handle: send attach_request first")
        updater.update(req.pop("version"), **req)
    else:
        raise InvalidArgumentError(f"unknown deltakv request op {op!r}")
