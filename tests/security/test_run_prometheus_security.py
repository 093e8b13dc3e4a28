"""``computewatch run --prometheus`` follows the agent's rules: loopback by default, a bearer
token and TLS from files only their owner can read, a warning for an open address."""

from __future__ import annotations

import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow


def get(url: str, token: str | None = None, ctx: ssl.SSLContext | None = None) -> tuple[int, str]:
    """(status, body) of a GET; an HTTP error status is returned, not raised."""
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def private_file(path: Path, text: str) -> Path:
    """Write ``path`` with mode 0600 (what a token file must have)."""
    path.write_text(text)
    path.chmod(0o600)
    return path


WAIT = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"


def start_run(cw: Any, tmp_path: Path, *flags: str) -> tuple[Any, Path]:
    """A run whose command waits until the returned file exists."""
    go = tmp_path / "go"
    script = tmp_path / "wait.py"
    script.write_text(WAIT)
    proc = cw.popen(
        "run", "--quiet", "--interval", "0.2", *flags, "--", sys.executable, script, go
    )  # fmt: skip
    return proc, go


def finish(proc: Any, go: Path) -> str:
    go.touch()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return str(err)


def wait_metrics(
    cw: Any, proc: Any, url: str, token: str | None = None, ctx: ssl.SSLContext | None = None
) -> str:
    def scraped() -> str | None:
        if proc.poll() is not None:
            pytest.fail(f"run exited {proc.returncode}: {proc.stderr.read()}")
        try:
            status, body = get(url, token=token, ctx=ctx)
        except OSError:
            return None
        return body if status == 200 and "computewatch_job_cpu_seconds_total" in body else None

    return str(cw.wait_for(scraped, timeout=60, what="/metrics"))


def test_bare_port_is_loopback_and_token_is_required(
    cw: Any, tmp_path: Path, free_port: Callable[[], int]
) -> None:
    token = "run-token-42"
    tf = private_file(tmp_path / "token", token + "\n")
    port = free_port()
    proc, go = start_run(
        cw, tmp_path, "--prometheus", str(port), "--prometheus-token-file", str(tf)
    )
    url = f"http://127.0.0.1:{port}/metrics"
    wait_metrics(cw, proc, url, token=token)
    assert get(url)[0] == 401
    assert get(url, token="wrong")[0] == 401
    assert get(f"http://127.0.0.1:{port}/healthz")[0] in (200, 503)  # no token needed
    err = finish(proc, go)
    assert "warning" not in err


def test_tls(
    cw: Any,
    tmp_path: Path,
    free_port: Callable[[], int],
    self_signed: Callable[[], tuple[Path, Path]],
) -> None:
    cert, key = self_signed()
    port = free_port()
    proc, go = start_run(
        cw, tmp_path, "--prometheus", f"127.0.0.1:{port}",
        "--prometheus-tls-cert", str(cert), "--prometheus-tls-key", str(key),
    )  # fmt: skip
    ctx = ssl.create_default_context(cafile=str(cert))
    wait_metrics(cw, proc, f"https://127.0.0.1:{port}/metrics", ctx=ctx)
    with pytest.raises(OSError):  # plain HTTP on the TLS port gets no metrics
        get(f"http://127.0.0.1:{port}/metrics")
    finish(proc, go)


def test_open_address_without_token_is_warned(
    cw: Any, tmp_path: Path, free_port: Callable[[], int]
) -> None:
    port = free_port()
    proc, go = start_run(cw, tmp_path, "--prometheus", f"0.0.0.0:{port}")
    wait_metrics(cw, proc, f"http://127.0.0.1:{port}/metrics")
    err = finish(proc, go)
    assert "warning" in err and "without a token" in err and "--prometheus-token-file" in err


@pytest.mark.parametrize("bad_mode", [0o644, 0o660, 0o602])
def test_shared_token_or_key_file_is_refused(
    cw: Any,
    tmp_path: Path,
    bad_mode: int,
    self_signed: Callable[[], tuple[Path, Path]],
) -> None:
    marker = tmp_path / "ran"
    tf = private_file(tmp_path / "token", "t\n")
    tf.chmod(bad_mode)
    r = cw(
        "run", "--prometheus", "0", "--prometheus-token-file", tf,
        "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')",
    )  # fmt: skip
    assert r.returncode == 2 and not marker.exists()
    assert f"chmod 600 {tf}" in r.stderr and r.stderr.count("\n") == 1
    cert, key = self_signed()
    key.chmod(bad_mode)
    r = cw(
        "run", "--prometheus", "0", "--prometheus-tls-cert", cert, "--prometheus-tls-key", key,
        "--", sys.executable, "-c", "pass",
    )  # fmt: skip
    assert r.returncode == 2 and f"chmod 600 {key}" in r.stderr


def test_security_flags_need_prometheus(cw: Any, tmp_path: Path) -> None:
    tf = private_file(tmp_path / "token", "t\n")
    r = cw("run", "--prometheus-token-file", tf, "--", sys.executable, "-c", "pass")
    assert r.returncode == 2 and "need --prometheus" in r.stderr
