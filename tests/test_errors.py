"""The error contract: every exception class the package defines derives from ComputewatchError."""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil

import pytest

import computewatch
from computewatch.errors import ComputewatchError, UsageError

# The fakes stand in for vendor SDKs (pynvml, amdsmi) and must behave as theirs do: those classes
# derive from Exception only, so a `except ComputewatchError` can never catch a vendor error in a
# test that it would miss with the real library.
VENDOR_FAKES = {
    "computewatch.testing.fake_nvml",
    "computewatch.testing.fake_amdsmi",
}


def _modules() -> list[str]:
    names = [computewatch.__name__]
    for info in pkgutil.walk_packages(computewatch.__path__, prefix="computewatch."):
        names.append(info.name)
    return sorted(names)


def _missing_dependency(e: BaseException | None) -> str | None:
    """The third-party module whose absence caused ``e``, directly or as the cause of the
    package's own message ("needs PyTorch Lightning: pip install ..."); None for any other
    import error, which is a bug to report."""
    while e is not None:
        name = getattr(e, "name", None) if isinstance(e, ImportError) else None
        if name and not name.startswith("computewatch"):
            return str(name)
        e = e.__cause__
    return None


@functools.cache
def _walk() -> tuple[list[type[BaseException]], dict[str, str]]:
    """The package's exception classes, and the modules that could not be imported because an
    optional extra (torch, lightning ...) is missing, each with the missing module's name."""
    found: dict[str, type[BaseException]] = {}
    missing: dict[str, str] = {}
    for name in _modules():
        if name in VENDOR_FAKES or name.endswith(".__main__"):  # __main__ runs the CLI
            continue
        if name.startswith("computewatch.serverdb.migrations"):  # Alembic runs these, with
            continue  # its context: not importable on their own
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            dep = _missing_dependency(e)
            if dep is None:
                raise
            missing[name] = dep  # test_every_module_is_checked says so
            continue
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__.startswith("computewatch."):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [found[k] for k in sorted(found)], missing


def _exception_classes() -> list[type[BaseException]]:
    return _walk()[0]


def test_every_module_is_checked() -> None:
    """A module whose optional extra is missing cannot be checked: a skip, which a developer's
    partial environment may take and which fails under CI=true (tests/conftest.py), where every
    extra is installed."""
    missing = _walk()[1]
    if missing:
        pytest.skip(
            "not checked, an optional extra is missing: "
            + ", ".join(f"{m} (no {dep})" for m, dep in sorted(missing.items()))
        )


def test_the_walk_finds_the_package_exceptions() -> None:
    names = {c.__name__ for c in _exception_classes()}
    assert {"StoreError", "ConfigError", "CommandNotStarted", "AlertsError"} <= names


@pytest.mark.parametrize("cls", _exception_classes(), ids=lambda c: c.__qualname__)
def test_every_exception_derives_from_computewatch_error(cls: type[BaseException]) -> None:
    assert issubclass(cls, ComputewatchError), f"{cls.__module__}.{cls.__qualname__}"


def test_value_errors_stay_value_errors() -> None:
    from computewatch.alerts.rules import AlertsError
    from computewatch.config import ConfigError
    from computewatch.sources.gpus import GpuBackendError

    for cls in (AlertsError, ConfigError, GpuBackendError):
        assert issubclass(cls, ValueError)


def test_exit_codes() -> None:
    assert ComputewatchError("x").exit_code == 1
    assert UsageError("x").exit_code == 2
    assert ComputewatchError("x", exit_code=3).exit_code == 3
    assert str(UsageError("bad flag")) == "bad flag"
    from computewatch.sampling.supervisor import CommandNotStarted

    assert CommandNotStarted("not found", 127).exit_code == 127
