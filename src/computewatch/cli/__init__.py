"""The ``computewatch`` command: one module per command group, one error path (``main``)."""

from computewatch.cli.main import main

__all__ = ["main"]
