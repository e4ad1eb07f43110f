"""vLLM backends: an OffloadingSpec whose tier is the deltakv sidecar's host KV pool, and a
WeightTransferEngine that applies deltakv syncs to the model's parameters in place.

KV offloading

    --kv-transfer-config '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
        "kv_connector_extra_config": {"spec_name": "DeltakvOffloadingSpec",
                                      "spec_module_path": "deltakv.vllm",
                                      "deltakv_pool": "deltakv.kv"}}'

The sidecar owns the pool (`deltakv sidecar --kv-block-bytes B`, B = the bytes one worker keeps
per offloaded block: vLLM's worker_kv_bytes_per_block x blocks_per_chunk). Every worker keys
its shard of a block with its own tensor-parallel rank, so engines (and restarted engines)
that share the pool share prefixes, and a block counts as offloaded only when every rank of
this engine has it.

Scheduler side (DeltakvOffloadingManager): lookup() asks the pool; a HIT pins the block's
slots (in this process) until the step ends or prepare_load() takes the pin over, so nothing
evicts it between the scheduler's decision and the worker's copy; complete_load() unpins.
prepare_store() names the blocks that are not stored or in flight; the copy, the slot
claims and any eviction happen in the worker. take_events() reports this engine's blocks from
the pool's event feed, which has one event per shard: a block is STORED once every rank's shard
is stored, and REMOVED as soon as any shard of a block reported stored is evicted or removed.
reset_cache() removes this engine's blocks from the pool.

Worker side (DeltakvOffloadingWorker): opens a client over vLLM's canonical KV tensors (one
piece per tensor: a block is the concatenation of its page in every tensor) and runs the
copies asynchronously on the client's copy threads. The copy backend is "cpu": KV tensors
must be in host memory (this build has no cuda copy backend), so on a GPU deployment the
spec refuses to start rather than reading device pointers.

extra_config keys: deltakv_pool (default "deltakv.kv"), deltakv_copy_threads (2),
deltakv_model_fingerprint (default: the model name), deltakv_salt (isolation between tenants
sharing a pool; default none), deltakv_max_pins (65536).

Weight transfer
    deltakv.vllm.register()   # once per process: WeightTransferEngineFactory name "deltakv"
    llm = LLM(..., weight_transfer_config={"backend": "deltakv"})
    llm.init_weight_transfer_engine({"init_info": {"shm_name": "deltakv",
                                                   "initial_version": "step-100"}})
    llm.update_weights({"update_info": {"version": "step-101",
                                        "delta": "s3://bucket/deltas/step-101",
                                        "sidecar_url": "http://127.0.0.1:8470",
                                        "token_file": "/etc/deltakv/token"}})

Each worker registers its model's parameters (named_parameters; layouts maps a parameter name
to its layout JSON when it is a shard or a fused tensor of the checkpoint's, see
deltasync/layout.h; names default to the parameter names) with a deltakv engine handle in poll
mode. update_weights is vLLM's update path between steps: rank 0 asks the sidecar for the sync
(when sidecar_url is given; otherwise the sync was requested elsewhere), and every rank polls
its handle until the commit of `version` is applied, in place, inside that call: the pause is
the call itself. A sync that fails raises, and the model keeps serving the old version (or the
handle reports diverged, see deltakv.h).
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Iterable
from typing import Any, Dict, List, Optional, Set, Tuple

import numpy as np

from vllm.v1.kv_offload.base import (CanonicalKVCaches, GPULoadStoreSpec, LoadStoreSpec,
                                     LookupResult, Medium, OffloadingEvent, OffloadingManager,
                                     OffloadingSpec, OffloadingWorker, OffloadKey,
                                     PrepareStoreOutput, ReqContext, RequestOffloadingContext,
                                     ScheduleEndContext, TransferResult)
from vllm.v1.kv_offload.config import OffloadingConfig
from vllm.distributed.weight_transfer.base import (WeightTransferEngine, WeightTransferInitInfo,
                                                   WeightTransferUpdateInfo)

from dataclasses import dataclass, field

from . import kv as _kv
from .engine import Engine
from .errors import (DataLossError, DeltakvError, FailedPreconditionError, NotFoundError,
                     UnimplementedError)
from .torch_weights import apply_sync, register_module, register_tensors

__all__ = ["DeltakvOffloadingSpec", "DeltakvOffloadingManager", "DeltakvOffloadingWorker",
           "DeltakvLoadStoreSpec", "DeltakvWeightTransferEngine", "DeltakvInitInfo",
           "DeltakvUpdateInfo", "register"]


class DeltakvLoadStoreSpec(LoadStoreSpec):
    """The offload keys of a transfer (the worker keys them with its own rank)."""

    def __init__(self, keys: List[bytes]) -> None:
        self.keys = list(keys)

    def __repr__(self) -> str:
        return f"DeltakvLoadStoreSpec({len(self.keys)} keys)"


class _Keys:
    """OffloadKey -> deltakv pool keys, one per tensor-parallel rank of this engine."""

    def __init__(self, config: OffloadingConfig, extra: Dict[str, Any]) -> None:
        self.world = max(1, config.parallel.world_size)
        fingerprint = extra.get("deltakv_model_fingerprint") or config.model.name
        salt = extra.get("deltakv_salt")
        layout = config.kv_cache_layout or "vllm"
        self.contexts = [
            _kv.KeyContext(model_fingerprint=str(fingerprint), kv_dtype=str(config.model.dtype),
                           kv_layout=f"vllm:{layout}", tp_rank=r, tp_size=self.world,
                           salt=None if salt is None else str(salt))
            for r in range(self.world)
        ]

    def for_rank(self, keys: Collection[bytes], rank: int) -> np.ndarray:
        items = [bytes(k) for k in keys]
        if not items:
            return np.zeros((0, 2), np.uint64)
        return _kv.engine_hash_keys(self.contexts[rank], items)

    def all_ranks(self, keys: Collection[bytes]) -> np.ndarray:
        """(len(keys) * world, 2): the keys of rank 0, then rank 1, ..."""
        parts = [self.for_rank(keys, r) for r in range(self.world)]
        return np.concatenate(parts) if parts else np.zeros((0, 2), np.uint64)


class _BlockEvents:
    """The pool's event feed holds one event per shard (one per tensor-parallel rank of a
    block); vLLM's holds one per block. A block is reported STORED when its last missing shard
    is stored, and REMOVED when any shard of a block reported stored is evicted or removed:
    every REMOVED follows a STORED of the same block, and each transition is reported once.

    Only blocks this engine named (lookup, prepare_store) are followed, at most `max_blocks`
    (the oldest are forgotten)."""

    def __init__(self, world: int, max_blocks: int = 1 << 20) -> None:
        self._full = (1 << world) - 1
        self._max_blocks = max_blocks
        # OffloadKey -> [pool keys of its shards (rank order), stored-shard mask, reported]
        self._blocks: "OrderedDict[bytes, List[Any]]" = OrderedDict()
        self._shards: Dict[Tuple[int, int], Tuple[bytes, int]] = {}  # pool key -> (key, rank)

    def known(self, key: bytes) -> bool:
        return key in self._blocks

    def remember(self, key: bytes, rank_keys: np.ndarray, stored_mask: int) -> None:
        """Follows `key` (no-op if followed); `stored_mask`: the ranks whose shard is stored."""
        if key in self._blocks:
            return
        shards = [(int(rank_keys[r, 0]), int(rank_keys[r, 1])) for r in range(len(rank_keys))]
        self._blocks[key] = [shards, stored_mask, False]
        for r, shard in enumerate(shards):
            self._shards[shard] = (key, r)
        while len(self._blocks) > self._max_blocks:
            _k, (old, _m, _rep) = self._blocks.popitem(last=False)
            for shard in old:
                self._shards.pop(shard, None)

    def feed(self, kind: int, pool_key: Tuple[int, int]) -> Optional[Tuple[bytes, bool]]:
        """(key, removed) when the event changes what vLLM was told about a block, else None."""
        hit = self._shards.get((int(pool_key[0]), int(pool_key[1])))
        if hit is None:
            return None
        key, rank = hit
        state = self._blocks[key]
        if kind == _kv.EVENT_STORED:
            state[1] |= 1 << rank
            if state[1] == self._full and not state[2]:
                state[2] = True
                return key, False
        elif kind in (_kv.EVENT_EVICTED, _kv.EVENT_REMOVED):
            state[1] &= ~(1 << rank)
            if state[2]:
                state[2] = False
                return key, True
        return None

    def keys(self) -> List[bytes]:
        return list(self._blocks)

    def clear(self) -> None:
        self._blocks.clear()
        self._shards.clear()


def _bytes_per_block(config: OffloadingConfig) -> int:
    return int(config.worker_kv_bytes_per_block) * int(config.cache.blocks_per_chunk)


class DeltakvOffloadingManager(OffloadingManager):
    """Scheduler side: lookups, pins and events over the pool (see the module docstring)."""

    def __init__(self, config: OffloadingConfig, extra: Dict[str, Any]) -> None:
        self._keys = _Keys(config, extra)
        self._enable_events = bool(config.enable_kv_cache_events)
        self._max_pins = int(extra.get("deltakv_max_pins", 65536))
        block_bytes = _bytes_per_block(config)
        # This process copies nothing: a one-block layout satisfies the client (the pool checks
        # that its block size matches), and every copy runs in the workers.
        self._scratch = np.zeros((1, block_bytes), np.uint8)
        self._client = _kv.KvClient(_kv.CrossLayer(self._scratch),
                                    pool_name=str(extra.get("deltakv_pool", "deltakv.kv")),
                                    copy_threads=0, pool_events=True)
        # Pins taken by lookup() HITs this step, and the pins of prepared loads.
        self._lookup_pins: "OrderedDict[bytes, Any]" = OrderedDict()
        self._load_pins: Dict[bytes, List[Any]] = {}
        self._pending_stores: Dict[bytes, int] = {}
        # This engine's blocks, for reset_cache and the event feed.
        self._events = _BlockEvents(self._keys.world)

    # --- lookups and loads ---------------------------------------------------------------
    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        k = bytes(key)
        if k in self._lookup_pins or k in self._load_pins:
            return LookupResult.HIT
        keys = self._keys.all_ranks([k])
        if self._client.lookup(keys[:1]) == 0:
            return LookupResult.HIT_PENDING if k in self._pending_stores else LookupResult.MISS
        if len(self._lookup_pins) >= self._max_pins:
            return LookupResult.RETRY
        try:
            pin = self._client.prepare_load(keys)  # every rank's shard, pinned until used
        except NotFoundError:
            return LookupResult.HIT_PENDING if k in self._pending_stores else LookupResult.MISS
        self._lookup_pins[k] = pin
        self._events.remember(k, keys, (1 << self._keys.world) - 1)  # every shard is stored
        return LookupResult.HIT

    def prepare_load(self, keys: Collection[OffloadKey],
                     req_context: ReqContext) -> LoadStoreSpec:
        out = []
        for key in keys:
            k = bytes(key)
            pin = self._lookup_pins.pop(k, None)
            if pin is None:  # not looked up this step: pin now
                pin = self._client.prepare_load(self._keys.all_ranks([k]))
            self._load_pins.setdefault(k, []).append(pin)
            out.append(k)
        return DeltakvLoadStoreSpec(out)

    def touch(self, keys: Collection[OffloadKey], req_context: ReqContext) -> None:
        items = [bytes(k) for k in keys]
        if items:
            self._client.touch(self._keys.all_ranks(items))

    def complete_load(self, keys: Collection[OffloadKey], req_context: ReqContext) -> None:
        for key in keys:
            pins = self._load_pins.get(bytes(key))
            if pins:
                pin = pins.pop()
                self._client.complete_load(pin)
                pin.free()
                if not pins:
                    del self._load_pins[bytes(key)]

    # --- stores --------------------------------------------------------------------------
    def prepare_store(self, keys: Collection[OffloadKey],
                      req_context: ReqContext) -> Optional[PrepareStoreOutput]:
        todo = []
        for key in keys:
            k = bytes(key)
            if k in self._pending_stores:
                continue
            rank_keys = self._keys.all_ranks([k])
            stored = self._client.lookup(rank_keys)  # the leading ranks whose shard is stored
            if stored == len(rank_keys):
                self._client.touch(rank_keys)
                continue
            todo.append(k)
            if not self._events.known(k):
                self._events.remember(k, rank_keys, self._stored_mask(rank_keys, stored))
        for k in todo:
            self._pending_stores[k] = self._pending_stores.get(k, 0) + 1
        # Evictions happen when the workers claim slots; the pool's feed reports them.
        return PrepareStoreOutput(keys_to_store=[OffloadKey(k) for k in todo],
                                  store_spec=DeltakvLoadStoreSpec(todo), evicted_keys=[])

    def complete_store(self, keys: Collection[OffloadKey], req_context: ReqContext,
                       success: bool = True) -> None:
        for key in keys:
            k = bytes(key)
            n = self._pending_stores.get(k, 0)
            if n <= 1:
                self._pending_stores.pop(k, None)
            else:
                self._pending_stores[k] = n - 1

    # --- requests, steps, events ---------------------------------------------------------
    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        return RequestOffloadingContext()

    def on_schedule_end(self, context: ScheduleEndContext) -> None:
        # Lookups that no load took over this step give their pins back.
        self._release_lookup_pins()

    def take_events(self) -> Iterable[OffloadingEvent]:
        events = self._client.drain_events()
        if not self._enable_events:
            return []
        out: List[OffloadingEvent] = []
        for kind, _raw, key, _pid in events:
            change = self._events.feed(kind, key)
            if change is not None:
                out.append(OffloadingEvent(keys=[OffloadKey(change[0])], medium=Medium.CPU,
                                           removed=change[1]))
        return out

    def reset_cache(self) -> None:
        self._release_lookup_pins()
        for k in self._events.keys():
            for rank_key in self._keys.all_ranks([k]):
                try:
                    self._client.remove(rank_key)
                except (NotFoundError, FailedPreconditionError):
                    pass  # gone already, or pinned by a load or being written: left as is
        self._events.clear()
        self._pending_stores.clear()

    def shutdown(self) -> None:
        self._release_lookup_pins()
        for pins in self._load_pins.values():
            for pin in pins:
                pin.free()
        self._load_pins.clear()
        self._client.close()

    def stats(self) -> Dict[str, Any]:
        """The pool's counters (deltakv.KvClient.stats)."""
        return self._client.stats()

    def _release_lookup_pins(self) -> None:
        while self._lookup_pins:
            _k, pin = self._lookup_pins.popitem(last=False)
            try:
                self._client.complete_load(pin)
            finally:
                pin.free()

    def _stored_mask(self, rank_keys: np.ndarray, leading: int) -> int:
        """The ranks whose shard is stored now, given that the first `leading` are."""
        mask = (1 << leading) - 1
        for r in range(leading + 1, len(rank_keys)):  # rank `leading` is not stored
            if self._client.lookup(rank_keys[r:r + 1]) == 1:
                mask |= 1 << r
        return mask


class DeltakvOffloadingWorker(OffloadingWorker):
    """Worker side: asynchronous copies between vLLM's KV tensors and the pool."""

    def __init__(self, config: OffloadingConfig, extra: Dict[str, Any],
                 kv_caches: CanonicalKVCaches) -> None:
        if int(config.cache.blocks_per_chunk) != 1:
            raise UnimplementedError(
                f"blocks_per_chunk {config.cache.blocks_per_chunk}: the deltakv tier offloads "
                "one GPU block per pool slot (set the offloaded block size to the GPU's)")
        self._rank = int(config.parallel.rank)
        self._keys = _Keys(config, extra)
        pieces = []
        for t in kv_caches.tensors:
            tensor = t.tensor
            if tensor.dim() < 1 or not tensor.is_contiguous():
                raise DeltakvError("a canonical KV tensor is not a contiguous (num_blocks, ...) "
                                   "tensor")
            row = tensor.stride(0) * tensor.element_size()
            pieces.append((tensor, row, int(t.page_size_bytes)))
        self._num_blocks = int(kv_caches.tensors[0].tensor.shape[0]) if kv_caches.tensors else 0
        self._client = _kv.KvClient(
            _kv.Pieces(pieces, num_blocks=self._num_blocks),
            pool_name=str(extra.get("deltakv_pool", "deltakv.kv")),
            copy_threads=int(extra.get("deltakv_copy_threads", 2)))
        self._jobs: Dict[int, Tuple[str, Any, int]] = {}
        self._failed: List[TransferResult] = []

    def _gpu_blocks(self, spec: GPULoadStoreSpec, n: int) -> np.ndarray:
        if spec.group_sizes is not None and len(spec.group_sizes) > 1:
            raise UnimplementedError("more than one KV cache group")
        blocks = np.asarray(spec.block_ids, dtype=np.uint64)
        if len(blocks) != n:
            raise DeltakvError(f"{len(blocks)} GPU blocks for {n} offloaded blocks")
        return blocks

    def submit_store(self, job_id: int, src_spec: GPULoadStoreSpec,
                     dst_spec: LoadStoreSpec) -> bool:
        assert isinstance(dst_spec, DeltakvLoadStoreSpec)
        blocks = self._gpu_blocks(src_spec, len(dst_spec.keys))
        h = self._client.prepare_store(self._keys.for_rank(dst_spec.keys, self._rank))
        self._client.start_store(h, blocks)
        self._jobs[job_id] = ("store", h, int(h.info()["allocated"]) * self._client.block_bytes)
        return True

    def submit_load(self, job_id: int, src_spec: LoadStoreSpec, dst_spec: GPULoadStoreSpec,
                    expedited: bool = False) -> bool:
        assert isinstance(src_spec, DeltakvLoadStoreSpec)
        blocks = self._gpu_blocks(dst_spec, len(src_spec.keys))
        try:
            # The scheduler holds pins on these blocks, so they are stored.
            h = self._client.prepare_load(self._keys.for_rank(src_spec.keys, self._rank))
        except DeltakvError:
            self._failed.append(TransferResult(job_id=job_id, success=False))
            return True
        self._client.start_load(h, blocks)
        self._jobs[job_id] = ("load", h, len(blocks) * self._client.block_bytes)
        return True

    def _finish(self, job_id: int) -> TransferResult:
        kind, h, size = self._jobs.pop(job_id)
        ok = True
        try:
            if kind == "store":
                self._client.complete_store(h)
            else:
                self._client.complete_load(h)
        except DeltakvError:
            ok = False
        finally:
            h.free()
        return TransferResult(job_id=job_id, success=ok, transfer_size=size)

    def get_finished(self) -> List[TransferResult]:
        out, self._failed = self._failed, []
        for job_id in [j for j, (_k, h, _s) in self._jobs.items() if h.query()]:
            out.append(self._finish(job_id))
        return out

    def wait(self, job_ids: set) -> None:
        for job_id in job_ids:
            job = self._jobs.get(job_id)
            if job is not None:
                job[1].wait(-1)

    def shutdown(self) -> None:
        for job_id in list(self._jobs):
            self._jobs[job_id][1].wait(-1)
        self._client.close()


class DeltakvOffloadingSpec(OffloadingSpec):
    """Selected with spec_name "DeltakvOffloadingSpec", spec_module_path "deltakv.vllm"."""

    def __init__(self, config: OffloadingConfig) -> None:
        super().__init__(config)
        self._extra = dict(self.extra_config)
        self._manager: Optional[DeltakvOffloadingManager] = None
        self._worker: Optional[DeltakvOffloadingWorker] = None

    def get_manager(self) -> OffloadingManager:
        if self._manager is None:
            self._manager = DeltakvOffloadingManager(self.config, self._extra)
        return self._manager

    def get_worker(self, kv_caches: CanonicalKVCaches) -> OffloadingWorker:
        if self._worker is None:
            self._worker = DeltakvOffloadingWorker(self.config, self._extra, kv_caches)
        return self._worker


# ---- Weight transfer ------------------------------------------------------------------------

@dataclass
class DeltakvInitInfo(WeightTransferInitInfo):
    shm_name: str = "deltakv"
    initial_version: str = ""
    # parameter name -> layout JSON (deltasync/layout.h); absent = replicated.
    layouts: Dict[str, str] = field(default_factory=dict)
    # parameter name -> checkpoint tensor name; absent = the same name.
    names: Dict[str, str] = field(default_factory=dict)
    backend: str = "cpu"
    attach_timeout_ms: int = 10000
    # The safetensors checkpoint directory the engine loaded, for builds whose kernels keep
    # only a repacked copy of the weights (vLLM's CPU build): the handle then serves a canonical
    # host copy of the checkpoint, and each commit's touched decoder layers are reloaded into
    # the model through vLLM's layerwise reload. None: the parameters are updated in place.
    checkpoint: Optional[str] = None


@dataclass
class DeltakvUpdateInfo(WeightTransferUpdateInfo):
    version: str = ""
    delta: Optional[str] = None  # with sidecar_url: rank 0 requests the sync
    sidecar_url: Optional[str] = None
    token: Optional[str] = None
    token_file: Optional[str] = None
    timeout_s: float = 600.0


class DeltakvWeightTransferEngine(WeightTransferEngine[DeltakvInitInfo, DeltakvUpdateInfo]):
    """Applies deltakv syncs to the worker's model in place (see the module docstring)."""

    init_info_cls = DeltakvInitInfo
    update_info_cls = DeltakvUpdateInfo
    supports_draft_weight_update = False

    def __init__(self, config: Any, vllm_config: Any, device: Any, model: Any) -> None:
        super().__init__(config, vllm_config, device, model)
        self._engine: Optional[Engine] = None
        self._canonical: Dict[str, Any] = {}  # checkpoint mode: name -> host tensor
        self._touched: Set[str] = set()

    def _rank(self) -> Tuple[int, int]:
        pc = self.parallel_config
        world = int(getattr(pc, "tensor_parallel_size", 1) or 1)
        rank = int(getattr(pc, "rank", 0) or 0) % world
        return rank, world

    def init_transfer_engine(self, init_info: DeltakvInitInfo) -> None:
        if self._engine is not None:
            raise FailedPreconditionError("the deltakv weight transfer engine is initialized")
        rank, world = self._rank()
        common = dict(shm_name=init_info.shm_name, rank=rank, world_size=world,
                      initial_version=init_info.initial_version, backend=init_info.backend,
                      attach_timeout_ms=init_info.attach_timeout_ms)
        if init_info.checkpoint is None:
            self._engine = register_module(self.model, layouts=init_info.layouts,
                                           names=init_info.names, **common)
            return
        self._canonical = _load_checkpoint(init_info.checkpoint)
        self._engine = register_tensors(self._canonical.items(), derived=self._on_derived,
                                        **common)

    def start_weight_update(self) -> None:
        self._live()  # the update is applied inside update_weights: nothing to prepare

    def receive_weights(self, update_info: DeltakvUpdateInfo) -> None:
        if not update_info.version:
            raise ValueError("update_info.version is required")
        self._touched.clear()
        apply_sync(self._live(), self._rank()[0], update_info.version, delta=update_info.delta,
                   sidecar_url=update_info.sidecar_url, token=update_info.token,
                   token_file=update_info.token_file, timeout_s=update_info.timeout_s)
        if self._touched:
            self._reload_touched_layers()

    def _on_derived(self, name: str, regions: Any) -> None:
        self._touched.add(name)

    def _reload_touched_layers(self) -> None:
        """Checkpoint mode: loads every tensor of each decoder layer a commit touched (a fused
        parameter needs all its parts) from the canonical copy into the model, through vLLM's
        layerwise reload, which reruns the layers' weight processing (repacking)."""
        from vllm.distributed.weight_transfer.base import layerwise_groups
        from vllm.model_executor.model_loader.reload.layerwise import (
            finalize_layerwise_reload, initialize_layerwise_reload)
        names = [n for g in layerwise_groups(list(self._canonical))
                 if self._touched.intersection(g) for n in g]
        self._touched.clear()
        try:
            initialize_layerwise_reload(self.model)
            self.model.load_weights(((n, self._canonical[n]) for n in names))
            finalize_layerwise_reload(self.model, self.model_config)
        except Exception as e:
            raise DataLossError(f"the new weights are committed, but reloading {len(names)} "
                                f"tensors into the model failed: {e}") from e

    def update_weights(self, update_info: Dict[str, Any]) -> None:
        # Applied in place on the model's own memory; no device stream to synchronize for the
        # cpu backend, and the cuda backend synchronizes its scatter before committing.
        self.receive_weights(self.parse_update_info(update_info))

    def finish_weight_update(self) -> None:
        self._live()

    def shutdown(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        self._canonical = {}

    @property
    def handle(self) -> Optional[Engine]:
        """The deltakv engine handle (state, policy_version, version_id, sync_error, sync_stats)."""
        return self._engine

    def _live(self) -> Engine:
        if self._engine is None:
            raise FailedPreconditionError("init_transfer_engine was not called")
        return self._engine


def _load_checkpoint(path: str) -> Dict[str, Any]:
    """Every tensor of the safetensors files in directory `path`, in host memory."""
    import glob
    import os

    from safetensors.torch import load_file
    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if not files:
        raise NotFoundError(f"no .safetensors files in checkpoint directory {path!r}")
    out: Dict[str, Any] = {}
    for f in files:
        for name, t in load_file(f, device="cpu").items():
            if name in out:
                raise DeltakvError(f"tensor {name!r} is in two files of {path!r}")
            out[name] = t.contiguous()
    return out


def register() -> None:
    """Registers the weight transfer engine as backend "deltakv" (idempotent; an installed
    package does this in every vLLM process through its plugin entry point)."""
    from .vllm_plugin import register as _register
    _register()
