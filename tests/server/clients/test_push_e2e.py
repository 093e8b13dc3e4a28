"""The upload client end to end: real ``computewatch run`` and ``push`` child processes from two
data homes against a real ``computewatch server`` (SQLite and PostgreSQL, from
tests/server/conftest.py): team isolation, idempotent pushes, the server killed mid-push and
restarted, a server down while a job runs, live streaming from ``run`` and ``track()``, secrets
redacted on the server and the token in no output."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from tests.conftest import CLI, TIMEOUT
from tests.upload.conftest import stored_run

from computewatch.serverdb.engine import open_database
from computewatch.serverdb.models import RunSeriesPart
from computewatch.store import Store
from computewatch.upload.payload import build_upload

PY = sys.executable
JOB = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"


def _runs(server: Any, token: str) -> list[dict[str, Any]]:
    """Every run the token sees, following the cursor."""
    c = server.client(token)
    out: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 200}
        if cursor:
            params["cursor"] = cursor
        r = c.get("/api/v1/runs", params=params)
        assert r.status_code == 200, r.text
        page = r.json()
        out += page["runs"]
        cursor = page.get("next_cursor")
        if not cursor:
            return out


def _home(cli_class: type[CLI], tmp_path: Path, name: str) -> CLI:
    return cli_class(tmp_path / name, tmp_path)


@pytest.fixture
def homes(cli_class: type[CLI], tmp_path: Path) -> Iterator[tuple[CLI, CLI]]:
    a, b = _home(cli_class, tmp_path, "home-a"), _home(cli_class, tmp_path, "home-b")
    yield a, b
    a.cleanup()
    b.cleanup()


def _no_token(token: str, *results: subprocess.CompletedProcess[str]) -> None:
    for r in results:
        assert token not in r.stdout and token not in r.stderr


@pytest.mark.slow
def test_two_homes_two_teams_pushed_once(
    server: Callable[..., Any], homes: tuple[CLI, CLI]
) -> None:
    s = server()
    ingest_a, ingest_b = s.token("alpha", "ingest"), s.token("beta", "ingest")
    read_a, read_b = s.token("alpha", "read"), s.token("beta", "read")
    a, b = homes
    outputs = [
        a.ok("run", "--quiet", "--name", "a1", "--tag", "project=llm", "--", PY, "-c", "pass"),
        a.ok("run", "--quiet", "--name", "a2", "--", PY, "-c", "pass"),
        b.ok("run", "--quiet", "--name", "b1", "--", PY, "-c", "pass"),
    ]
    ids_a = {r["id"] for r in a.json("runs")}
    ids_b = {r["id"] for r in b.json("runs")}
    push_a = a.ok("push", "--server", s.url, "--token", ingest_a)
    push_b = b.ok("push", "--server", s.url, "--token", ingest_b, "--json")
    assert push_a.stdout.splitlines()[-1] == "2 sent"
    assert set(json.loads(push_b.stdout)["stored"]) == ids_b
    # each team's read token sees its own runs only
    seen_a, seen_b = _runs(s, read_a), _runs(s, read_b)
    assert {r["id"] for r in seen_a} == ids_a and {r["team"] for r in seen_a} == {"alpha"}
    assert {r["id"] for r in seen_b} == ids_b
    assert {r["project"] for r in seen_a} == {"llm", None}
    assert s.client(read_b).get(f"/api/v1/runs/{next(iter(ids_a))}").status_code == 404
    # pushing again sends nothing; --all sends again and the server keeps one copy
    again = a.ok("push", "--server", s.url, "--token", ingest_a)
    assert again.stdout.splitlines()[-1] == "0 sent, 2 skipped (2 sent before)"
    every = a.ok("push", "--all", "--server", s.url, "--token", ingest_a, "--json")
    assert sorted(json.loads(every.stdout)["already"]) == sorted(ids_a)
    seen = _runs(s, read_a)
    assert sorted(r["id"] for r in seen) == sorted(ids_a)
    assert all(r["seq"] == 1 and r["final"] for r in seen)
    _no_token(ingest_a, *outputs, push_a, again, every)
    _no_token(ingest_b, push_b)


@pytest.mark.slow
def test_secrets_in_argv_and_tags_are_redacted_on_the_server(
    server: Callable[..., Any], cw: CLI
) -> None:
    s = server()
    token = s.token("alpha", "ingest")
    cw.ok(
        "run", "--quiet", "--tag", "api_token=tagsecret1", "--tag", "team=ml", "--",
        PY, "-c", "pass", "--password", "argvsecret2", "--api-key=argvsecret3",
        "postgres://u:urlsecret4@db/x",
    )  # fmt: skip
    pushed = cw.ok("push", "--server", s.url, "--token", token)
    run_id = cw.json("runs")[0]["id"]
    detail = s.client(token).get(f"/api/v1/runs/{run_id}")
    assert detail.status_code == 200, detail.text
    text = detail.text + json.dumps(_runs(s, token))
    for secret in ("tagsecret1", "argvsecret2", "argvsecret3", "urlsecret4"):
        assert secret not in text, secret
    assert "--password" in text and "team" in text
    _no_token(token, pushed)
    assert token not in s.output()


class _KillingProxy:
    """Forwards ``POST /api/v1/runs`` to the server; on the ``kill_on``-th it SIGKILLs the
    server, before forwarding (``after=False``: nothing of that batch stored) or once the
    server has answered (``after=True``: stored, the answer lost), and drops the connection."""

    def __init__(self, target: Any, kill_on: int, after: bool) -> None:
        self.target = target
        self.kill_on = kill_on
        self.after = after
        self.posts = 0
        self.killed = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                proxy.posts += 1
                kill = proxy.posts == proxy.kill_on and not proxy.killed.is_set()
                if kill and not proxy.after:
                    proxy.kill()
                    self.close_connection = True
                    return
                u = urllib.parse.urlsplit(proxy.target.url)
                conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                conn.request("POST", self.path, body, headers)
                resp = conn.getresponse()
                answer = resp.read()
                conn.close()
                if kill:
                    proxy.kill()
                    self.close_connection = True
                    return
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}"

    def kill(self) -> None:
        self.target.kill()
        self.killed.set()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.mark.slow
@pytest.mark.parametrize("after", [False, True], ids=["before-storing", "answer-lost"])
def test_server_killed_mid_push_then_restarted(
    server: Callable[..., Any], cw: CLI, after: bool
) -> None:
    """250 runs go in three batches; the server dies at the second. After a restart and the
    next push every run is there exactly once."""
    s = server()
    token = s.token("alpha", "ingest")
    cw.ok("run", "--quiet", "--", PY, "-c", "pass")
    cw.ok("run", "--quiet", "--", PY, "-c", "pass")
    with Store.open(cw.db) as store:
        for i in range(248):
            stored_run(store, f"{i:012x}", n=5)
    proxy = _KillingProxy(s, kill_on=2, after=after)
    try:
        first = cw("push", "--server", proxy.url, "--token", token, "--json")
        assert first.returncode == 1, first.stderr
        assert proxy.killed.is_set()
        assert len(json.loads(first.stdout)["stored"]) == 100
        err = first.stderr.strip().splitlines()
        assert len(err) == 1 and "not sent stay in the local store" in err[0], first.stderr
        s.start()  # restarted on the same port and database
        second = cw.ok("push", "--server", proxy.url, "--token", token, "--json")
        report = json.loads(second.stdout)
        assert len(report["stored"]) == (50 if after else 150)
        assert len(report["already"]) == (100 if after else 0)
        third = cw.ok("push", "--server", proxy.url, "--token", token, "--json")
        assert json.loads(third.stdout)["stored"] == []
    finally:
        proxy.close()
    seen = _runs(s, token)
    ids = [r["id"] for r in seen]
    assert len(ids) == len(set(ids)) == 250
    assert {r["id"] for r in cw.json("runs", "--limit", "1000")} == set(ids)
    assert all(r["seq"] == 1 and r["final"] for r in seen)
    _no_token(token, first, second, third)


@pytest.mark.slow
def test_server_down_during_run_changes_nothing_for_the_job(
    server: Callable[..., Any], homes: tuple[CLI, CLI], monkeypatch: pytest.MonkeyPatch
) -> None:
    s = server()
    token = s.token("alpha", "ingest")
    s.stop()
    plain, served = homes
    baseline = plain("run", "--quiet", "--", PY, "-c", JOB)
    monkeypatch.setenv("COMPUTEWATCH_SERVER", s.url)
    monkeypatch.setenv("COMPUTEWATCH_TOKEN", token)
    r = served("run", "--quiet", "--", PY, "-c", JOB)
    assert (r.returncode, r.stdout) == (baseline.returncode, baseline.stdout) == (3, "out\n")
    extra = [ln for ln in r.stderr.splitlines() if ln not in baseline.stderr.splitlines()]
    assert len(extra) == 1 and extra[0].endswith(
        "it waits in the local store for `computewatch push`"
    ), r.stderr
    assert "err" in r.stderr.splitlines()
    _no_token(token, r)
    # the server back: the next push sends it
    s.start()
    pushed = served.ok("push")
    assert pushed.stdout.splitlines()[-1] == "1 sent"
    (run,) = _runs(s, token)
    assert (run["status"], run["exit_code"], run["final"]) == ("failed", 3, True)
    _no_token(token, pushed)


def _release_script(tmp_path: Path, *, tracked: bool) -> tuple[Path, Path]:
    release = tmp_path / "release"
    body = (
        "import pathlib, sys, time\n"
        "def wait():\n"
        f"    while not pathlib.Path({str(release)!r}).exists():\n"
        "        time.sleep(0.05)\n"
    )
    if tracked:
        body += "import computewatch\nwith computewatch.track(name='tracked'):\n    wait()\n"
    else:
        body += "wait()\n"
    script = tmp_path / "job.py"
    script.write_text(body)
    return script, release


@pytest.mark.slow
@pytest.mark.parametrize("via", ["run", "track"])
def test_a_live_run_is_visible_while_it_runs(
    server: Callable[..., Any],
    cw: CLI,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    via: str,
) -> None:
    s = server()
    token = s.token("alpha", "ingest")
    config = tmp_path / "config.toml"
    config.write_text(f'[server]\nurl = "{s.url}"\nstream_interval = 1\nproject = "live"\n')
    monkeypatch.setenv("COMPUTEWATCH_CONFIG", str(config))
    monkeypatch.setenv("COMPUTEWATCH_TOKEN", token)
    script, release = _release_script(tmp_path, tracked=via == "track")
    if via == "run":
        proc = cw.popen("run", "--quiet", "--", PY, script)
    else:
        proc = subprocess.Popen(
            [PY, str(script)],
            env=cw.env(),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        running = cw.wait_for(
            lambda: [r for r in _runs(s, token) if r["status"] == "running"],
            what="the running run on the server",
        )
        assert len(running) == 1 and not running[0]["final"]
        assert running[0]["project"] == "live"
        first_seq = running[0]["seq"]
        # streamed again while it runs: seq grows
        cw.wait_for(lambda: _runs(s, token)[0]["seq"] > first_seq, what="a second live upload")
    finally:
        release.touch()
    out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, err
    if "not uploaded" in err:
        # The final upload has 2 s; on a machine loaded past that it says so in one line and
        # leaves the run to `push` (tests/upload/test_stream.py checks the final upload itself).
        assert "it waits in the local store for `computewatch push`" in err, err
        cw.ok("push")
    (run,) = _runs(s, token)
    assert run["status"] == "completed" and run["final"], err
    with Store.open(cw.db) as store:
        local = store.find_run(run["id"])
        assert store.uploaded(s.url)[local.key] == (run["seq"], True)
        whole = build_upload(store, local, seq=1)["series"]
    assert token not in out + err
    # the live uploads after the first carried only their new points; the server's series
    # add up to the run's whole series all the same
    got = s.client(token).get(f"/api/v1/runs/{run['id']}").json()["series"]
    assert [(x["name"], x["labels"], x["points"]) for x in got] == [
        (x["name"], x["labels"], x["points"]) for x in whole
    ]
    if "not uploaded" not in err:
        db = open_database(s.db_url)
        try:
            with db.session() as session:
                parts = session.scalar(
                    select(func.count()).where(RunSeriesPart.run_id == run["id"])
                )
        finally:
            db.dispose()
        assert parts is not None and parts >= 2  # a whole upload, then continuations


@pytest.mark.slow
@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_database_down_keeps_the_runs_on_the_client(
    server: Callable[..., Any], make_postgres_cluster: Callable[[], Any], cw: CLI, db: str
) -> None:
    """PostgreSQL stopped behind a running server: push exits 1 with one line and marks
    nothing; once the database is back, the next push sends every run once."""
    cluster = make_postgres_cluster()
    s = server(db_url=cluster.create_database())
    token = s.token("alpha", "ingest")
    cw.ok("run", "--quiet", "--", PY, "-c", "pass")
    cw.ok("run", "--quiet", "--", PY, "-c", "pass")
    cluster.stop()
    try:
        down = cw("push", "--server", s.url, "--token", token)
    finally:
        cluster.start()
    assert down.returncode == 1, down.stderr
    line = down.stderr.strip().splitlines()
    assert len(line) == 1 and "stay in the local store" in line[0], down.stderr
    assert "failed (503)" in line[0], line[0]
    assert "Traceback" not in down.stderr
    with Store.open(cw.db) as store:
        assert store.uploaded(s.url) == {}
    up = cw.ok("push", "--server", s.url, "--token", token)
    assert up.stdout.splitlines()[-1] == "2 sent"
    assert len(_runs(s, token)) == 2
    _no_token(token, down, up)
