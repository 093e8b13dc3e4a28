"""Sources read hardware or the OS once per tick (docs/architecture.md, "Sampling")."""

from computewatch.sources.base import Source, SourceUnavailable

__all__ = ["Source", "SourceUnavailable"]
