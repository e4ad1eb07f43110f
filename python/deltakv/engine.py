"""The engine handle: serve deltakv syncs on the engine's own weight memory.

    import deltakv
    e = deltakv.Engine(shm_name="deltakv", rank=0, world_size=1, initial_version="v1")
    for name, tensor in model.state_dict().items():   # numpy or __dlpack__ tensors, in place
        e.register_tensor(name, tensor)
    e.set_callbacks(pause=scheduler.pause, resume=scheduler.resume)
    e.start()                                        # or poll_mode=True and e.poll() per step

The background thread stages each sync and, once the sidecar decides COMMIT, calls pause,
writes the new bytes into the registered tensors, calls derived(name, regions) per changed
tensor (regions: a new numpy uint64 array of shape (n, 2), one (offset, length) row per written
region of the tensor's local bytes: every changed byte, and maybe unchanged ones, since changes
at most 32 bytes apart are written as one region and a tensor below 4096 canonical bytes is
written whole; adjacent regions merged), bumps policy_version and calls
resume. A callback that raises or returns a false value (False, numpy's False, 0) fails the
commit (see deltakv.h for what the handle then reports); None or a true value is success.
Callbacks run on the handle's thread with the GIL held; in poll mode the commit, and with it
the derived callback, runs in poll() on its caller's thread, and pause/resume are not called
(the caller's scheduler is already paused while it polls). close() drops the callbacks.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

from . import _native

__all__ = ["Engine"]


class Engine(_native.Engine):
    """deltakv.h's engine handle. States: created, attached, staging, staged, committing,
    verifying, diverged, stopped."""

    def register_tensors(self, tensors: Mapping[str, Any],
                         layouts: Optional[Mapping[str, str]] = None) -> None:
        """Registers every tensor of a mapping (name -> array); `layouts` gives the layout
        JSON of sharded ones (absent = replicated)."""
        for name, t in tensors.items():
            self.register_tensor(name, t, layout_json=(layouts or {}).get(name))

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
