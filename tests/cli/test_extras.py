"""A missing optional dependency is one line naming the extra to install, exit 1 (not an
internal error); the table behind it matches pyproject.toml and the installed distributions;
``all`` installs every extra but the frameworks' callbacks.

The child processes hide a module with a ``sitecustomize`` that puts None in ``sys.modules``
for each name in ``CW_HIDE`` (the import then fails as an uninstalled one does)."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from computewatch.cli.extras import COMMAND_EXTRAS, OPTIONAL_MODULES, missing_extra_message

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
EXTRAS: dict[str, list[str]] = PYPROJECT["project"]["optional-dependencies"]
FRAMEWORKS = {"lightning", "huggingface", "keras"}
TOOLS = {"test", "benchmarks"}


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~\[;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _extra_distributions(extra: str) -> set[str]:
    """The distributions an extra installs, with what they require in turn (installed ones)."""
    todo = [_name(r) for r in EXTRAS[extra]]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        todo += [_name(r) for r in requires if "extra ==" not in r]
    return seen


def test_every_row_is_installed_by_the_extras_it_names() -> None:
    providers = importlib.metadata.packages_distributions()
    for module, dep in OPTIONAL_MODULES.items():
        assert dep.extras, module
        for extra in dep.extras:
            assert extra in EXTRAS, f"{module}: no extra {extra!r} in pyproject.toml"
        dists = {d.lower().replace("_", "-") for d in providers.get(module, [])}
        assert dists, f"{module} is not installed by any distribution here"
        wanted = set().union(*(_extra_distributions(e) for e in dep.extras))
        assert dists & wanted, (module, dists, sorted(wanted))


def test_all_is_every_extra_but_the_frameworks_and_tools() -> None:
    (self_ref,) = EXTRAS["all"]
    m = re.fullmatch(r"computewatch\[([a-z,]+)\]", self_ref)
    assert m, self_ref
    assert set(m.group(1).split(",")) == set(EXTRAS) - FRAMEWORKS - TOOLS - {"all"}


def test_a_command_prefers_its_own_extra() -> None:
    e = ModuleNotFoundError("No module named 'cryptography'", name="cryptography")
    assert "computewatch[server]" in (missing_extra_message(e, "server") or "")
    assert "computewatch[governance]" in (missing_extra_message(e, "ledger") or "")
    assert set(COMMAND_EXTRAS.values()) <= set(EXTRAS)


def test_a_module_that_is_no_optional_dependency_is_left_to_the_bug_report() -> None:
    e = ModuleNotFoundError("No module named 'computewatch.nothing'", name="computewatch.nothing")
    assert missing_extra_message(e, "run") is None
    assert missing_extra_message(ModuleNotFoundError("x"), "run") is None


@pytest.fixture
def hiding(tmp_path: Path) -> Path:
    site = tmp_path / "hide"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os, sys\n"
        "for _n in filter(None, os.environ.get('CW_HIDE', '').split(',')):\n"
        "    sys.modules[_n] = None\n"
    )
    return site


@pytest.mark.parametrize(
    ("hidden", "args", "extra"),
    [
        ("sqlalchemy", ["server", "--listen", "127.0.0.1:1"], "server"),
        ("fastapi", ["server", "--listen", "127.0.0.1:1"], "server"),
        ("tpu_info", ["devices", "--gpu-backend", "fake:4xTPU-v5e"], "tpu"),
    ],
)
def test_a_missing_extra_is_one_line_and_exit_1(
    hiding: Path, tmp_path: Path, hidden: str, args: list[str], extra: str
) -> None:
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join([str(hiding), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        CW_HIDE=hidden,
        COMPUTEWATCH_HOME=str(tmp_path / "home"),
    )
    env.pop("COMPUTEWATCH_DEBUG", None)
    r = subprocess.run(
        [sys.executable, "-m", "computewatch", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert r.returncode == 1, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert f"pip install 'computewatch[{extra}]'" in lines[0]
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr
