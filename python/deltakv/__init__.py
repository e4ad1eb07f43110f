"""deltakv: live sparse weight sync and a host KV-cache tier for inference engines.

- trainers: deltakv.publish(parent, new, out) writes a delta from checkpoint directories or
  from tensors in memory;
- engines: deltakv.Engine serves syncs on the engine's weights; deltakv.KvClient stores and
  reloads KV blocks in the sidecar's pool;
- operators: deltakv.SidecarClient drives the sidecar's HTTP API (sync, wait, status).

Errors raise deltakv.DeltakvError subclasses carrying the C status and message.
"""
from __future__ import annotations

from . import _native
from .engine import Engine
from .errors import (DataLossError, DeltakvError, FailedPreconditionError, InternalError,
                     InvalidArgumentError, IoError, NotFoundError, ResourceExhaustedError,
                     UnimplementedError)
from .kv import (CrossLayer, KeyContext, KvClient, PerLayer, Pieces, chain_keys,
                 engine_hash_keys, token_fingerprint)
from .publish import PublishSummary, publish
from .sidecar import SidecarClient, SidecarError, SyncFailed

__version__: str = _native.version()

if _native.abi_version() != _native.HEADER_ABI_VERSION:  # pragma: no cover
    raise ImportError(f"deltakv: the extension was built for ABI {_native.HEADER_ABI_VERSION} "
                      f"but libdeltakv has ABI {_native.abi_version()}")


def abi_version() -> int:
    """The loaded libdeltakv's DELTAKV_ABI_VERSION."""
    return _native.abi_version()


__all__ = [
    "publish", "PublishSummary", "Engine", "KvClient", "KeyContext", "CrossLayer", "PerLayer",
    "Pieces", "chain_keys", "engine_hash_keys", "token_fingerprint", "SidecarClient",
    "SidecarError", "SyncFailed", "DeltakvError", "InvalidArgumentError", "NotFoundError",
    "DataLossError", "FailedPreconditionError", "ResourceExhaustedError", "IoError",
    "UnimplementedError", "InternalError", "abi_version", "__version__",
]
