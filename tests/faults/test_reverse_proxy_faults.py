"""Faults of the reverse-proxy set-ups of docs/server.md (tests/server/proxies.py):

- the server down behind a running nginx or Caddy: ``push`` exits 1 with one line naming the
  proxy's answer (502), the run stays local, and the next push once the server is back stores it
  once;
- a bad ``--forwarded-allow-ips``: one line, exit status 2, never a traceback.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import CLI
from tests.server.conftest import ServerProcess
from tests.server.proxies import PROXIES, Pki, Proxy, make_pki

PY = sys.executable


@pytest.fixture
def behind_proxy(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[ServerProcess, Proxy, Pki]]:
    s = ServerProcess(f"sqlite:///{tmp_path / 'server.db'}", tmp_path / "server-home")
    pki = make_pki(tmp_path / "pki")
    try:
        proxy = PROXIES[request.param](tmp_path / request.param, pki, s.port)
    except BaseException:
        s.close()
        raise
    try:
        yield s, proxy, pki
    finally:
        proxy.stop()
        s.close()


@pytest.mark.slow
@pytest.mark.parametrize("behind_proxy", sorted(PROXIES), indirect=True)
def test_push_while_the_server_behind_the_proxy_is_down(
    behind_proxy: tuple[ServerProcess, Proxy, Pki], cw: CLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    s, proxy, pki = behind_proxy
    token = s.token("ml", "ingest")
    cw.ok("run", "--quiet", "--name", "waiting", "--", PY, "-c", "pass")
    run_id = cw.json("runs")[0]["id"]
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca))
    monkeypatch.setenv("COMPUTEWATCH_TOKEN", token)
    s.stop()
    r = cw("push", "--server", proxy.url)
    assert r.returncode == 1, (r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"computewatch: the server at {proxy.url} failed (502)"), line
    assert "<" not in line  # the proxy's HTML error page is named, not pasted
    assert line.endswith("1 run(s) not sent stay in the local store for the next push"), line
    assert token not in r.stdout + r.stderr
    s.start()
    doc = json.loads(cw.ok("push", "--server", proxy.url, "--json").stdout)
    assert doc["stored"] == [run_id] and doc["error"] is None
    again = json.loads(cw.ok("push", "--all", "--server", proxy.url, "--json").stdout)
    assert again["stored"] == [] and again["already"] == [run_id]


@pytest.mark.parametrize(
    "value", ["proxy.example.org", "127.0.0.1,*", "10.0.0.0/33", "127.0.0.1;10.0.0.1"]
)
def test_a_bad_forwarded_allow_ips_is_one_line(cw: CLI, tmp_path: Path, value: str) -> None:
    r = cw("server", "--db", f"sqlite:///{tmp_path / 's.db'}", "--forwarded-allow-ips", value)
    assert r.returncode == 2, (r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("computewatch: --forwarded-allow-ips: "), line
    assert "is not an IP address or network" in line
    assert not (tmp_path / "s.db").exists()
