"""Uploads that go wrong never cost the job and never lose a run: a server that accepts the
connection and never answers, one that answers garbage or fails, settings that cannot work.
Each gives one line and a non-zero exit for ``push``; ``run`` keeps the command's status and
output and leaves the run in the local store for the next push. No token in any output."""

from __future__ import annotations

import gzip
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from tests.conftest import free_loopback_port

PY = sys.executable
TOKEN = "cwt_faults-token-abcdef"
JOB = "import sys; print('out'); sys.exit(4)"


@pytest.fixture
def silent_server() -> Iterator[str]:
    """Accepts connections (the kernel's backlog) and never reads nor answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield f"http://127.0.0.1:{s.getsockname()[1]}"
    s.close()


class _Answer:
    status = 200
    body = b""
    protocol = False
    received: ClassVar[list[str]] = []


@pytest.fixture
def answering() -> Iterator[tuple[str, type[_Answer]]]:
    """A server answering every POST with ``_Answer.status`` and ``_Answer.body``."""

    class Answer(_Answer):
        received: ClassVar[list[str]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            body = Answer.body
            if Answer.protocol:  # answer as a server: every run stored
                data = gzip.decompress(raw) if self.headers.get("Content-Encoding") else raw
                runs = json.loads(data)["runs"]
                Answer.received += [r["id"] for r in runs]
                results = [{"id": r["id"], "seq": r["seq"], "stored": True} for r in runs]
                body = json.dumps({"protocol": 1, "results": results}).encode()
            self.send_response(Answer.status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    http.daemon_threads = True
    t = threading.Thread(target=http.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{http.server_address[1]}", Answer
    http.shutdown()
    http.server_close()


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.slow
def test_run_with_a_server_that_never_answers(
    cw: Any, silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COMPUTEWATCH_SERVER", silent_server)
    monkeypatch.setenv("COMPUTEWATCH_TOKEN", TOKEN)
    r = cw("run", "--quiet", "--", PY, "-c", JOB)
    assert (r.returncode, r.stdout) == (4, "out\n"), r.stderr
    line = _one_line(r.stderr)
    assert "did not answer" in line and "computewatch push" in line
    assert TOKEN not in r.stderr
    assert cw.show()["exit_code"] == 4  # stored locally, waiting for push


GRANT_REFUSED = json.dumps({"error": "base_model_grant", "detail": "team lab has not granted it"})


@pytest.mark.slow
def test_push_to_a_failing_server_keeps_the_runs(
    cw: Any, answering: tuple[str, type[_Answer]]
) -> None:
    url, answer = answering
    cw.ok("run", "--quiet", "--", PY, "-c", "pass")
    for status, body, expected in [
        (500, b"<html>Internal Server Error</html>", "failed (500)"),
        (200, b"<html>a proxy's login page</html>", "without an ingest response"),
        (200, b'{"results": [{"id": 1}]}', "without an ingest response"),
        (422, json.dumps({"detail": f"bad field (token {TOKEN})"}).encode(), "bad field"),
        (401, b"", "refused the token (401)"),
        (403, b"", "an ingest token is needed"),
        (403, GRANT_REFUSED.encode(), "refused the run's model (403): team lab"),
    ]:
        answer.status, answer.body = status, body
        r = cw("push", "--server", url, "--token", TOKEN)
        assert r.returncode == 1, (status, r.stderr)
        line = _one_line(r.stderr)
        assert expected in line and "stay in the local store" in line, line
        assert TOKEN not in r.stdout + r.stderr
    answer.status = 200
    run_id = cw.json("runs")[0]["id"]
    answer.body = json.dumps(
        {"protocol": 1, "results": [{"id": run_id, "seq": 1, "stored": True}]}
    ).encode()
    assert cw.ok("push", "--server", url, "--token", TOKEN).stdout.endswith("1 sent\n")


def test_push_to_nothing_listening(cw: Any) -> None:
    cw.ok("run", "--quiet", "--", PY, "-c", "pass")
    port = free_loopback_port()
    r = cw("push", "--server", f"http://127.0.0.1:{port}", "--token", TOKEN)
    assert r.returncode == 1
    line = _one_line(r.stderr)
    assert line.startswith(f"computewatch: cannot reach the server at http://127.0.0.1:{port}")
    assert TOKEN not in r.stdout + r.stderr


def test_push_settings_that_cannot_work(cw: Any, tmp_path: Path) -> None:
    cw.ok("run", "--quiet", "--", PY, "-c", "pass")
    r = cw("push")
    assert r.returncode == 2 and "no server to push to" in _one_line(r.stderr)
    r = cw("push", "--server", "ftp://x")
    assert r.returncode == 2 and "not an http or https URL" in _one_line(r.stderr)
    config = tmp_path / "config.toml"
    config.write_text('[server]\nurl = "http://127.0.0.1:9"\ntoken_file = "missing-token"\n')
    r = cw("push", "--config", config)
    assert r.returncode == 2
    assert "token_file: cannot read" in _one_line(r.stderr)
    config.write_text(f'[server]\nurl = "http://127.0.0.1:9"\ntoken = {len(TOKEN)}\n')
    r = cw("push", "--config", config)
    assert r.returncode == 2 and "value not shown" in _one_line(r.stderr)
    r = cw("push", "--all", "last")
    assert r.returncode == 2


def test_a_bad_token_file_does_not_stop_the_job(cw: Any, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[server]\nurl = "http://127.0.0.1:9"\ntoken_file = "missing-token"\n')
    r = cw("run", "--quiet", "--config", config, "--", PY, "-c", JOB)
    assert (r.returncode, r.stdout) == (4, "out\n")
    assert "not uploading: [server] token_file: cannot read" in _one_line(r.stderr)


def test_no_server_configured_loads_no_upload_code(cw: Any, tmp_path: Path) -> None:
    """A run without a server pays nothing for uploads: the upload package is never imported
    (python -X importtime lists every module the supervisor imports)."""
    env = cw.env()
    env.pop("COMPUTEWATCH_SERVER", None)
    r = subprocess.run(
        [PY, "-X", "importtime", "-m", "computewatch", "run", "--quiet", "--", PY, "-c", "pass"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert "computewatch.sampling.supervisor" in r.stderr  # importtime did list the modules
    assert "computewatch.upload" not in r.stderr


@pytest.mark.slow
def test_a_run_left_to_the_spool_is_pushed_later(
    cw: Any,
    tmp_path: Path,
    answering: tuple[str, type[_Answer]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The store locked by another process while a job runs: the run waits in the spool, so
    nothing can be streamed; the end says it waits for push, and push (once the lock is gone)
    stores it and sends it with the others."""
    from tests.faults.test_store_locked import Lock

    url, answer = answering
    answer.protocol = True
    cw.ok("run", "--quiet", "--", PY, "-c", "pass")
    monkeypatch.setenv("COMPUTEWATCH_SERVER", url)
    monkeypatch.setenv("COMPUTEWATCH_TOKEN", TOKEN)
    lock = Lock(cw.db, tmp_path)
    try:
        r = cw("run", "--quiet", "--", PY, "-c", JOB)
        assert lock.held
    finally:
        lock.release()
    assert (r.returncode, r.stdout) == (4, "out\n"), r.stderr
    assert "it waits in the local store for `computewatch push`" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and TOKEN not in r.stderr
    pushed = cw.ok("push", "--json")
    sent = json.loads(pushed.stdout)["stored"]
    assert len(sent) == 2 and sorted(sent) == sorted(answer.received)
    assert {x["id"] for x in cw.json("runs")} == set(sent)


def test_track_with_a_server_down(cw: Any, tmp_path: Path) -> None:
    """track() with nothing listening at the server: the program's status and output are its
    own, the run is stored, and one line says it waits for push."""
    port = free_loopback_port()
    script = tmp_path / "tracked.py"
    script.write_text(
        "import sys, computewatch\n"
        "with computewatch.track(name='tracked'):\n"
        "    print('out')\n"
        "sys.exit(5)\n"
    )
    env = cw.env(COMPUTEWATCH_SERVER=f"http://127.0.0.1:{port}", COMPUTEWATCH_TOKEN=TOKEN)
    r = subprocess.run(
        [PY, str(script)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert (r.returncode, r.stdout) == (5, "out\n"), r.stderr
    line = _one_line(r.stderr)
    assert "not uploaded (cannot reach the server" in line and "computewatch push" in line
    assert TOKEN not in r.stderr
    assert cw.json("runs")[0]["name"] == "tracked"
