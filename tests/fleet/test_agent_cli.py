"""``computewatch agent`` as a real child process with fake GPUs, scraped over HTTP(S)."""

from __future__ import annotations

import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

PRESET = "fake:2xH100-SXM"


def get(
    url: str, token: str | None = None, ctx: ssl.SSLContext | None = None, accept: str | None = None
) -> tuple[int, str, str]:
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if accept:
        req.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def start_agent(cw: Any, port: int, *extra: str) -> Any:
    return cw.popen(
        "agent",
        "--listen",
        f"127.0.0.1:{port}",
        "--gpu-backend",
        PRESET,
        "--interval",
        "0.2",
        *extra,
    )


def wait_healthy(cw: Any, proc: Any, base: str, ctx: ssl.SSLContext | None = None) -> None:
    def ok() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"agent exited {proc.returncode}: {proc.stderr.read()}")
        try:
            return get(base + "/healthz", ctx=ctx)[0] == 200
        except OSError:
            return False

    cw.wait_for(ok, timeout=60, what="the agent's /healthz")


def stop(proc: Any) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return str(err)


def test_token_required_and_metrics_pass_promtool(
    cw: Any, tmp_path: Path, free_port: Callable[[], int], check_metrics: Callable[[str], None]
) -> None:
    token = "s3cret-token"
    (tmp_path / "token").write_text(token + "\n")
    (tmp_path / "token").chmod(0o600)  # one others can read is refused
    port = free_port()
    proc = start_agent(cw, port, "--token-file", str(tmp_path / "token"))
    base = f"http://127.0.0.1:{port}"
    wait_healthy(cw, proc, base)
    assert get(base + "/metrics")[0] == 401
    assert get(base + "/metrics", token="wrong")[0] == 401
    status, ctype, body = get(base + "/metrics", token=token)
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    assert "# TYPE computewatch_gpu_memory_total_bytes gauge" in body
    assert "# TYPE computewatch_gpu_energy_joules_total counter" in body
    lines = [
        ln for ln in body.splitlines() if ln.startswith("computewatch_gpu_memory_total_bytes{")
    ]
    assert len(lines) == 2 and all('simulated="true"' in ln for ln in lines)
    assert all('gpu_model="NVIDIA H100 80GB HBM3"' in ln for ln in lines)
    assert all(float(ln.rsplit(" ", 1)[1]) == 80 * 2**30 for ln in lines)
    # OpenMetrics on request
    status, ctype, om = get(
        base + "/metrics", token=token, accept="application/openmetrics-text; version=1.0.0"
    )
    assert status == 200 and ctype.startswith("application/openmetrics-text")
    assert om.rstrip().endswith("# EOF")
    assert "# TYPE computewatch_gpu_energy_joules counter" in om
    check_metrics(body)
    assert get(base + "/nothing", token=token)[0] == 404
    err = stop(proc)
    assert "warning" not in err
    with pytest.raises(OSError):
        get(base + "/healthz")  # the server is gone


def test_tls(
    cw: Any, free_port: Callable[[], int], self_signed: Callable[[], tuple[Path, Path]]
) -> None:
    cert, key = self_signed()
    port = free_port()
    proc = start_agent(cw, port, "--tls-cert", str(cert), "--tls-key", str(key))
    ctx = ssl.create_default_context(cafile=str(cert))
    base = f"https://127.0.0.1:{port}"
    wait_healthy(cw, proc, base, ctx)
    status, _, body = get(base + "/metrics", ctx=ctx)
    assert status == 200 and "computewatch_gpu_utilization_ratio{" in body
    with pytest.raises(OSError):  # plain HTTP on a TLS port gets no metrics
        get(f"http://127.0.0.1:{port}/metrics")
    stop(proc)


def test_non_loopback_without_token_warns(cw: Any, free_port: Callable[[], int]) -> None:
    port = free_port()
    proc = cw.popen(
        "agent", "--listen", f"0.0.0.0:{port}", "--gpu-backend", "none", "--interval", "0.2"
    )
    wait_healthy(cw, proc, f"http://127.0.0.1:{port}")
    err = stop(proc)
    assert "warning" in err and "without a token" in err


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ('[agent]\nlisten = "127.0.0.1:9464"\ninterval = -1\n', 3, "agent.interval = -1"),
        ("[agent]\nfrobnicate = 1\n", 2, "unknown key agent.frobnicate"),
        ('[agent]\ngpu_backend = "fake:9xNOPE"\n', 2, "gpu_backend"),
        ('[teams]\ndefault = ""\n\n[teams.users]\nalice = 3\n', 5, "teams.users.alice = 3"),
        ("[agent]\ninterval = 5\n[agent\n", 3, "not valid TOML"),
        ("[energy]\npue = 0.5\n", 2, "energy.pue"),
    ],
)
def test_malformed_config_exit_2_with_file_and_line(
    cw: Any, tmp_path: Path, text: str, line: int, reason: str
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    r = cw("agent", "--config", path, "--gpu-backend", "none", timeout=60)
    assert r.returncode == 2
    assert f"{path}:{line}:" in r.stderr and reason in r.stderr
    assert "Traceback" not in r.stderr


def test_bad_listen_and_token_file_are_one_line_errors(cw: Any, tmp_path: Path) -> None:
    r = cw("agent", "--listen", "nonsense", "--gpu-backend", "none")
    assert r.returncode == 2 and "HOST:PORT" in r.stderr and "Traceback" not in r.stderr
    r = cw("agent", "--token-file", tmp_path / "missing", "--gpu-backend", "none")
    assert r.returncode == 2 and "token file" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("bad_mode", [0o644, 0o640, 0o606])
def test_token_or_key_file_others_can_use_is_refused(
    cw: Any, tmp_path: Path, bad_mode: int, self_signed: Callable[[], tuple[Path, Path]]
) -> None:
    token = tmp_path / "token"
    token.write_text("t\n")
    token.chmod(bad_mode)
    r = cw("agent", "--token-file", token, "--gpu-backend", "none", "--once")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert f"chmod 600 {token}" in r.stderr and "Traceback" not in r.stderr
    cert, key = self_signed()
    key.chmod(bad_mode)
    r = cw("agent", "--tls-cert", cert, "--tls-key", key, "--gpu-backend", "none", "--once")
    assert r.returncode == 2 and f"chmod 600 {key}" in r.stderr


def test_exported_command_lines_are_redacted(cw: Any, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        "[agent]\nper_process = true\nexport_cmdline = true\ninterval = 0.2\n"
        '[privacy]\nredact = ["wandb_thing"]\n'
    )
    child = subprocess.Popen(
        [
            sys.executable, "-c", "import sys; sys.stdin.read()",
            "--password=hunter2", "--api-token", "SECRET123", "postgres://u:pw@h/db",
            "--wandb-thing=zebra",
        ],
        stdin=subprocess.PIPE,
    )  # fmt: skip
    try:
        r = cw(
            "agent", "--config", config, "--gpu-backend", "fake:1xH100-SXM",
            "--fake-gpu-pid", str(child.pid), "--once",
        )  # fmt: skip
    finally:
        child.communicate(input=b"", timeout=30)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if f'pid="{child.pid}"' in ln]
    assert lines and all("cmdline=" in ln for ln in lines)  # it is exported, redacted
    assert "--password=***" in lines[0] and "postgres://u:***@h/db" in lines[0]
    for secret in ("hunter2", "SECRET123", ":pw@", "zebra"):
        assert secret not in r.stdout
