"""The root of every computewatch exception, and the exit status the command line gives each.

Every exception class of the package derives from :class:`ComputewatchError` (a contract test
walks the package), keeping its other bases (``ValueError`` ...) so existing ``except`` clauses
still match. The CLI turns one into ``computewatch: <message>`` on standard error and its
``exit_code``: 1 for a failure (sysexits' convention is not used; 1 is what the CLI always
gave), 2 for a usage error, as argparse gives for a bad flag.
"""

from __future__ import annotations

__all__ = ["PROG", "ComputewatchError", "UsageError"]

PROG = "computewatch"
"""The command's name, as every message of the CLI starts."""


class ComputewatchError(Exception):
    """A problem computewatch can name in one line; ``exit_code`` is the CLI's status for it."""

    exit_code: int = 1

    def __init__(self, *args: object, exit_code: int | None = None) -> None:
        super().__init__(*args)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(ComputewatchError):
    """A bad flag, option or configuration the user gave: exit status 2, as argparse's."""

    exit_code = 2
