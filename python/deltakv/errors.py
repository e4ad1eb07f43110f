"""Exceptions of the deltakv package.

Every failure of the C library raises a DeltakvError subclass that carries the C status code
(`status`, as in deltakv_base.h), its name (`status_name`) and the library's message. Classes
that match a Python built-in also derive from it (InvalidArgumentError is a ValueError,
NotFoundError a LookupError, IoError an OSError, UnimplementedError a NotImplementedError).
"""
from __future__ import annotations

from typing import Dict, NoReturn, Type

__all__ = [
    "DeltakvError", "InvalidArgumentError", "NotFoundError", "DataLossError",
    "FailedPreconditionError", "ResourceExhaustedError", "IoError", "UnimplementedError",
    "InternalError",
]

_NAMES = ["OK", "INVALID_ARGUMENT", "NOT_FOUND", "DATA_LOSS", "FAILED_PRECONDITION",
          "RESOURCE_EXHAUSTED", "IO_ERROR", "UNIMPLEMENTED", "INTERNAL"]


class DeltakvError(Exception):
    """A failed deltakv call: `status` (int), `status_name` (str) and `message` (str)."""

    status: int = 8

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status
        self.message = message

    @property
    def status_name(self) -> str:
        return _NAMES[self.status] if 0 <= self.status < len(_NAMES) else "UNKNOWN"

    def __str__(self) -> str:
        return f"{self.status_name}: {self.message}"


class InvalidArgumentError(DeltakvError, ValueError):
    status = 1


class NotFoundError(DeltakvError, LookupError):
    status = 2


class DataLossError(DeltakvError):
    status = 3


class FailedPreconditionError(DeltakvError):
    status = 4


class ResourceExhaustedError(DeltakvError):
    status = 5


class IoError(DeltakvError, OSError):
    status = 6


class UnimplementedError(DeltakvError, NotImplementedError):
    status = 7


class InternalError(DeltakvError):
    status = 8


_BY_STATUS: Dict[int, Type[DeltakvError]] = {
    c.status: c for c in (InvalidArgumentError, NotFoundError, DataLossError,
                          FailedPreconditionError, ResourceExhaustedError, IoError,
                          UnimplementedError, InternalError)
}


def error_for(status: int, message: str) -> DeltakvError:
    """The exception for a C status code and message."""
    cls = _BY_STATUS.get(status)
    return cls(message) if cls is not None else DeltakvError(message, status)


def _raise(status: int, message: str) -> NoReturn:
    # Called by the native module.
    raise error_for(status, message)
