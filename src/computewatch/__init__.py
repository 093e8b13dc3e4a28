"""computewatch: what your ML compute is doing, per run.

The public API is what ``__all__`` lists; everything else is internal.
"""

from typing import TYPE_CHECKING, Any

from computewatch._version import __version__

if TYPE_CHECKING:
    from computewatch.tracking import Run, current_run, phase, step, track

__all__ = ["Run", "__version__", "current_run", "phase", "step", "track"]

_TRACKING = frozenset({"Run", "current_run", "phase", "step", "track"})


def __getattr__(name: str) -> Any:
    """``track`` and its kin load on first use (PEP 562): ``computewatch --version`` and every
    ``computewatch.x`` import skip the tracking module's ~25 ms of imports."""
    if name in _TRACKING:
        from computewatch import tracking  # on first use: start-up time

        value = getattr(tracking, name)
        globals()[name] = value  # later uses skip this hook (0.7 µs per computewatch.step())
        return value
    raise AttributeError(f"module 'computewatch' has no attribute {name!r}")
