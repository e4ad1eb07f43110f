"""A vLLM KV connector (KVConnectorBase_V1) over the deltakv sidecar's host KV pool: the
blocks a request computes are stored into the pool as they fill, and a later request (in this
engine, a restarted one, or another engine on the node) whose prompt starts with the same
tokens loads them instead of running prefill over them.

    --kv-transfer-config '{"kv_connector": "DeltakvConnector",
        "kv_connector_module_path": "deltakv.vllm_connector", "kv_role": "kv_both",
        "kv_connector_extra_config": {"deltakv_pool": "deltakv.kv"}}'

The sidecar owns the pool (`deltakv sidecar --kv-block-bytes B`, B = the bytes one worker keeps
per KV block, summed over its layers; the worker's error message names it when it differs).

Keys are deltakv's chained token keys (docs/KEYS.md) over the request's token ids, one chain per
tensor-parallel rank: the context holds the model fingerprint (default: the model path), the KV
dtype, `vllm-connector:<block size>`, the rank, the TP size and the salt. They depend on the
tokens only (not on vLLM's per-process hash seed), so a restarted engine finds its prefixes.

Scheduler side: get_num_new_matched_tokens() looks up the request's full blocks (leaving at
least one prompt token to compute) for every rank and pins the hits, so no engine sharing the
pool evicts them before the worker copies them; the pins end two scheduler steps later (the
load runs inside the next forward). Each step's metadata names the blocks to load and the
blocks that became full (computed tokens, speculative ones excluded) to store.

Worker side: start_load_kv() first completes the previous step's stores, then copies the hits
from the pool into the paged KV tensors and waits (a load that finds a block gone reports its
block ids through get_block_ids_with_load_errors(), and vLLM recomputes them). wait_for_save()
starts the stores of the blocks this step filled; they run on the client's copy threads while
the engine samples and schedules, and complete before the next forward writes any block.

extra_config keys: deltakv_pool ("deltakv.kv"), deltakv_copy_threads (2),
deltakv_model_fingerprint (the model path), deltakv_salt (none), deltakv_kv_dtype (the cache
dtype). KV tensors must be in host memory (the cpu copy backend).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, List, Optional, Set, Tuple

import numpy as np

from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1,
                                                               KVConnectorMetadata,
                                                               KVConnectorRole)

from . import kv as _kv
from .errors import DeltakvError, InvalidArgumentError, NotFoundError

__all__ = ["DeltakvConnector", "DeltakvConnectorMetadata"]

# Pins of a step's loads are released this many scheduler steps later (the load runs in the
# forward after the step that scheduled it; one more step covers asynchronous scheduling).
_PIN_STEPS = 2


@dataclass
class _Op:
    """Blocks to copy: one pool key per rank per block, and the engine's block ids."""
    keys: np.ndarray  # (world, n, 2) uint64
    block_ids: List[int]


@dataclass
class DeltakvConnectorMetadata(KVConnectorMetadata):
    loads: List[_Op] = field(default_factory=list)
    stores: List[_Op] = field(default_factory=list)


@dataclass
class _Request:
    request: Any
    block_ids: List[int] = field(default_factory=list)
    keys: List[np.ndarray] = field(default_factory=list)  # per rank, (n, 2)
    stored: int = 0  # blocks already handed to a store


class _KeyChains:
    """Chained token keys (docs/KEYS.md), one context per tensor-parallel rank."""

    def __init__(self, vllm_config: Any, extra: Dict[str, Any], block_size: int) -> None:
        self.block_size = block_size
        self.world = int(vllm_config.parallel_config.tensor_parallel_size or 1)
        fingerprint = extra.get("deltakv_model_fingerprint") or vllm_config.model_config.model
        dtype = extra.get("deltakv_kv_dtype") or str(vllm_config.cache_config.cache_dtype)
        if dtype == "auto":
            dtype = str(vllm_config.model_config.dtype)
        self._fingerprint, self._dtype = str(fingerprint), dtype
        self._salt = extra.get("deltakv_salt")
        self.generation = 0
        self.contexts: List[Any] = []
        self.new_generation(0)

    def new_generation(self, generation: int) -> None:
        """Keys of another cache generation (the salt gets "#<generation>" from generation 1
        on): blocks stored before a reset are never looked up again."""
        self.generation = generation
        salt = None if self._salt is None else str(self._salt)
        if generation:
            salt = f"{salt or ''}#{generation}"
        self.contexts = [
            _kv.KeyContext(model_fingerprint=self._fingerprint, kv_dtype=self._dtype,
                           kv_layout=f"vllm-connector:{self.block_size}", tp_rank=r,
                           tp_size=self.world, salt=salt)
            for r in range(self.world)]

    def extend(self, st: _Request, blocks: int) -> None:
        """Grows st.keys to cover the first `blocks` full blocks of the request's tokens."""
        have = len(st.keys[0]) if st.keys else 0
        if blocks <= have:
            return
        bs = self.block_size
        tokens = np.asarray(st.request.all_token_ids[have * bs:blocks * bs], dtype=np.uint32)
        grown = []
        for r, ctx in enumerate(self.contexts):
            parent = None if not have else (int(st.keys[r][-1, 0]), int(st.keys[r][-1, 1]))
            new = _kv.chain_keys(ctx, tokens, bs, parent)
            grown.append(new if not have else np.concatenate([st.keys[r], new]))
        st.keys = grown

    @staticmethod
    def span(st: _Request, first: int, end: int) -> np.ndarray:
        return np.stack([k[first:end] for k in st.keys])


def _block_bytes(kv_cache_config: Any) -> int:
    total = sum(int(t.size) for t in kv_cache_config.kv_cache_tensors)
    return total // max(1, int(kv_cache_config.num_blocks))


class DeltakvConnector(KVConnectorBase_V1):
    """Selected with kv_connector "DeltakvConnector", kv_connector_module_path
    "deltakv.vllm_connector" (see the module docstring)."""

    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any = None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        self._extra = dict(self._kv_transfer_config.kv_connector_extra_config or {})
        self._pool = str(self._extra.get("deltakv_pool", "deltakv.kv"))
        self._block_size = int(vllm_config.cache_config.block_size)
        self._chains = _KeyChains(vllm_config, self._extra, self._block_size)
        self._client: Optional[_kv.KvClient] = None
        if role == KVConnectorRole.SCHEDULER:
            self._init_scheduler(kv_cache_config)
        else:
            self._rank = int(vllm_config.parallel_config.rank) % self._chains.world
            self._pending_stores: List[Any] = []
            self._load_errors: Set[int] = set()

    # ---- scheduler side ---------------------------------------------------------------------
    def _init_scheduler(self, kv_cache_config: Any) -> None:
        if kv_cache_config is not None and len(kv_cache_config.kv_cache_groups) > 1:
            raise DeltakvError("the deltakv connector supports one KV cache group")
        # This process copies nothing: a one-block layout satisfies the client (the pool checks
        # the block size), and every copy runs in the workers.
        block_bytes = _block_bytes(kv_cache_config) if kv_cache_config is not None else 0
        self._scratch = np.zeros((1, max(1, block_bytes)), np.uint8)
        self._client = _kv.KvClient(_kv.CrossLayer(self._scratch), pool_name=self._pool,
                                    copy_threads=0)
        self._reqs: Dict[str, _Request] = {}
        self._planned: Dict[str, Tuple[int, int, Any]] = {}  # req -> (first, end, pin)
        self._loads: List[_Op] = []
        self._step_pins: Deque[List[Any]] = deque()
        self._this_step_pins: List[Any] = []

    def get_num_new_matched_tokens(self, request: Any,
                                   num_computed_tokens: int) -> Tuple[Optional[int], bool]:
        self._drop_plan(request.request_id)
        bs = self._block_size
        st = self._reqs.setdefault(request.request_id, _Request(request))
        st.request = request
        first = num_computed_tokens // bs
        end = (request.num_tokens - 1) // bs  # the last token is always computed
        if end <= first:
            return 0, False
        self._chains.extend(st, end)
        keys = _KeyChains.span(st, 0, end)
        hits = min(self._client.lookup(k) for k in keys)
        if hits <= first:
            return 0, False
        try:
            pin = self._client.prepare_load(keys[:, first:hits].reshape(-1, 2))
        except NotFoundError:  # evicted since the lookup
            return 0, False
        self._planned[request.request_id] = (first, hits, pin)
        return (hits - first) * bs, False

    def update_state_after_alloc(self, request: Any, blocks: Any,
                                 num_external_tokens: int) -> None:
        plan = self._planned.pop(request.request_id, None)
        if plan is None:
            return
        first, end, pin = plan
        if num_external_tokens <= 0:
            self._release(pin)
            return
        st = self._reqs[request.request_id]
        ids = list(blocks.get_block_ids()[0])
        self._loads.append(_Op(_KeyChains.span(st, first, end), ids[first:end]))
        self._this_step_pins.append(pin)
        st.stored = max(st.stored, end)  # loaded blocks are in the pool already

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        meta = DeltakvConnectorMetadata(loads=self._loads)
        self._loads = []
        so = scheduler_output
        for new in so.scheduled_new_reqs:
            st = self._reqs.get(new.req_id)
            if st is None:
                continue
            st.block_ids = list(new.block_ids[0])
            self._plan_store(meta, new.req_id, st, new.num_computed_tokens, so)
        cached = so.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            st = self._reqs.get(req_id)
            if st is None:
                continue
            new_ids = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids:
                st.block_ids = list(new_ids[0]) if new_ids is not None else []
            elif new_ids is not None:
                st.block_ids.extend(new_ids[0])
            self._plan_store(meta, req_id, st, cached.num_computed_tokens[i], so)
        for req_id in so.finished_req_ids:
            self._reqs.pop(req_id, None)
            self._drop_plan(req_id)
        self._step_pins.append(self._this_step_pins)
        self._this_step_pins = []
        while len(self._step_pins) > _PIN_STEPS:
            for pin in self._step_pins.popleft():
                self._release(pin)
        return meta

    def _plan_store(self, meta: DeltakvConnectorMetadata, req_id: str, st: _Request,
                    num_computed: int, so: Any) -> None:
        spec = len(getattr(so, "scheduled_spec_decode_tokens", {}).get(req_id, ()))
        done = num_computed + so.num_scheduled_tokens.get(req_id, 0) - spec
        full = min(done // self._block_size, len(st.block_ids))
        if full <= st.stored:
            return
        self._chains.extend(st, full)
        meta.stores.append(_Op(_KeyChains.span(st, st.stored, full),
                               st.block_ids[st.stored:full]))
        st.stored = full

    def reset_cache(self) -> bool:
        """vLLM's reset_prefix_cache(reset_connector=True), e.g. after a weight update: the
        blocks in the pool were computed under the old weights, so every later lookup and store
        uses keys of a new generation (the old blocks age out of the pool). Blocks that running
        requests computed before the reset are not stored."""
        self._chains.new_generation(self._chains.generation + 1)
        for req_id in list(self._planned):
            self._drop_plan(req_id)
        for st in self._reqs.values():
            st.keys = []
            st.stored = max(st.stored, len(st.block_ids))
        return True

    def request_finished(self, request: Any, block_ids: List[int]) -> Tuple[bool, Any]:
        self._drop_plan(request.request_id)
        return False, None

    def _drop_plan(self, req_id: str) -> None:
        plan = self._planned.pop(req_id, None)
        if plan is not None:
            self._release(plan[2])

    def _release(self, pin: Any) -> None:
        try:
            self._client.complete_load(pin)
        finally:
            pin.free()

    # ---- worker side ------------------------------------------------------------------------
    def register_kv_caches(self, kv_caches: Dict[str, Any]) -> None:
        num_blocks = int(self._kv_cache_config.num_blocks)
        pieces = []
        for name, t in kv_caches.items():
            pieces.extend(_pieces(name, t, num_blocks))
        need = sum(p[2] for p in pieces)
        self._client = _kv.KvClient(_kv.Pieces(pieces, num_blocks=num_blocks),
                                    pool_name=self._pool,
                                    copy_threads=int(self._extra.get("deltakv_copy_threads", 2)))
        if self._client.block_bytes != need:
            have = self._client.block_bytes
            self._client.close()
            raise InvalidArgumentError(
                f"pool {self._pool!r} has {have}-byte slots; this worker keeps {need} bytes per "
                f"KV block (start the sidecar with --kv-block-bytes {need})")

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        self._complete_stores()
        meta = self._get_connector_metadata()
        started = []
        for op in meta.loads:
            try:
                h = self._client.prepare_load(op.keys[self._rank])
            except NotFoundError:
                self._load_errors.update(op.block_ids)
                continue
            self._client.start_load(h, op.block_ids)
            started.append((h, op))
        for h, op in started:
            try:
                self._client.complete_load(h)
            except DeltakvError:
                self._load_errors.update(op.block_ids)
            finally:
                h.free()

    def wait_for_layer_load(self, layer_name: str) -> None:
        return

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any,
                      **kwargs: Any) -> None:
        return  # whole blocks are stored after the forward (wait_for_save)

    def wait_for_save(self) -> None:
        meta = self._get_connector_metadata()
        for op in meta.stores:
            h = self._client.prepare_store(op.keys[self._rank])
            self._client.start_store(h, op.block_ids)
            self._pending_stores.append(h)

    def get_finished(self, finished_req_ids: Set[str]) -> Tuple[None, None]:
        # Publishes the stores whose copies are done already (the rest complete at the next
        # forward's start or at shutdown); no request waits on the connector.
        still = []
        for h in self._pending_stores:
            if h.query():
                self._finish_store(h)
            else:
                still.append(h)
        self._pending_stores = still
        return None, None

    def get_block_ids_with_load_errors(self) -> Set[int]:
        out, self._load_errors = self._load_errors, set()
        return out

    def _complete_stores(self) -> None:
        pending, self._pending_stores = self._pending_stores, []
        for h in pending:
            self._finish_store(h)

    def _finish_store(self, h: Any) -> None:
        try:
            self._client.complete_store(h)  # a failed store is a later miss, nothing more
        except DeltakvError:
            pass
        finally:
            h.free()

    def shutdown(self) -> None:
        if self._client is None:
            return
        if self.role == KVConnectorRole.SCHEDULER:
            for pins in self._step_pins:
                for pin in pins:
                    self._release(pin)
            self._step_pins.clear()
            for req_id in list(self._planned):
                self._drop_plan(req_id)
        else:
            self._complete_stores()
        self._client.close()
        self._client = None


def _pieces(name: str, t: Any, num_blocks: int) -> List[Tuple[Any, int, int]]:
    """(tensor, block stride, bytes) per piece of one layer's KV tensor: the dimension of size
    num_blocks is the block dimension; each index of the dimensions before it is one piece."""
    if t.device.type != "cpu":
        raise InvalidArgumentError(
            f"KV cache {name!r} is on {t.device}: the cpu copy backend reads host memory only")
    shape = list(t.shape)
    if num_blocks not in shape:
        raise DeltakvError(f"KV cache {name!r} of shape {shape} has no dimension of "
                           f"{num_blocks} blocks")
    d = shape.index(num_blocks)
    inner = int(np.prod(shape[d + 1:], dtype=np.int64)) * t.element_size()
    stride = t.stride(d) * t.element_size()
    views = [t]
    for _ in range(d):
        views = [v[i] for v in views for i in range(v.shape[0])]
    for v in views:
        if not v[0].is_contiguous():
            raise DeltakvError(f"KV cache {name!r}: a block's page is not contiguous "
                               f"(shape {shape}, strides {list(t.stride())})")
    return [(v, stride, inner) for v in views]
