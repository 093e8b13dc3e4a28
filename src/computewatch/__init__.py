"""computewatch: what your ML compute is doing, per run.

The public API is what ``__all__`` lists; everything else is internal.
"""

from computewatch._version import __version__
from computewatch.tracking import Run, current_run, phase, step, track

__all__ = ["Run", "__version__", "current_run", "phase", "step", "track"]
