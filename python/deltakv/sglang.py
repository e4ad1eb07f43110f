"""SGLang: a HiCache storage backend (L3) over the deltakv sidecar's host KV pool, and a weight
updater that applies deltakv syncs to a model's parameters in place.

HiCache storage
    python -m sglang.launch_server ... --enable-hierarchical-cache \
        --hicache-storage-backend dynamic \
        --hicache-storage-backend-extra-config '{"backend_name": "deltakv",
            "module_path": "deltakv.sglang", "class_name": "DeltakvHiCacheStorage",
            "interface_v1": 1, "deltakv_pool": "deltakv.kv"}'

With interface_v1 (the zero-copy path), pages move between SGLang's host pool (L2) and the pool
directly: the pages' runs in the host pool (get_page_buffer_meta: per layer K and V for MHA
"layer_first", one K and one V run per page for "page_first" / "page_first_direct"; for MLA one
run per layer for "layer_first", one run per page otherwise) are the pieces of a deltakv layout,
so a pool slot holds one page and the copies run on the client's copy threads. The sidecar's
--kv-block-bytes must be the page's bytes (the sum of those runs). Without interface_v1 SGLang
uses the older get/set calls with flat page tensors; they are served through a staging page and
keyed apart ("flat" layout), so the two paths never read each other's bytes.

Hybrid models (v2): SGLang's HybridCacheController registers each host pool of its
HostPoolGroup (register_mem_host_pool_v2: the KV anchor again, Mamba state, SWA, indexer, draft
pools) and moves their pages with batch_exists_v2 / batch_get_v2 / batch_set_v2 (the KV pages
still through the v1 calls). Each pool is served the same way as the KV pool, over the deltakv
pool extra_config["deltakv_pools"][name] (default: deltakv_pool), whose slot must be that
pool's page bytes, and under its own key context. Hit policies all_pages and trailing_pages are
answered; block_groups, a host pool without memory of its own (a logical anchor) and decode
context parallelism (dcp_size > 1) are refused.

Keys: the page hash strings, under a key context of the model name, the host pool's dtype and
layout, the SGLang pool name (except for KV), the pipeline stage, the attention context-parallel
rank (when attn_cp_size > 1) and the tensor-parallel rank. MLA pages are the same on every rank:
the rank is left out and only the storage writer stores; an MLA model's Mamba state and MHA
pools stay per rank. extra_config: deltakv_pool (default "deltakv.kv"), deltakv_pools ({}),
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

import inspect
import json
import logging
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from sglang.srt.mem_cache.hicache_storage import (HiCacheStorage, HiCacheStorageConfig,
                                                  HiCacheStorageExtraInfo, PoolHitPolicy,
                                                  PoolName, PoolTransferResult)

from . import kv as _kv
from .errors import (DeltakvError, FailedPreconditionError, InvalidArgumentError, NotFoundError,
                     UnimplementedError)
from .torch_weights import apply_sync, register_module

__all__ = ["DeltakvHiCacheStorage", "DeltakvWeightUpdater", "load_update", "attach_request",
           "update_request", "LOADER"]


_log = logging.getLogger(__name__)
_KV, _MAMBA = PoolName.KV.value, PoolName.MAMBA.value


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


def _count(indices: Any) -> int:
    return 0 if indices is None else int(np.asarray(
        indices.cpu() if hasattr(indices, "cpu") else indices).size)


class _Lane:
    """One SGLang host pool over one deltakv pool: the runs of a host page are the pieces of a
    deltakv layout (one pool slot holds one page), and the pages are keyed under the lane's own
    key context. The v1 calls go through the KV pool's lane, the v2 calls through the lane of
    each transfer's pool."""

    def __init__(self, name: str, host_pool: Any, ctx: _kv.KeyContext, pool_name: str,
                 copy_threads: int, stores: bool) -> None:
        if getattr(host_pool, "kv_buffer", 0) is None:
            raise UnimplementedError(
                f"SGLang host pool {name!r} ({type(host_pool).__name__}) holds no memory of its "
                "own (a logical anchor): the deltakv backend moves pages it can address")
        pieces, pages = _pieces_of(host_pool)
        self.name = name
        self.page_size = int(host_pool.page_size)
        self.page_bytes = sum(p[2] for p in pieces)
        self.ctx = ctx
        self.stores = stores  # False: another rank stores these (replicated) pages
        try:
            self.client = _kv.KvClient(_kv.Pieces(pieces, num_blocks=pages),
                                       pool_name=pool_name, copy_threads=copy_threads)
        except DeltakvError as e:
            raise type(e)(f"SGLang host pool {name!r} (pages of {self.page_bytes} bytes) over "
                          f"deltakv pool {pool_name!r}: {e.message}") from e

    def keys(self, keys: Sequence[str]) -> np.ndarray:
        raw = [k.encode() for k in keys]
        if not raw:
            return np.zeros((0, 2), np.uint64)
        if len({len(r) for r in raw}) == 1:
            return _kv.engine_hash_keys(self.ctx, raw)
        return np.concatenate([_kv.engine_hash_keys(self.ctx, [r]) for r in raw])

    def blocks(self, host_indices: Any, n: int) -> np.ndarray:
        idx = np.asarray(host_indices.cpu() if hasattr(host_indices, "cpu") else host_indices,
                         dtype=np.int64).reshape(-1)
        if len(idx) != n * self.page_size:
            raise InvalidArgumentError(f"host pool {self.name!r}: {len(idx)} host indices for "
                                       f"{n} pages of {self.page_size} tokens")
        return (idx[::self.page_size] // self.page_size).astype(np.uint64)

    def exists(self, keys: Sequence[str]) -> int:
        """How many leading pages of `keys` are stored."""
        return self.client.lookup(self.keys(keys)) if keys else 0

    def present(self, keys: Sequence[str]) -> List[bool]:
        """Whether each page of `keys` is stored, each on its own."""
        pool_keys = self.keys(keys)
        return [self.client.lookup(pool_keys[i:i + 1]) == 1 for i in range(len(keys))]

    def set(self, keys: Sequence[str], host_indices: Any) -> List[bool]:
        if not keys:
            return []
        blocks = self.blocks(host_indices, len(keys))
        if not self.stores:
            return [True] * len(keys)
        outcomes = self.client.store(self.keys(keys), blocks)
        return [int(o) != _kv.STORE_REFUSED for o in outcomes]

    def get(self, keys: Sequence[str], host_indices: Any) -> List[bool]:
        """Loads the leading stored pages of `keys`; the pages after the first miss are left as
        they were."""
        if not keys:
            return []
        blocks = self.blocks(host_indices, len(keys))
        pool_keys = self.keys(keys)
        for _attempt in range(2):  # a page evicted between lookup and pin: look again
            hits = self.client.lookup(pool_keys)
            if hits == 0:
                break
            try:
                self.client.load(pool_keys[:hits], blocks[:hits])
                return [True] * hits + [False] * (len(keys) - hits)
            except NotFoundError:
                continue
        return [False] * len(keys)

    def close(self) -> None:
        self.client.close()


class DeltakvHiCacheStorage(HiCacheStorage):
    """HiCacheStorage over the deltakv pool (see the module docstring)."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Optional[dict] = None):
        dcp = int(getattr(storage_config, "dcp_size", 1) or 1)
        if dcp > 1:
            raise UnimplementedError(
                f"decode context parallelism (dcp_size {dcp}): each DCP rank holds a slice of "
                "every page, and the deltakv backend stores whole pages (SGLang attaches L3 "
                "storage under DCP for its file and mooncake backends only)")
        self.config = storage_config
        self.extra = dict(storage_config.extra_config or {})
        self.pool_name = str(self.extra.get("deltakv_pool", "deltakv.kv"))
        pools = self.extra.get("deltakv_pools") or {}
        if not isinstance(pools, dict):
            raise InvalidArgumentError("extra_config deltakv_pools must map SGLang pool names "
                                       f"to deltakv pool names, not {pools!r}")
        self.pool_names = {str(k): str(v) for k, v in pools.items()}
        self.copy_threads = int(self.extra.get("deltakv_copy_threads", 2))
        self.is_mla = bool(storage_config.is_mla_model)
        self.writer = storage_config.is_storage_writer
        self._lanes: Dict[str, _Lane] = {}
        self._stage_client: Optional[_kv.KvClient] = None
        self._stage: Optional[np.ndarray] = None
        self._flat_ctx: Optional[_kv.KeyContext] = None
        self.page_size = 0

    # --- setup ---------------------------------------------------------------------------
    def _sharded(self, name: str, host_pool: Any) -> bool:
        """Whether the pool's pages differ between tensor-parallel ranks: every pool of an MHA
        model; of an MLA model, the Mamba state and MHA pools (a draft model's heads), while
        its MLA pages are the same on every rank."""
        if not self.is_mla or name == _MAMBA:
            return True
        from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
        return isinstance(host_pool, MHATokenToKVPoolHost)

    def _context(self, name: str, host_pool: Any, layout: str, sharded: bool) -> _kv.KeyContext:
        c = self.config
        tp = {"tp_rank": int(c.tp_rank), "tp_size": int(c.tp_size)} if sharded else {}
        parts = ["sglang"] + ([] if name == _KV else [name]) + [layout,
                                                                f"pp{c.pp_rank}of{c.pp_size}"]
        if int(c.attn_cp_size) > 1:  # each context-parallel rank holds a slice of every page
            parts.append(f"cp{c.attn_cp_rank}of{c.attn_cp_size}")
        salt = self.extra.get("deltakv_salt")
        return _kv.KeyContext(model_fingerprint=str(c.model_name or ""),
                              kv_dtype=str(getattr(host_pool, "dtype", "")),
                              kv_layout=":".join(parts),
                              salt=None if salt is None else str(salt), **tp)

    def _lane(self, name: str, host_pool: Any) -> _Lane:
        sharded = self._sharded(name, host_pool)
        ctx = self._context(name, host_pool, str(getattr(host_pool, "layout", "unknown")),
                            sharded)
        return _Lane(name, host_pool, ctx, self.pool_names.get(name, self.pool_name),
                     self.copy_threads, stores=sharded or self.writer)

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        super().register_mem_pool_host(mem_pool_host)
        lane = self._lane(_KV, mem_pool_host)
        old = self._lanes.pop(_KV, None)
        if old is not None:
            old.close()
        self._lanes[_KV] = lane
        self.page_size = lane.page_size
        self._flat_ctx = self._context(_KV, mem_pool_host, "flat", self._sharded(_KV,
                                                                                  mem_pool_host))
        self._stage = np.zeros((1, lane.page_bytes), np.uint8)
        if self._stage_client is not None:
            self._stage_client.close()
        self._stage_client = _kv.KvClient(_kv.CrossLayer(self._stage),
                                          pool_name=self.pool_names.get(_KV, self.pool_name),
                                          copy_threads=0)

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        """A host pool of a hybrid model (SGLang's HostPoolGroup entries: the KV anchor again,
        Mamba state, SWA, indexer, draft pools), served over deltakv pool
        extra_config["deltakv_pools"][name] (default: deltakv_pool). Its page bytes must be that
        pool's slot size."""
        name = str(host_pool_name)
        if name == _KV:
            if _KV not in self._lanes or host_pool is not self.mem_pool_host:
                raise InvalidArgumentError(
                    "the KV host pool given to register_mem_host_pool_v2 is not the one given "
                    "to register_mem_pool_host")
            super().register_mem_host_pool_v2(host_pool, host_pool_name)
            return
        lane = self._lane(name, host_pool)
        old = self._lanes.pop(name, None)
        if old is not None:
            old.close()
        self._lanes[name] = lane
        super().register_mem_host_pool_v2(host_pool, host_pool_name)

    def _kv_lane(self) -> _Lane:
        lane = self._lanes.get(_KV)
        if lane is None:
            raise DeltakvError("register_mem_pool_host was not called")
        return lane

    def _lane_of(self, name: Any) -> _Lane:
        if str(name) == _KV:
            return self._kv_lane()
        lane = self._lanes.get(str(name))
        if lane is None:
            raise FailedPreconditionError(f"SGLang host pool {str(name)!r} was not registered "
                                          "with the deltakv backend (register_mem_host_pool_v2)")
        return lane

    # --- zero-copy (interface_v1) ----------------------------------------------------------
    def batch_exists(self, keys: List[str],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        return self._kv_lane().exists(keys)

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    def batch_set_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        return self._kv_lane().set(keys, host_indices)

    def batch_get_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        return self._kv_lane().get(keys, host_indices)

    # --- hybrid pools (v2) -----------------------------------------------------------------
    def batch_exists_v2(self, keys: List[str], pool_transfers: Optional[List[Any]] = None,
                        extra_info: Optional[HiCacheStorageExtraInfo] = None) -> Any:
        """The usable prefix: the leading KV pages, cut by every transfer's pool under its hit
        policy (all_pages: each page of the prefix; trailing_pages: the len(keys) pages that end
        it). restorable_prefix_pages lists every usable prefix length."""
        kv_pages = self.batch_exists(keys)
        hits: Dict[Any, int] = {PoolName.KV: kv_pages} if kv_pages else {}
        restorable = list(range(1, kv_pages + 1))
        for t in pool_transfers or []:
            if not restorable:
                break
            lane = self._lane_of(t.name)
            if t.hit_policy == PoolHitPolicy.ALL_PAGES:
                boundary = lane.exists(keys[:kv_pages])
                usable = set(range(1, boundary + 1))
            elif t.hit_policy == PoolHitPolicy.TRAILING_PAGES:
                window = max(1, len(t.keys) if t.keys else 1)
                present = lane.present(keys[:kv_pages])
                usable = {n for n in range(1, kv_pages + 1)
                          if all(present[max(0, n - window):n])}
                boundary = max(usable, default=0)
            else:
                raise UnimplementedError(
                    f"hit policy {getattr(t.hit_policy, 'value', t.hit_policy)!r} of pool "
                    f"{str(t.name)!r}: the deltakv backend answers all_pages and trailing_pages")
            if boundary:
                hits[t.name] = boundary
            restorable = [n for n in restorable if n in usable]
        return PoolTransferResult(restorable[-1] if restorable else 0, hits, restorable)

    def _transfers(self, transfers: List[Any], load: bool) -> Dict[Any, List[bool]]:
        out: Dict[Any, List[bool]] = {}
        for t in transfers:
            lane = self._lane_of(t.name)
            keys = list(t.keys or [])
            if _count(t.host_indices) != len(keys) * lane.page_size:
                # SGLang's contract: a transfer whose indices do not cover its keys moves nothing
                _log.error("deltakv HiCache: pool %s: %d host indices for %d pages of %d tokens",
                           str(t.name), _count(t.host_indices), len(keys), lane.page_size)
                out[t.name] = [False] * len(keys)
                continue
            out[t.name] = (lane.get if load else lane.set)(keys, t.host_indices)
        return out

    def batch_get_v2(self, transfers: List[Any],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> Dict[Any, List[bool]]:
        """Per transfer's pool: a success per key, the leading stored pages loaded."""
        return self._transfers(transfers, load=True)

    def batch_set_v2(self, transfers: List[Any],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> Dict[Any, List[bool]]:
        """Per transfer's pool: a success per key (False: the pool had no slot for it)."""
        return self._transfers(transfers, load=False)

    # --- flat pages (the older interface) ---------------------------------------------------
    def _flat_keys(self, key: str) -> np.ndarray:
        assert self._flat_ctx is not None
        return _kv.engine_hash_keys(self._flat_ctx, [key.encode()])

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
        out = self._stage_client.store(self._flat_keys(key), [0])
        return int(out[0]) != _kv.STORE_REFUSED

    def batch_set(self, keys: List[str], values: Optional[Any] = None,
                  target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> bool:
        return all(self.set(k, v) for k, v in zip(keys, values or []))

    def get(self, key: str, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> Any:
        assert self._stage is not None and self._stage_client is not None
        try:
            self._stage_client.load(self._flat_keys(key), [0])
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
        """The KV pool's counters (deltakv.KvClient.stats), None before registration."""
        lane = self._lanes.get(_KV)
        return None if lane is None else lane.client.stats()

    def close(self) -> None:
        for lane in self._lanes.values():
            lane.close()
        self._lanes.clear()
        if self._stage_client is not None:
            self._stage_client.close()
        self._stage_client = None


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


def _fields(fn: Any, given: Sequence[str]) -> Tuple[set, set]:
    """The keyword fields a request may carry for `fn` (all but `given`, which the loader
    supplies), and the ones without a default."""
    params = [p for n, p in inspect.signature(fn).parameters.items()
              if n not in ("self", *given)]
    return ({p.name for p in params},
            {p.name for p in params if p.default is inspect.Parameter.empty})


# Each op's fields (what attach_request / update_request write) and the ones it needs: the
# keyword arguments of the call the loader makes with them.
_REQUEST_FIELDS = {
    "attach": _fields(DeltakvWeightUpdater.__init__, ("model", "tp_rank", "tp_size")),
    "update": _fields(DeltakvWeightUpdater.update, ()),
}


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
    dtype = str(getattr(reqs[0], "dtype", ""))
    if dtype not in ("torch.uint8", "uint8"):
        raise InvalidArgumentError(f"the {_REQUEST!r} tensor holds JSON bytes (uint8), not {dtype}")
    try:
        req = json.loads(bytes(reqs[0].cpu().numpy().tobytes()).decode())
        if not isinstance(req, dict):
            raise ValueError(f"a JSON object was expected, not {type(req).__name__}")
        op = req.pop("op")
    except (ValueError, KeyError, UnicodeDecodeError) as e:
        raise InvalidArgumentError(f"malformed {_REQUEST!r} tensor: {e}") from e
    if op in _REQUEST_FIELDS:
        fields, required = _REQUEST_FIELDS[op]
        unknown = sorted(set(req) - fields)
        missing = sorted(required - set(req))
        if unknown or missing:
            raise InvalidArgumentError(
                f"malformed {_REQUEST!r} tensor: {op!r} request "
                + (f"with unknown fields {unknown}" if unknown else f"without {missing}"))
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
