"""The contract every source implements (docs/architecture.md, "Sampling")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from computewatch.errors import ComputewatchError
from computewatch.readings import Reading


class SourceUnavailable(ComputewatchError):
    """Raised by a source's constructor when it cannot run here; the message says why."""


@runtime_checkable
class Source(Protocol):
    """Reads hardware or the OS once per tick.

    A source is constructed with its roots and handles as parameters (``procfs_root``,
    ``nvml=``) and raises :class:`SourceUnavailable` from its constructor when it cannot work
    here. ``read()`` returns every reading of one tick; it may raise any ``Exception``, which the
    sampler reports once and then skips that source.
    """

    name: str

    def read(self) -> Sequence[Reading]: ...

    def close(self) -> None: ...
