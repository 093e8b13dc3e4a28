"""Sources read hardware or the OS once per tick (DESIGN.md, step 1)."""

from computewatch.sources.base import Source, SourceUnavailable

__all__ = ["Source", "SourceUnavailable"]
