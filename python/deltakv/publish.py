"""The trainer's API: write a deltakv delta (zstd(parent XOR new) per changed piece).

    import deltakv
    s = deltakv.publish("ckpt/step-100", "ckpt/step-101", "deltas/step-101")
    s = deltakv.publish(parent_state, new_state, "deltas/step-101",
                        parent_version="step-100", version="step-101")

`parent` and `new` are checkpoint directories (safetensors files; the delta then carries the
checkpoint section) or mappings from tensor name to an array: a numpy array, anything with
`__dlpack__` in host memory (a CPU torch tensor, JAX, CuPy copied to host...), or a pair
(array, "DTYPE") that reinterprets the array's bytes (numpy has no bfloat16: pass
(bits.view(np.uint16), "BF16")). Arrays are read in place; nothing is copied besides the
compressed frames. The output directory must not exist; it appears only once complete.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Tuple, Union

from . import _native

__all__ = ["publish", "PublishSummary"]

TensorSet = Mapping[str, Any]
Source = Union[str, "os.PathLike[str]", TensorSet]


@dataclass(frozen=True)
class PublishSummary:
    parent_version: str
    version: str
    tensors: int
    tensors_changed: int
    checkpoint_bytes: int
    dense_bytes: int
    compressed_bytes: int
    nonzero_bytes: int
    frames: int
    objects: int
    seconds: float
    density: float


def _entries(tensors: TensorSet) -> List[Tuple[str, Optional[str], Any]]:
    out: List[Tuple[str, Optional[str], Any]] = []
    for name, value in tensors.items():
        dtype: Optional[str] = None
        if isinstance(value, tuple):
            if len(value) != 2 or not isinstance(value[1], str):
                raise TypeError(f"tensor {name!r}: expected an array or (array, 'DTYPE')")
            value, dtype = value
        out.append((str(name), dtype, value))
    return out


def publish(parent: Source, new: Source, out: Union[str, "os.PathLike[str]"], *,
            parent_version: Optional[str] = None, version: Optional[str] = None,
            level: int = 3, sequences: str = "runs", threads: int = 0,
            frame_bytes: int = 64 << 20,
            shard_bytes: int = 1 << 30, include_checkpoint: bool = True,
            progress: bool = False) -> PublishSummary:
    """Writes the delta parent -> new into the new directory `out`.

    Directories: versions default to each checkpoint directory's name. Mappings:
    parent_version and version are required, and the delta has no checkpoint section. level:
    zstd level; sequences: how frames are parsed into zstd sequences, as `deltakv publish
    --sequences` (deltasync/FORMAT.md 2.1): "runs" (one per run of nonzero bytes; level then
    sets only the entropy stage) or "zstd" (libzstd's match finder at level), anything else a
    ValueError; threads: 0 = all CPUs; frame_bytes: the piece size (large tensors are split so
    they decode in parallel); shard_bytes: shard object size.
    """
    if sequences not in ("runs", "zstd"):
        raise ValueError(f"sequences must be 'runs' or 'zstd', not {sequences!r}")
    xor_runs = sequences == "runs"
    is_dir = [isinstance(x, (str, os.PathLike)) for x in (parent, new)]
    if all(is_dir):
        d = _native.publish_dirs(os.fspath(parent), os.fspath(new), os.fspath(out),  # type: ignore[arg-type]
                                 parent_version or "", version or "", level, xor_runs,
                                 threads, frame_bytes, shard_bytes, include_checkpoint, progress)
    elif not any(is_dir):
        d = _native.publish_tensors(_entries(parent), _entries(new), os.fspath(out),  # type: ignore[arg-type]
                                    parent_version or "", version or "", level, xor_runs,
                                    threads, frame_bytes, shard_bytes, progress)
    else:
        raise TypeError("parent and new must both be directories or both be tensor mappings")
    return PublishSummary(**d)
