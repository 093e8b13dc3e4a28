"""The error contract: every exception class the package defines derives from ComputewatchError."""

from __future__ import annotations

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


def _exception_classes() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for name in _modules():
        if name in VENDOR_FAKES or name.endswith(".__main__"):  # __main__ runs the CLI
            continue
        if name.startswith("computewatch.serverdb.migrations"):  # Alembic runs these, with
            continue  # its context: not importable on their own
        try:
            module = importlib.import_module(name)
        except ImportError as e:  # an optional extra (torch, lightning ...) not installed here
            if e.name and not e.name.startswith("computewatch"):
                continue
            raise
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__.startswith("computewatch."):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [found[k] for k in sorted(found)]


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
