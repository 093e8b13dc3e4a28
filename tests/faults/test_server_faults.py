"""Faults of ``computewatch server``, with real processes and a real PostgreSQL:

- the server SIGKILLed in the middle of an ingest transaction, then restarted: nothing of the
  batch is stored half-way, and after the client pushes again every run is there exactly once;
- the server SIGKILLed again and again during a stream of uploads (SQLite and PostgreSQL);
- PostgreSQL stopped under a running server: 503 with a reason, then 200 once it is back;
- tokens never appear in what the server prints (access log included);
- a database that cannot be reached at start, a bad URL, a non-loopback address: one line
  and an exit status, never a traceback, never a password.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from tests.conftest import free_loopback_port
from tests.server.conftest import PostgresCluster, ServerProcess, batch, synthetic_upload

from computewatch.upload.protocol import RunUpload

PY = sys.executable
RUNS = "/api/v1/runs"


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Callable[[str], ServerProcess]]:
    started: list[ServerProcess] = []

    def start(db_url: str) -> ServerProcess:
        s = ServerProcess(db_url, tmp_path / f"home-{len(started)}")
        started.append(s)
        return s

    yield start
    for s in started:
        s.close()


@pytest.fixture(scope="module")
def cluster() -> Iterator[PostgresCluster]:
    c = PostgresCluster()
    yield c
    c.destroy()


def _count(db_url: str, table: str, run_ids: list[str] | None = None) -> int:
    pg = db_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(pg) as conn:
        if run_ids is None:
            row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
        else:
            col = "id" if table == "runs" else "run_id"
            row = conn.execute(
                f"SELECT count(*) FROM {table} WHERE {col} = ANY(%s)", (run_ids,)
            ).fetchone()
    assert row is not None
    return int(row[0])


def _runs(n: int, series: int = 3) -> list[RunUpload]:
    runs = []
    for _ in range(n):
        r = synthetic_upload()
        r["series"] = [dict(r["series"][0], labels={"gpu_uuid": f"GPU-{k}"}) for k in range(series)]  # type: ignore[misc]
        runs.append(r)
    return runs


def _all_ids(s: ServerProcess, token: str) -> list[str]:
    seen: list[str] = []
    cursor = None
    with s.client(token) as c:
        while True:
            params: dict[str, Any] = {"limit": 500}
            if cursor:
                params["cursor"] = cursor
            page = c.get(RUNS, params=params).json()
            seen += [r["id"] for r in page["runs"]]
            cursor = page["next_cursor"]
            if not cursor:
                return seen


@pytest.mark.slow
def test_killed_in_the_middle_of_an_ingest_transaction_stores_nothing_of_it(
    cluster: PostgresCluster, servers: Callable[[str], ServerProcess]
) -> None:
    db_url = cluster.create_database()
    s = servers(db_url)
    token = s.token("ml", "ingest")
    first = _runs(1)
    assert s.client(token).post(RUNS, json=batch(*first)).status_code == 200
    # Hold the stored run's row from another connection: an ingest of a batch whose last run is
    # that one stores the new runs before it, then waits for the row, inside its transaction.
    new = _runs(40)
    blocked = [*new, synthetic_upload(id=first[0]["id"], seq=2)]
    pg = db_url.replace("postgresql+psycopg://", "postgresql://")
    holder = psycopg.connect(pg)
    holder.execute("SELECT id FROM runs WHERE id = %s FOR UPDATE", (first[0]["id"],))
    outcome: list[Any] = []

    def post() -> None:
        try:
            outcome.append(httpx.post(
                s.url + RUNS, json=batch(*blocked),
                headers={"Authorization": f"Bearer {token}"}, timeout=120,
            ).status_code)  # fmt: skip
        except httpx.HTTPError as e:
            outcome.append(e)

    t = threading.Thread(target=post)
    t.start()
    deadline = time.monotonic() + 60
    with psycopg.connect(pg, autocommit=True) as watch:
        while True:
            row = watch.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            ).fetchone()
            if row and row[0]:
                break
            assert time.monotonic() < deadline, "the ingest never waited for the row"
            time.sleep(0.05)
    s.kill()
    holder.rollback()
    holder.close()
    t.join(60)
    assert outcome and isinstance(outcome[0], httpx.HTTPError)  # the client saw no answer
    new_ids = [r["id"] for r in new]
    deadline = time.monotonic() + 30
    while _count(db_url, "runs", new_ids):  # PostgreSQL ends the dead backend's transaction
        assert time.monotonic() < deadline, "the killed transaction's runs stayed"
        time.sleep(0.1)
    assert _count(db_url, "run_series_parts", new_ids) == 0
    assert _count(db_url, "run_tags", new_ids) == 0
    s.start()
    # the client pushes the same batch again: everything once
    r = s.client(token).post(RUNS, json=batch(*blocked))
    assert r.status_code == 200, r.text
    assert all(x["stored"] for x in r.json()["results"])
    ids = _all_ids(s, token)
    assert sorted(ids) == sorted({first[0]["id"], *new_ids})
    assert _count(db_url, "run_series_parts") == len(new) + 1  # one part per run


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_killed_during_a_stream_of_uploads_then_restarted_nothing_lost_or_doubled(
    kind: str,
    cluster: PostgresCluster,
    servers: Callable[[str], ServerProcess],
    tmp_path: Path,
) -> None:
    db_url = (
        f"sqlite:///{tmp_path / 'server.db'}" if kind == "sqlite" else cluster.create_database()
    )
    s = servers(db_url)
    token = s.token("ml", "ingest")
    batches = [_runs(20, series=10) for _ in range(12)]
    sent = threading.Event()

    def push_all() -> None:
        with httpx.Client(base_url=s.url, headers={"Authorization": f"Bearer {token}"}) as c:
            for b in batches:
                try:
                    c.post(RUNS, json=batch(*b), timeout=60)
                    sent.set()
                except httpx.HTTPError:
                    return

    t = threading.Thread(target=push_all)
    t.start()
    assert sent.wait(60)
    s.kill()  # while the next batches are in flight
    t.join(60)
    s.start()
    # every run stored so far is whole
    with s.client(token) as c:
        for run_id in _all_ids(s, token):
            d = c.get(f"{RUNS}/{run_id}").json()
            assert len(d["series"]) == 10 and d["run"]["tags"] == {"env": "test"}
    # the client pushes everything again (as `computewatch push` does for unacknowledged runs)
    with s.client(token) as c:
        for b in batches:
            assert c.post(RUNS, json=batch(*b)).status_code == 200
    ids = _all_ids(s, token)
    assert len(ids) == len(set(ids)) == 240
    assert sorted(ids) == sorted(r["id"] for b in batches for r in b)


@pytest.mark.slow
def test_postgresql_stopped_gives_503_and_the_server_recovers(
    servers: Callable[[str], ServerProcess],
) -> None:
    own = PostgresCluster()  # stopped and started here: not the shared one
    try:
        s = servers(own.create_database())
        token = s.token("ml", "ingest")
        c = s.client(token, timeout=30)
        assert c.get(RUNS).status_code == 200
        own.stop()
        for method, path, body in (
            ("GET", RUNS, None),
            ("POST", RUNS, batch(synthetic_upload())),
            ("GET", "/healthz", None),
        ):
            r = c.request(method, path, json=body)
            assert r.status_code == 503, (path, r.status_code, r.text)
            assert r.json()["error"] == "database_unavailable"
        own.start()
        deadline = time.monotonic() + 60
        while c.get(RUNS).status_code != 200:
            assert time.monotonic() < deadline, "the server did not recover"
            time.sleep(0.2)
        r = c.post(RUNS, json=batch(synthetic_upload()))
        assert r.status_code == 200
        assert s.proc is not None and s.proc.poll() is None
    finally:
        own.destroy()


@pytest.mark.slow
def test_tokens_never_appear_in_the_server_output(
    servers: Callable[[str], ServerProcess], tmp_path: Path
) -> None:
    s = servers(f"sqlite:///{tmp_path / 'server.db'}")
    ingest, read = s.token("ml", "ingest"), s.token("ml", "read")
    c = httpx.Client(base_url=s.url, timeout=30)
    c.post(RUNS, json=batch(synthetic_upload()), headers={"Authorization": f"Bearer {ingest}"})
    c.post(RUNS, json=batch(synthetic_upload()), headers={"Authorization": f"Bearer {read}"})
    c.get(RUNS, headers={"Authorization": f"Bearer {read}x"})
    # a token in the query string is not a way in, and is not echoed
    assert c.get(f"{RUNS}?token={read}").status_code == 401
    c.post("/login", data={"token": read})
    c.post("/login", data={"token": ingest + "junk"})
    c.close()
    assert s.stop() == 0
    out = s.output()
    assert "GET /api/v1/runs" in out  # the access log is on
    for secret in (ingest, read, ingest[3:], read[3:]):
        assert secret not in out
    # the query-string attempt is logged with the token masked, by the access log's own format
    assert '"GET /api/v1/runs?token=*** HTTP/1.1" 401' in out
    assert "Logging error" not in out and "Traceback" not in out


def _cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    import os

    env = dict(os.environ, COMPUTEWATCH_HOME=str(home))
    return subprocess.run(
        [PY, "-m", "computewatch", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "status", "says"),
    [
        (["server", "--db", "mysql://u@h/d"], 2, "unsupported database 'mysql'"),
        (["server", "--db", "not a url"], 2, "not a database URL"),
        (["server", "--db", "sqlite://"], 2, "must be a file"),
        (["server", "--db", "postgresql+asyncpg://u@h/d"], 2, "not supported"),
        (["server", "--listen", "0.0.0.0:8765"], 2, "--allow-insecure-listen"),
        (["server", "--listen", "nonsense"], 2, "expected HOST:PORT"),
        (["server", "--tls-cert", "/nonexistent"], 2, "go together"),
        (["server", "token", "create", "--team", "a b", "--scope", "read"], 2, "team name"),
        (["server", "token", "revoke", "99"], 1, "no token 99"),
    ],
)
def test_bad_flags_are_one_line(args: list[str], status: int, says: str, tmp_path: Path) -> None:
    r = _cli(*args, home=tmp_path / "home")
    assert r.returncode == status, r.stderr
    assert says in r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize(
    "command", [["server"], ["server", "token", "create", "--team", "a", "--scope", "read"]]
)
def test_unreachable_database_is_one_line_without_the_password(
    command: list[str], tmp_path: Path
) -> None:
    url = f"postgresql+psycopg://cw:hunter2@127.0.0.1:{free_loopback_port()}/cw"
    r = _cli(*command, "--db", url, home=tmp_path / "home")
    assert r.returncode == 1, r.stderr
    assert "cannot be used" in r.stderr and "OperationalError" in r.stderr
    assert "hunter2" not in r.stderr + r.stdout
    assert "Traceback" not in r.stderr
    assert r.stdout == ""


def test_sqlite_locked_by_another_process_while_uploads_wait_then_all_stored_once(
    tmp_path: Path, servers: Callable[[str], ServerProcess]
) -> None:
    """Another process holds SQLite's write lock while uploads pile up behind the one writer:
    the group waits (within the busy timeout) and, once the lock is released, every upload is
    answered 200 and stored once, none answered 5xx, none half-stored."""
    import sqlite3  # the other process's hold on the database, as any SQLite client takes it

    path = tmp_path / "locked.db"
    s = servers(f"sqlite:///{path}")
    token = s.token("ml", "ingest")
    assert s.client(token).post(RUNS, json=batch(*_runs(1))).status_code == 200
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    uploads = _runs(12)
    codes: list[int] = []

    def post(run: RunUpload) -> None:
        with httpx.Client(base_url=s.url, timeout=120) as c:
            for _ in range(600):  # bounded (a minute): 429s are retried as the server asks
                r = c.post(RUNS, json=batch(run), headers={"Authorization": f"Bearer {token}"})
                if r.status_code != 429:
                    codes.append(r.status_code)
                    return
                time.sleep(0.1)

    threads = [threading.Thread(target=post, args=(u,)) for u in uploads]
    for t in threads:
        t.start()
    time.sleep(2.0)  # the uploads arrive and wait behind the lock
    assert not codes, codes  # nobody answered while the lock is held
    holder.execute("ROLLBACK")
    holder.close()
    for t in threads:
        t.join(120)
    assert codes == [200] * len(uploads), codes
    ids = _all_ids(s, token)
    assert len(ids) == len(set(ids)) == 13 and {u["id"] for u in uploads} <= set(ids)
    assert "Traceback" not in s.output()


def test_a_token_first_used_while_another_process_writes_is_answered_and_noted_later(
    tmp_path: Path, servers: Callable[[str], ServerProcess]
) -> None:
    """Authentication writes nothing on the request's path: a token used for the first time
    while another process holds SQLite's write lock is answered at once (a read, and an
    upload's turn in the queue), and its last use is written once the lock is gone. (The
    last-use write inside authentication waited for the lock: reads stalled behind any writer,
    and uploads waited before the admission queue could count them.)"""
    import sqlite3  # the other process's hold on the database, as any SQLite client takes it

    path = tmp_path / "busy.db"
    s = servers(f"sqlite:///{path}")
    token = s.token("ml", "read")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        r = s.client(token).get(RUNS)
        assert r.status_code == 200, r.text  # answered while the lock is still held
        health = httpx.get(f"{s.url}/healthz", timeout=30)
        assert health.status_code == 200
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    for _ in range(60):  # the access log's next flush notes the use (bounded)
        r = _cli("server", "token", "list", "--json", "--db", f"sqlite:///{path}", home=s.home)
        assert r.returncode == 0, r.stderr
        (doc,) = json.loads(r.stdout)
        if doc["last_used_at"] is not None:
            break
        time.sleep(0.1)
    assert doc["last_used_at"] is not None
    assert "Traceback" not in s.output()


def test_a_ledger_entry_altered_in_the_database_is_named_not_a_traceback(
    tmp_path: Path, servers: Callable[[str], ServerProcess]
) -> None:
    """An entry of the log whose body is no longer JSON (the database edited by hand): the
    governance status, its page and the CLI name the entry in one line; the other pages still
    answer; no traceback. (Both answered 500 with a JSONDecodeError's traceback.)"""
    import sqlite3  # the hand edit, as any SQLite client makes it

    from tests.server.web.test_governance_page import _governed

    path = tmp_path / "altered.db"
    s = servers(f"sqlite:///{path}")
    admin, ingest = s.token("ops", "admin"), s.token("lab", "ingest")
    assert s.client(ingest).post(RUNS, json=batch(_governed("r1", "m", 1e24))).status_code == 200
    with sqlite3.connect(path) as c:
        c.execute("UPDATE ledger_entries SET body = '{' WHERE seq = "
                  "(SELECT max(seq) FROM ledger_entries WHERE kind = 'run')")  # fmt: skip
    client = s.client(admin)
    r = client.get("/api/v1/governance/status")
    assert r.status_code == 500 and r.json()["error"] == "ledger_unreadable", r.text
    assert "ledger entry" in r.json()["detail"] and "not JSON" in r.json()["detail"]
    page = client.get("/governance")
    assert page.status_code == 500 and "not JSON" in page.text
    assert client.get("/usage").status_code == 200
    cli = _cli("governance", "status", "--db", f"sqlite:///{path}", home=s.home)
    assert cli.returncode == 1 and "not JSON" in cli.stderr, cli.stderr
    assert "Traceback" not in cli.stderr
    assert "Traceback" not in s.output()
