"""The ``computewatch`` command: one module per command group, one error path (``main``).

Only the parsers load at start; a command's own module loads when it runs
(:data:`computewatch.cli.main.COMMANDS`).
"""

from computewatch.cli.main import main
from computewatch.errors import PROG

__all__ = ["PROG", "main"]
