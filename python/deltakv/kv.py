"""The host KV tier client: store KV blocks into the sidecar's shared-memory pool and reload them.

    import numpy as np, deltakv
    kv_mem = np.zeros((num_blocks, block_bytes), np.uint8)        # the engine's KV memory
    client = deltakv.KvClient(deltakv.CrossLayer(kv_mem), pool_name="deltakv.kv")
    ctx = deltakv.KeyContext(model_fingerprint="org/model@rev", kv_dtype="bfloat16")
    keys = deltakv.chain_keys(ctx, tokens, block_tokens=16)      # (n, 2) uint64: lo, hi
    client.store(keys, blocks=[0, 1, 2])                          # prepare, copy, publish
    hits = client.lookup(keys)
    client.load(keys[:hits], blocks=[5, 6, 7][:hits])             # pin, copy, unpin

This is the C client (deltakv_kv.h) with the same rules: a stored block becomes visible only
after its copy completed; handles and the client may be released in any order. The layout's
arrays are kept alive by the client, and a layout whose blocks reach past one of its arrays is
refused (InvalidArgumentError; a raw address is taken on trust). Keys are numpy arrays of shape
(n, 2), dtype uint64.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native
from .errors import InvalidArgumentError
from ._native import KeyContext, LoadHandle, StoreHandle

__all__ = ["KvClient", "KeyContext", "CrossLayer", "PerLayer", "Pieces", "chain_keys",
           "engine_hash_keys", "token_fingerprint", "StoreHandle", "LoadHandle",
           "STORE_ALLOCATED", "STORE_ALREADY_STORED", "STORE_IN_FLIGHT", "STORE_REFUSED",
           "EVENT_STORED", "EVENT_EVICTED", "EVENT_REMOVED", "EVENT_OTHER", "HASH_XXH3",
           "HASH_SHA256"]

STORE_ALLOCATED, STORE_ALREADY_STORED, STORE_IN_FLIGHT, STORE_REFUSED = 0, 1, 2, 3
EVENT_STORED, EVENT_EVICTED, EVENT_REMOVED, EVENT_OTHER = 0, 1, 2, 255
HASH_XXH3, HASH_SHA256 = 0, 1

_PER_LAYER, _CROSS_LAYER, _PIECES = 1, 2, 3

Memory = Union[Any, int]  # an array (numpy / __dlpack__) or a raw address


def _address(mem: Memory) -> Tuple[int, Optional[int]]:
    """(address, bytes or None) of an array or a raw address."""
    if isinstance(mem, (int, np.integer)):
        return int(mem), None
    flags = getattr(mem, "flags", None)
    if flags is not None and not getattr(flags, "writeable", True):
        raise InvalidArgumentError("KV memory must be writable (loads copy into it)")
    ptr, nbytes, _shape, _dtype, device = _native.array_info(mem)
    if device != _DLPACK_CPU:
        raise InvalidArgumentError(
            f"KV memory on DLPack device type {device}: the cpu copy backend reads host memory "
            "only, and this build has no cuda copy backend")
    return ptr, nbytes


_DLPACK_CPU = 1


@dataclass
class CrossLayer:
    """One region per block holding every layer: block b at base + b * block_stride.

    With an array of shape (num_blocks, block_bytes) (any dtype; bytes are counted) nothing else
    is needed; with a raw address give num_blocks and block_bytes."""
    memory: Memory
    num_blocks: Optional[int] = None
    block_bytes: Optional[int] = None
    block_stride: int = 0


@dataclass
class PerLayer:
    """One tensor per layer, or separate K and V tensors per layer, each [num_blocks, ...]:
    runs in order layer 0 K, layer 0 V, layer 1 K, ... `v` is None when K and V share a tensor
    (or for MLA). bytes_per_tensor defaults to one block's row of the first K array."""
    k: Sequence[Memory]
    v: Optional[Sequence[Optional[Memory]]] = None
    num_blocks: Optional[int] = None
    bytes_per_tensor: Optional[int] = None
    stride: int = 0


@dataclass
class Pieces:
    """The general form: (memory, stride, bytes) per piece; a block is the concatenation of its
    pieces' runs."""
    pieces: Sequence[Tuple[Memory, int, int]]
    num_blocks: int = 0


Layout = Union[CrossLayer, PerLayer, Pieces]


def _rows(mem: Memory, what: str) -> Optional[Tuple[int, int]]:
    """(rows, bytes per row) of an array; None for a raw address. InvalidArgumentError for an
    array without rows: it has no block to copy into."""
    if isinstance(mem, (int, np.integer)):
        return None
    _ptr, nbytes, shape, _dtype, _device = _native.array_info(mem)
    if not shape or shape[0] == 0:
        raise InvalidArgumentError(f"{what}: the array of shape {tuple(shape)} has no blocks "
                                   "(it needs at least one row)")
    return int(shape[0]), nbytes // int(shape[0])


def _check_extent(nbytes: Optional[int], num_blocks: Any, stride: Any, run: Any,
                  what: str) -> None:
    """InvalidArgumentError when the runs of `num_blocks` blocks (`run` bytes each, `stride`
    apart; 0: `run`) reach past an array of `nbytes` bytes: a load would write past it. A raw
    address (nbytes None) is taken on trust; the other layout errors are the library's."""
    if nbytes is None:
        return
    try:
        n, step, size = operator.index(num_blocks), operator.index(stride), operator.index(run)
    except TypeError:
        return
    step = step or size
    if n <= 0 or size <= 0 or step < size:
        return
    need = (n - 1) * step + size
    if need > nbytes:
        raise InvalidArgumentError(
            f"{what}: {n} blocks of {size} bytes at a stride of {step} need {need} bytes, but "
            f"the array has {nbytes}")


def _layout_args(layout: Layout) -> Dict[str, Any]:
    args: Dict[str, Any] = dict(kind=0, num_blocks=0, layers=[], bytes_per_tensor=0, base=0,
                                block_bytes=0, block_stride=0, pieces=[])
    keep: List[Any] = []
    if isinstance(layout, CrossLayer):
        base, nbytes = _address(layout.memory)
        rows = _rows(layout.memory, "CrossLayer memory")
        num_blocks = layout.num_blocks if layout.num_blocks is not None else (rows or (0, 0))[0]
        block_bytes = layout.block_bytes if layout.block_bytes is not None else (rows or (0, 0))[1]
        _check_extent(nbytes, num_blocks, layout.block_stride, block_bytes, "CrossLayer memory")
        args.update(kind=_CROSS_LAYER, num_blocks=num_blocks, base=base, block_bytes=block_bytes,
                    block_stride=layout.block_stride)
        keep.append(layout.memory)
    elif isinstance(layout, PerLayer):
        vs = list(layout.v) if layout.v is not None else [None] * len(layout.k)
        if len(vs) != len(layout.k):
            raise ValueError(f"{len(layout.k)} K tensors and {len(vs)} V tensors")
        rows = _rows(layout.k[0], "PerLayer k[0]") if layout.k else None
        num_blocks = layout.num_blocks if layout.num_blocks is not None else (rows or (0, 0))[0]
        bytes_per_tensor = (layout.bytes_per_tensor if layout.bytes_per_tensor is not None
                            else (rows or (0, 0))[1])
        layers = []
        for i, (k, v) in enumerate(zip(layout.k, vs)):
            addrs = []
            for name, mem in ((f"k[{i}]", k), (f"v[{i}]", v)):
                if mem is None:
                    addrs.append(0)
                    continue
                address, nbytes = _address(mem)
                _check_extent(nbytes, num_blocks, layout.stride, bytes_per_tensor,
                              f"PerLayer {name}")
                addrs.append(address)
            layers.append((addrs[0], addrs[1], layout.stride))
            keep.extend([k, v])
        args.update(kind=_PER_LAYER, layers=layers, num_blocks=num_blocks,
                    bytes_per_tensor=bytes_per_tensor)
    elif isinstance(layout, Pieces):
        pieces = []
        for i, (m, stride, nbytes) in enumerate(layout.pieces):
            address, size = _address(m)
            _check_extent(size, layout.num_blocks, stride, nbytes, f"Pieces piece {i}")
            pieces.append((address, int(stride), int(nbytes)))
        keep.extend(m for m, _s, _b in layout.pieces)
        args.update(kind=_PIECES, pieces=pieces, num_blocks=layout.num_blocks)
    else:
        raise TypeError("layout must be CrossLayer, PerLayer or Pieces")
    args["keepalive"] = keep
    return args


def _unsigned(values: Any, dtype: Any, what: str) -> np.ndarray:
    """`values` as a contiguous array of `dtype` (an unsigned integer type): integers only,
    each in the type's range (ValueError otherwise; never a silent cast or wrap-around)."""
    try:
        a = np.asarray(values)
        if a.dtype.kind in "fc" and isinstance(values, (list, tuple)):
            # Python ints that no one integer type holds together (one at or above 2**63 beside
            # another) come out as floats: take the values as they are, checked one by one.
            a = np.asarray(values, dtype=object)
    except OverflowError:
        raise ValueError(f"{what}: an integer out of range") from None
    if a.dtype.kind == "O":
        flat = a.reshape(-1)
        try:
            ints = [operator.index(v) for v in flat]
        except TypeError:
            raise TypeError(f"{what} must be integers") from None
        lo, hi = (min(ints), max(ints)) if ints else (0, 0)
    elif a.dtype.kind in "iu":
        lo, hi = (int(a.min()), int(a.max())) if a.size else (0, 0)
    elif a.size == 0:
        lo = hi = 0
    else:
        raise TypeError(f"{what} must be integers, not {a.dtype}")
    limit = int(np.iinfo(dtype).max)
    if lo < 0 or hi > limit:
        raise ValueError(f"{what} must be integers in 0..{limit}")
    if a.dtype.kind == "O":
        return np.array([operator.index(v) for v in a.reshape(-1)], dtype=dtype).reshape(a.shape)
    return np.ascontiguousarray(a, dtype=dtype)


def _keys(keys: Any) -> np.ndarray:
    a = _unsigned(keys, np.uint64, "keys")
    if a.ndim == 1 and a.shape[0] == 2:
        a = a.reshape(1, 2)
    if a.ndim != 2 or a.shape[1] != 2:
        raise ValueError(f"keys must have shape (n, 2) (lo, hi per key), not {a.shape}")
    return a


def _blocks(blocks: Any) -> np.ndarray:
    return _unsigned(blocks, np.uint64, "blocks").reshape(-1)


def chain_keys(context: KeyContext, tokens: Any, block_tokens: int,
               parent: Optional[Tuple[int, int]] = None) -> np.ndarray:
    """Keys of the full blocks of `tokens` (docs/KEYS.md); `parent` continues a chain."""
    t = _unsigned(tokens, np.uint32, "tokens").reshape(-1)
    p = None if parent is None else tuple(int(x) for x in _keys(parent)[0])
    return _native.chain_keys(context, t, block_tokens, p)


def engine_hash_keys(context: KeyContext, hashes: Union[bytes, Sequence[bytes], Sequence[int]],
                     hash_bytes: Optional[int] = None) -> np.ndarray:
    """Keys of engine block hashes, each already covering its block's prefix, converted as
    docs/KEYS.md §5 says: bytes as they are (vLLM's 32-byte hashes); an int of 64 bits (from
    -2**63 to 2**64 - 1: Python's hash(), 64-bit engine hashes) modulo 2**64 as 8 bytes little
    endian; a larger non-negative int (below 2**256) as 32 bytes big endian; a str of hex
    digits (SGLang) as the bytes it encodes. All of one call must convert to one length;
    ValueError otherwise, TypeError for another type."""
    if isinstance(hashes, (bytes, bytearray, memoryview)):
        if hash_bytes is None:
            raise ValueError("hash_bytes is required with concatenated hashes")
        raw = bytes(hashes)
    else:
        items = [_engine_hash_bytes(h) for h in hashes]
        sizes = {len(h) for h in items}
        if len(sizes) > 1:
            raise ValueError(f"hashes of different lengths: {sorted(sizes)}")
        hash_bytes = sizes.pop() if sizes else (hash_bytes or 32)
        raw = b"".join(items)
    return _native.engine_hash_keys(context, raw, int(hash_bytes))


def _engine_hash_bytes(h: Any) -> bytes:
    """One engine hash as the bytes its key hashes (docs/KEYS.md §5)."""
    if isinstance(h, (bytes, bytearray, memoryview)):
        return bytes(h)
    if isinstance(h, str):
        try:
            return bytes.fromhex(h)
        except ValueError:
            raise ValueError(f"engine hash {h!r} is not a string of hex digits") from None
    try:
        n = operator.index(h)
    except TypeError:
        raise TypeError(f"an engine hash must be bytes, an int or a hex str, not "
                        f"{type(h).__name__}") from None
    if -(1 << 63) <= n < (1 << 64):
        return (n & ((1 << 64) - 1)).to_bytes(8, "little")
    if (1 << 64) <= n < (1 << 256):
        return n.to_bytes(32, "big")
    raise ValueError(f"engine hash {n} is neither a 64-bit integer nor a non-negative one "
                     f"below 2**256")


def token_fingerprint(tokens: Any) -> int:
    """The 64-bit fingerprint of one block's tokens (docs/KEYS.md §6)."""
    return _native.token_fingerprint(_unsigned(tokens, np.uint32, "tokens").reshape(-1))


class KvClient:
    """A client of the sidecar's KV pool over the engine's KV memory `layout`."""

    def __init__(self, layout: Layout, pool_name: str = "deltakv.kv", *,
                 copy_backend: str = "cpu", copy_threads: int = 2, max_keys_per_call: int = 0,
                 max_queued_events: int = 0, open_timeout_ms: int = 0,
                 pool_events: bool = False) -> None:
        self._c = _native.KvClient(pool_name=pool_name, copy_backend=copy_backend,
                                   copy_threads=copy_threads,
                                   max_keys_per_call=max_keys_per_call,
                                   max_queued_events=max_queued_events,
                                   open_timeout_ms=open_timeout_ms, pool_events=pool_events,
                                   **_layout_args(layout))

    # Lifetime.
    def close(self) -> None:
        """Finishes live handles (their copies are waited for), then closes. Idempotent."""
        self._c.close()

    def __enter__(self) -> "KvClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._c.closed

    # Queries.
    @property
    def block_bytes(self) -> int:
        return self._c.info()[0]

    @property
    def capacity_slots(self) -> int:
        return self._c.info()[1]

    def lookup(self, keys: Any) -> int:
        """How many leading keys are stored now (advisory)."""
        return self._c.lookup(_keys(keys))

    def touch(self, keys: Any) -> int:
        return self._c.touch(_keys(keys))

    def remove(self, key: Any) -> None:
        k = _keys(key)
        if k.shape[0] != 1:
            raise ValueError(f"remove takes one key (lo, hi), not {k.shape[0]}")
        self._c.remove(int(k[0, 0]), int(k[0, 1]))

    # The handle API (as the C ABI).
    def prepare_store(self, keys: Any, fingerprints: Any = None) -> StoreHandle:
        fp = None if fingerprints is None else _blocks(fingerprints)
        return self._c.prepare_store(_keys(keys), fp)

    def start_store(self, handle: StoreHandle, blocks: Any) -> None:
        self._c.store(handle, _blocks(blocks))

    def complete_store(self, handle: StoreHandle) -> None:
        self._c.complete_store(handle)

    def prepare_load(self, keys: Any) -> LoadHandle:
        return self._c.prepare_load(_keys(keys))

    def start_load(self, handle: LoadHandle, blocks: Any) -> None:
        self._c.load(handle, _blocks(blocks))

    def complete_load(self, handle: LoadHandle) -> None:
        self._c.complete_load(handle)

    # One call each way.
    def store(self, keys: Any, blocks: Any, fingerprints: Any = None) -> np.ndarray:
        """Offloads engine blocks `blocks` (one per key) under `keys`; returns the outcome per
        key (STORE_ALLOCATED: copied and published; ALREADY_STORED / IN_FLIGHT: nothing to do;
        REFUSED: no slot)."""
        h = self.prepare_store(keys, fingerprints)
        try:
            self._c.store(h, _blocks(blocks))
            self._c.complete_store(h)
            return h.outcomes
        finally:
            h.free()

    def load(self, keys: Any, blocks: Any) -> None:
        """Reloads the blocks of `keys` (all must be stored: NotFoundError otherwise, nothing
        copied) into engine blocks `blocks`."""
        h = self._c.prepare_load(_keys(keys))
        try:
            self._c.load(h, _blocks(blocks))
            self._c.complete_load(h)
        finally:
            h.free()

    def drain_events(self) -> List[Tuple[int, int, Tuple[int, int], int]]:
        """(kind, raw_kind, (lo, hi), origin_pid) of every queued event, oldest first."""
        return self._c.drain_events()

    def stats(self) -> Dict[str, Union[int, float]]:
        return self._c.stats()
