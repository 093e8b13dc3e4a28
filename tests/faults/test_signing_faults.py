"""A node key that cannot be used never costs the job: ``run`` keeps the command's exit status and
output, its live and final uploads go unsigned, and one line says so; ``push`` sends unsigned and
says so once. Also ``node-key`` with a bad key file: one line, no traceback."""

from __future__ import annotations

import gzip
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

PY = sys.executable
TOKEN = "cwt_signing-faults-token"
JOB = "import sys, time; time.sleep(1.5); print('out'); sys.exit(4)"


@pytest.fixture
def capturing() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """An ingest stand-in that stores every run it is sent and keeps what arrived."""
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            data = gzip.decompress(raw) if self.headers.get("Content-Encoding") else raw
            runs = json.loads(data)["runs"]
            seen.extend(runs)
            results = [{"id": r["id"], "seq": r["seq"], "stored": True} for r in runs]
            body = json.dumps({"protocol": 1, "results": results}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    http.daemon_threads = True
    t = threading.Thread(target=http.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{http.server_address[1]}", seen
    http.shutdown()
    http.server_close()


def _break_key(home: Path, how: str) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    key = home / "node-key.pem"
    if how == "directory":
        key.mkdir()  # read_bytes: IsADirectoryError, whoever runs the test (root included)
    else:
        key.write_bytes(b"\x00\xffnot a PEM key")
    return key


@pytest.mark.slow
@pytest.mark.parametrize("how", ["directory", "garbage"])
def test_run_with_an_unusable_node_key_uploads_unsigned(
    cw: Any,
    capturing: tuple[str, list[dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    url, seen = capturing
    key = _break_key(cw.home, how)
    monkeypatch.setenv("COMPUTEWATCH_SERVER", url)
    monkeypatch.setenv("COMPUTEWATCH_TOKEN", TOKEN)
    monkeypatch.setenv("COMPUTEWATCH_CONFIG", str(cw.tmp / "none.toml"))
    (cw.tmp / "none.toml").write_text("[server]\nstream_interval = 1\n")
    r = cw("run", "--quiet", "--", PY, "-c", JOB)
    assert (r.returncode, r.stdout) == (4, "out\n"), r.stderr
    assert "Traceback" not in r.stderr and TOKEN not in r.stderr
    lines = [x for x in r.stderr.splitlines() if "unsigned" in x]
    assert len(lines) == 1, r.stderr
    assert "node-key" in lines[0] and str(key) in lines[0]
    assert seen and seen[-1]["final"] and seen[-1]["exit_code"] == 4
    assert all("signed_report" not in x for x in seen)
    assert cw.show()["exit_code"] == 4
    # push: unsigned too, one note; the key file is left as it was
    pushed = cw("push", "--all", "--server", url, "--token", TOKEN)
    assert pushed.returncode == 0, pushed.stderr
    assert [x for x in pushed.stderr.splitlines() if "unsigned" in x] == [
        x for x in pushed.stderr.splitlines() if x.strip()
    ]
    assert pushed.stderr.count("unsigned") == 1
    assert key.is_dir() if how == "directory" else key.read_bytes().startswith(b"\x00")
    shown = cw("node-key")
    assert shown.returncode == 1 and "Traceback" not in shown.stderr
    assert len(shown.stderr.strip().splitlines()) == 1 and str(key) in shown.stderr


def test_sign_false_in_the_configuration_sends_no_report(
    cw: Any, capturing: tuple[str, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = capturing
    config = cw.tmp / "config.toml"
    config.write_text(f'[server]\nurl = "{url}"\nsign = false\n')
    monkeypatch.setenv("COMPUTEWATCH_CONFIG", str(config))
    cw.ok("run", "--quiet", "--", PY, "-c", "pass")
    pushed = cw.ok("push", "--all", "--token", TOKEN)
    assert "unsigned" not in pushed.stderr
    assert seen and all("signed_report" not in x for x in seen)
    assert not (cw.home / "node-key.pem").exists()
    bad = cw.tmp / "bad.toml"
    bad.write_text("[server]\nsign = 3\n")
    monkeypatch.setenv("COMPUTEWATCH_CONFIG", str(bad))
    r = cw("push", "--all", "--server", url, "--token", TOKEN)
    assert r.returncode == 2 and "sign" in r.stderr and "Traceback" not in r.stderr
