"""``computewatch server`` as its users start it: tokens through the CLI (create, list --json,
revoke), HTTPS on a non-loopback address with a Secure session cookie, and plain HTTP there
only with --allow-insecure-listen."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

RUNS = "/api/v1/runs"


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "computewatch", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, COMPUTEWATCH_HOME=str(home)),
        check=False,
    )


@pytest.mark.slow
def test_token_create_list_revoke(server: Callable[..., Any]) -> None:
    s = server()
    token = s.token("ml", "read", name="dashboard")
    assert token.startswith("cw_") and len(token) > 40
    assert s.client(token).get(RUNS).status_code == 200
    r = _cli(s.home, "server", "token", "list", "--json", "--db", s.db_url)
    assert r.returncode == 0, r.stderr
    (doc,) = json.loads(r.stdout)
    assert set(doc) == {"id", "name", "team", "scope", "created_at", "last_used_at", "revoked_at"}
    assert (doc["team"], doc["scope"], doc["name"], doc["revoked_at"]) == (
        "ml", "read", "dashboard", None,
    )  # fmt: skip
    assert doc["last_used_at"] is not None
    assert token not in r.stdout and token[3:] not in r.stdout
    r = _cli(s.home, "server", "--db", s.db_url, "token", "revoke", str(doc["id"]))
    assert r.returncode == 0, r.stderr
    assert s.client(token).get(RUNS).status_code == 401
    r = _cli(s.home, "server", "token", "list", "--db", s.db_url)
    assert "dashboard" in r.stdout and "yes" in r.stdout


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_https_on_a_non_loopback_address(
    server: Callable[..., Any], self_signed: Callable[[], tuple[Path, Path]]
) -> None:
    s = server(tls=self_signed(), host="0.0.0.0")
    assert s.url.startswith("https://")
    token = s.token("ml", "read")
    c = s.client()
    assert c.get(RUNS).status_code == 401
    r = c.post("/login", data={"token": token}, follow_redirects=False)
    assert r.status_code == 303
    assert "Secure" in r.headers["set-cookie"]
    assert c.get(RUNS).status_code == 200


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_plain_http_on_a_non_loopback_address_needs_the_flag(server: Callable[..., Any]) -> None:
    s = server(args=["--allow-insecure-listen"], host="0.0.0.0")
    assert s.client().get("/healthz").status_code == 200
