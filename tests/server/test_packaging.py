"""The ``server`` extra is enough to run the server: a fresh virtual environment with the package
and that extra only (no ``test`` extra, nothing else from this checkout's environment) starts
``computewatch server``, answers ``/healthz``, the dashboard, an upload and a read, and
``computewatch server token create`` makes a token.

The package is installed from a copy of this checkout's ``pyproject.toml``, ``README.md`` and
``src/`` (so the build leaves nothing in the working tree), with pip's own configuration and
cache: the wheels come from the package registry pip is configured with (or its cache).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
from tests.conftest import free_loopback_port
from tests.server.conftest import batch, synthetic_upload

from computewatch import jsonout

ROOT = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT = 900.0
START_TIMEOUT = 120.0


def _clean_env(home: Path) -> dict[str, str]:
    """The environment of a user who installed the package: no PYTHONPATH onto this checkout,
    no run of ours around it, a home of its own."""
    env = dict(os.environ)
    for k in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "COMPUTEWATCH_RUN_ID",
              "COMPUTEWATCH_SPOOL", "COMPUTEWATCH_DB", "COMPUTEWATCH_SERVER",
              "COMPUTEWATCH_TOKEN"):  # fmt: skip
        env.pop(k, None)
    env["COMPUTEWATCH_HOME"] = str(home)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _source_copy(dest: Path) -> Path:
    """What an sdist holds: pyproject.toml, README.md (the long description) and src/."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(
        ROOT / "src",
        dest / "src",
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"),
    )
    return dest


def _venv_with_server_extra(tmp: Path, env: dict[str, str]) -> Path:
    """A fresh virtual environment with ``computewatch[server]`` installed: its bin/."""
    src = _source_copy(tmp / "src-copy")
    venv = tmp / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=300, env=env)
    r = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"{src}[server]"],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
        env=env,
        cwd=tmp,
        check=False,
    )
    assert r.returncode == 0, f"pip install .[server]: {r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return venv / "bin"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.slow
@pytest.mark.timeout(INSTALL_TIMEOUT + 300)
def test_server_extra_runs_the_server_and_its_token_commands(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = _clean_env(home)
    bin_dir = _venv_with_server_extra(tmp_path, env)
    cw = str(bin_dir / "computewatch")

    # the token first, on the default database ($COMPUTEWATCH_HOME/server.db): it migrates it
    r = subprocess.run(
        [cw, "server", "token", "create", "--team", "ml", "--scope", "ingest"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0, f"server token create: exit {r.returncode}\n{r.stderr}"
    ingest_token = r.stdout.strip()
    assert ingest_token and "\n" not in ingest_token, r.stdout

    port = free_loopback_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [cw, "server", "--listen", f"127.0.0.1:{port}"],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT
        healthy = False
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                healthy = httpx.get(f"{url}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                pass
            if healthy:
                break
            time.sleep(0.2)
        assert healthy, f"server exit {proc.poll()}, not healthy:\n{log.read_text()[-3000:]}"

        # the token commands against the running server's database
        r = subprocess.run(
            [cw, "server", "token", "create", "--team", "ml", "--scope", "admin"],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False,
        )  # fmt: skip
        assert r.returncode == 0, f"server token create: exit {r.returncode}\n{r.stderr}"
        admin = r.stdout.strip()
        r = subprocess.run(
            [cw, "server", "token", "list", "--json"],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert {t["scope"] for t in json.loads(r.stdout)} == {"ingest", "admin"}

        # an upload, a read and the dashboard: the imports behind each are installed
        run_id = uuid.uuid4().hex
        with httpx.Client(base_url=url, timeout=60) as c:
            up = c.post(
                "/api/v1/runs",
                content=jsonout.dumps(batch(synthetic_upload(run_id))).encode(),
                headers={"Authorization": f"Bearer {ingest_token}",
                         "Content-Type": "application/json"},
            )  # fmt: skip
            assert up.status_code == 200, up.text
            auth = {"Authorization": f"Bearer {admin}"}
            got = c.get(f"/api/v1/runs/{run_id}", headers=auth)
            assert got.status_code == 200, got.text
            me = c.get("/api/v1/me", headers=auth)
            assert me.status_code == 200, me.text
            page = c.get("/runs", headers=auth)
            assert page.status_code == 200, page.text[:2000]
            login = c.post("/login", data={"token": admin})  # a form: python-multipart
            assert login.status_code == 303, login.text[:2000]
        assert proc.poll() is None, log.read_text()[-3000:]
    finally:
        _stop(proc)
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
