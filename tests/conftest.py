"""Shared fixtures for the end-to-end tests.

Every test gets its own ``$COMPUTEWATCH_HOME`` under ``tmp_path``, so no test sees another's
runs. ``cw`` runs the real CLI as a child process (``python -m computewatch ...``), the way a
user would; ``make_script`` writes a small Python program for it to run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

PY = sys.executable
CW = [PY, "-m", "computewatch"]
TIMEOUT = 120.0  # a loaded 2-core CI machine can be slow to start interpreters


class CLI:
    """Runs ``computewatch`` as a real child process against one test's data home."""

    def __init__(self, home: Path, tmp: Path) -> None:
        self.home = home
        self.tmp = tmp
        self._popened: list[subprocess.Popen[str]] = []

    @property
    def db(self) -> Path:
        return self.home / "computewatch.db"

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env["COMPUTEWATCH_HOME"] = str(self.home)
        for k in ("COMPUTEWATCH_RUN_ID", "COMPUTEWATCH_SPOOL"):  # tests may run under cw itself
            env.pop(k, None)
        env.update(extra)
        return env

    def __call__(
        self,
        *args: str | os.PathLike[str],
        timeout: float = TIMEOUT,
        input: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CW, *map(str, args)],
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            env=self.env(),
            cwd=cwd or self.tmp,
            check=False,
        )

    def ok(self, *args: str | os.PathLike[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        """Run and require exit status 0, showing stderr when it is not."""
        r = self(*args, **kw)
        assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
        return r

    def json(self, *args: str | os.PathLike[str]) -> Any:
        """Run a read command with ``--json`` and parse what it prints."""
        return json.loads(self.ok(*args, "--json").stdout)

    def show(self, ref: str = "last") -> dict[str, Any]:
        summary: dict[str, Any] = self.json("show", ref)
        return summary

    def popen(self, *args: str | os.PathLike[str], **kw: Any) -> subprocess.Popen[str]:
        """Start ``computewatch`` without waiting; killed at teardown if still running."""
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        p = subprocess.Popen([*CW, *map(str, args)], text=True, env=self.env(), cwd=self.tmp, **kw)
        self._popened.append(p)
        return p

    @staticmethod
    def wait_for(pred: Callable[[], Any], timeout: float = 60.0, what: str = "condition") -> Any:
        """Poll ``pred`` until it returns something truthy; fail after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            v = pred()
            if v:
                return v
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
            time.sleep(0.05)

    @staticmethod
    def kill_pid_file(path: Path) -> None:
        """SIGKILL the process whose PID a test script wrote to ``path`` (orphans, at teardown)."""
        try:
            pid = int(path.read_text())
        except (OSError, ValueError):
            return
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def cleanup(self) -> None:
        for p in self._popened:
            if p.poll() is None:
                p.kill()
            try:
                p.communicate(timeout=10)
            except (subprocess.TimeoutExpired, ValueError):
                pass


@pytest.fixture(autouse=True)
def cw_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``$COMPUTEWATCH_HOME`` for this test (not created: the CLI must create it)."""
    home = tmp_path / "cwhome"
    monkeypatch.setenv("COMPUTEWATCH_HOME", str(home))
    monkeypatch.delenv("COMPUTEWATCH_RUN_ID", raising=False)
    monkeypatch.delenv("COMPUTEWATCH_SPOOL", raising=False)
    return home


@pytest.fixture
def cw(cw_home: Path, tmp_path: Path) -> Iterator[CLI]:
    cli = CLI(cw_home, tmp_path)
    yield cli
    cli.cleanup()


@pytest.fixture
def make_script(tmp_path: Path) -> Callable[[str, str], Path]:
    """``make_script("name.py", source)`` writes a dedented Python script under tmp_path."""

    def make(name: str, source: str) -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(source).lstrip())
        return path

    return make


@pytest.fixture(scope="session")
def cli_class() -> type[CLI]:
    """The runner class, for module-scoped fixtures that keep their own data home."""
    return CLI
