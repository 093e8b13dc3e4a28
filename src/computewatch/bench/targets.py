"""``module:function`` targets: import one, call it, and check what it returns, with errors that
name the target (a failed import, an exception, a result of the wrong length)."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from computewatch.bench.records import TargetError

__all__ = ["check_batch_result", "describe", "load_target", "parse_target"]


def describe(e: BaseException) -> str:
    """``ValueError: message``, or the type alone when the message is empty."""
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def parse_target(text: str) -> tuple[str, str]:
    """``"pkg.mod:func"`` → ``("pkg.mod", "func")``; a TargetError for anything else."""
    module, sep, name = text.partition(":")
    ok_module = all(part.isidentifier() for part in module.split("."))
    ok_name = all(part.isidentifier() for part in name.split("."))
    if not sep or not module or not name or not ok_module or not ok_name:
        raise TargetError(f"target {text!r}: expected MODULE:FUNCTION, such as mymodels:predict")
    return module, name


def load_target(text: str) -> Callable[..., Any]:
    """Import ``module:function`` (the current directory first on the path, as ``python -m``
    does) and return the callable; a TargetError naming it when that fails."""
    module_name, attr = parse_target(text)
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(module_name)
    except BaseException as e:  # an import runs user code: anything may come out of it
        if isinstance(e, KeyboardInterrupt):
            raise
        raise TargetError(
            f"target {text!r}: cannot import {module_name!r}: {describe(e)}"
        ) from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TargetError(f"target {text!r}: {module_name!r} has no {attr!r}") from None
    if not callable(obj):
        raise TargetError(f"target {text!r}: {attr!r} is a {type(obj).__name__}, not callable")
    return obj  # type: ignore[no-any-return]  # a user's callable: what it returns is theirs


def check_batch_result(target: str, batch: Sequence[Any], result: object) -> None:
    """A batch function must answer each query of its batch: a result with one entry per query
    (a list, a tuple, an array or tensor whose first dimension is the batch)."""
    try:
        n = len(result)  # type: ignore[arg-type]  # checked by the call itself
    except TypeError:
        raise TargetError(
            f"target {target!r} returned {type(result).__name__}, not one result per query "
            f"(a sequence of {len(batch)})"
        ) from None
    if n != len(batch):
        raise TargetError(
            f"target {target!r} returned {n} result(s) for a batch of {len(batch)} queries"
        )
