"""A server process's writer stores the uploads waiting for it together (one transaction, each
upload in a savepoint of its own), on SQLite and on PostgreSQL: each upload's fate is what it
would have been alone, one refused leaves the others stored, a group the database refuses as a
whole is stored one by one, and uploads that wait while a group is stored form the next one. On
PostgreSQL two processes' groups over the same runs wait for each other instead of
deadlocking, and the uploads that end a run are stored last in their group."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.exc import DataError, OperationalError

from computewatch.governance import service as governance_service
from computewatch.server import api
from computewatch.server.admission import Admission, ClientGone, GroupWriter, Overloaded
from computewatch.serverdb import ingest
from computewatch.serverdb.engine import Database, open_database, upgrade
from computewatch.serverdb.errors import IngestConflict
from computewatch.serverdb.ingest import Upload, store_batch, store_group
from computewatch.serverdb.ledger_store import size
from computewatch.serverdb.models import Run
from computewatch.serverdb.node_keys import SignatureRefused, run_signature
from computewatch.upload.protocol import RunUpload

from .conftest import batch, synthetic_upload


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    d = open_database(f"sqlite:///{tmp_path / 'server.db'}")
    upgrade(d)
    yield d
    d.dispose()


def _forged(run: RunUpload) -> RunUpload:
    """``run`` with a signed report that no key signed (refused: invalid signature)."""
    return {
        **run,
        "signed_report": {"key_id": "ed25519:" + "0" * 16, "signature": "AAAA", "report": {}},
    }


def _stored(d: Database) -> dict[str, int]:
    with d.session() as s:
        return {r.id: r.seq for r in s.scalars(select(Run))}


@pytest.fixture
def either(db_url: str) -> Iterator[Database]:
    """A fresh server database on SQLite, then on PostgreSQL."""
    d = open_database(db_url)
    upgrade(d)
    yield d
    d.dispose()


def test_a_group_stores_each_upload_as_it_would_be_alone(either: Database) -> None:
    database = either
    with database.session() as s:
        store_batch(s, "a", batch(synthetic_upload(id="held", seq=1)))
        before = size(s)
    uploads = [
        Upload("a", batch(synthetic_upload(id="g-1", seq=1))),
        Upload("b", batch(synthetic_upload(id="held", seq=2))),  # another team's run
        Upload("a", batch(synthetic_upload(id="g-2", seq=3), _forged(synthetic_upload(id="g-3")))),
        Upload("a", batch(synthetic_upload(id="held", seq=5))),
        Upload("a", batch(synthetic_upload(id="held", seq=4))),  # older than what it holds now
    ]
    with database.session() as s:
        outcomes = store_group(s, uploads, on_run=governance_service.on_run_stored)
    assert outcomes[0] == [{"id": "g-1", "seq": 1, "stored": True}]
    assert isinstance(outcomes[1], IngestConflict)
    assert isinstance(outcomes[2], SignatureRefused)  # the whole batch refused, g-2 too
    assert outcomes[3] == [{"id": "held", "seq": 5, "stored": True}]
    assert outcomes[4] == [{"id": "held", "seq": 4, "stored": False}]
    assert _stored(database) == {"held": 5, "g-1": 1}
    with database.session() as s:
        assert size(s) == before + 2  # a ledger entry per stored upload, none for the refused


def test_a_group_refused_as_a_whole_is_stored_one_by_one(
    either: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = either
    real = ingest.store_group

    def locked_for_groups(session: Any, uploads: Sequence[Upload], **kw: Any) -> Any:
        if len(uploads) > 1:
            raise OperationalError("COMMIT", {}, Exception("database is locked"))
        return real(session, uploads, **kw)

    monkeypatch.setattr(api, "store_group", locked_for_groups)
    uploads = [
        Upload("a", batch(synthetic_upload(id="one", seq=1))),
        Upload("a", batch(_forged(synthetic_upload(id="two")))),
        Upload("a", batch(synthetic_upload(id="three", seq=1))),
    ]
    outcomes = api._store_group(database, uploads)
    assert outcomes[0] == [{"id": "one", "seq": 1, "stored": True}]
    assert isinstance(outcomes[1], SignatureRefused)
    assert outcomes[2] == [{"id": "three", "seq": 1, "stored": True}]
    assert _stored(database) == {"one": 1, "three": 1}


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_a_value_the_database_refuses_among_writes_sent_together_refuses_its_upload_alone(
    either: Database,
) -> None:
    """On PostgreSQL an upload's writes go in one round trip (prepared.pipelined): a value one
    of them is refused for (a host longer than the column) is raised as SQLAlchemy's DataError
    for that upload, its savepoint rolled back, and the uploads before and after it stored."""
    database = either
    with database.session() as s:
        store_batch(s, "a", batch(synthetic_upload(id="held", seq=1)))
    long_host = "h" * 300  # runs.host holds 255
    uploads = [
        Upload("a", batch(synthetic_upload(id="p-1", seq=1))),
        Upload("a", batch({**synthetic_upload(id="p-2", seq=1), "host": long_host})),  # insert
        Upload("a", batch({**synthetic_upload(id="held", seq=2), "host": long_host})),  # update
        Upload("a", batch(synthetic_upload(id="held", seq=3))),
    ]
    with database.session() as s:
        outcomes = store_group(s, uploads, on_run=governance_service.on_run_stored)
    assert outcomes[0] == [{"id": "p-1", "seq": 1, "stored": True}]
    assert isinstance(outcomes[1], DataError) and isinstance(outcomes[2], DataError)
    assert outcomes[3] == [{"id": "held", "seq": 3, "stored": True}]
    assert _stored(database) == {"held": 3, "p-1": 1}
    with database.session() as s:
        assert run_signature(s, "held").status == "unsigned"  # written with the others


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_a_group_stores_the_uploads_that_end_a_run_last_and_answers_in_order(
    either: Database,
) -> None:
    """On PostgreSQL a run's final upload takes the ledger's lock (its entry) until the
    group's commit: stored last, the other processes wait for it the least. The outcomes still
    come in the order of the uploads."""
    seen: list[str] = []

    def hook(session: Any, team: str, run: RunUpload, signature: Any) -> None:
        seen.append(run["id"])
        governance_service.on_run_stored(session, team, run, signature)

    uploads = [
        Upload("a", batch(synthetic_upload(id="ends", seq=1))),  # final
        Upload("a", batch(synthetic_upload(id="goes-on", seq=1, final=False))),
        Upload("a", batch(synthetic_upload(id="ends-too", seq=1))),
        Upload("a", batch(synthetic_upload(id="goes-on-too", seq=1, final=False))),
    ]
    with either.session() as s:
        before = size(s)
        outcomes = store_group(s, uploads, on_run=hook)
    assert seen == ["goes-on", "goes-on-too", "ends", "ends-too"]
    assert [o[0]["id"] for o in outcomes if isinstance(o, list)] == [
        "ends", "goes-on", "ends-too", "goes-on-too"
    ]  # fmt: skip
    with either.session() as s:
        assert size(s) == before + 2  # the two finals' ledger entries


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_two_processes_groups_over_the_same_runs_do_not_deadlock(db_url: str) -> None:
    """Two server processes' groups name the same two runs in opposite orders, and each
    pauses after its first upload as if the other had come in between: each group takes its
    runs' locks in one global order before it stores anything, so the second waits for the
    first and both are stored (locking run by run, each held one run the other needed next,
    and PostgreSQL ended one of them as a deadlock)."""
    one, two = open_database(db_url), open_database(db_url)
    upgrade(one)
    try:
        with one.session() as s:
            store_batch(s, "a", batch(synthetic_upload(id="x", seq=1, final=False)))
            store_batch(s, "a", batch(synthetic_upload(id="y", seq=1, final=False)))
        first_stored = {"one": threading.Event(), "two": threading.Event()}

        def group(d: Database, me: str, other: str, order: list[str], seq: int) -> Any:
            calls = 0

            def hook(session: Any, team: str, run: RunUpload, signature: Any) -> None:
                nonlocal calls
                governance_service.on_run_stored(session, team, run, signature)
                calls += 1
                if calls == 1:
                    first_stored[me].set()
                    first_stored[other].wait(2)  # the other group's turn, if it can take it

            ups = [Upload("a", batch(synthetic_upload(id=i, seq=seq, final=False))) for i in order]
            with d.session() as s:
                return store_group(s, ups, on_run=hook)

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            a = pool.submit(group, one, "one", "two", ["x", "y"], 2)
            b = pool.submit(group, two, "two", "one", ["y", "x"], 3)
            outcomes = [a.result(60), b.result(60)]
        assert all(isinstance(o, list) for out in outcomes for o in out), outcomes
        assert _stored(one) == {"x": 3, "y": 3}
    finally:
        one.dispose()
        two.dispose()


def _request(gone: bool = False) -> Any:
    async def disconnected() -> bool:
        return gone

    return SimpleNamespace(is_disconnected=disconnected, url=SimpleNamespace(path="/api/v1/runs"))


def test_uploads_that_wait_during_a_turn_are_stored_together_in_order() -> None:
    groups: list[list[int]] = []
    first_turn = threading.Event()
    release = threading.Event()

    def store(items: Sequence[int]) -> list[int]:
        groups.append(list(items))
        if len(groups) == 1:
            first_turn.set()
            release.wait(10)
        return [i * 10 for i in items]

    async def scenario() -> tuple[list[int], list[BaseException]]:
        writer: GroupWriter[int, int] = GroupWriter(Admission(1, 8), store, max_group=4)
        first = asyncio.create_task(writer.submit(_request(), 0))
        while not first_turn.is_set():
            await asyncio.sleep(0.01)
        waiting = [asyncio.create_task(writer.submit(_request(), i)) for i in range(1, 8)]
        gone = asyncio.create_task(writer.submit(_request(gone=True), 99))
        await asyncio.sleep(0)
        assert writer.admission.waiting == 8
        with pytest.raises(Overloaded):  # the queue holds 8: the ninth is refused at once
            await writer.submit(_request(), 100)
        release.set()
        done = await asyncio.gather(first, *waiting)
        errors: list[BaseException] = []
        try:
            await gone
        except ClientGone as e:
            errors.append(e)
        assert writer.admission.waiting == 0 and writer.groups == 3
        return done, errors

    done, errors = asyncio.run(scenario())
    assert done == [i * 10 for i in range(8)]
    assert groups == [[0], [1, 2, 3, 4], [5, 6, 7]]  # 99's client left: dropped, not stored
    assert len(errors) == 1


def test_a_group_whose_store_fails_answers_each_upload_with_the_error() -> None:
    def store(items: Sequence[int]) -> list[int]:
        raise OperationalError("BEGIN", {}, Exception("disk I/O error"))

    async def scenario() -> list[BaseException | int]:
        writer: GroupWriter[int, int] = GroupWriter(Admission(1, 8), store)
        return await asyncio.gather(
            *(writer.submit(_request(), i) for i in range(3)), return_exceptions=True
        )

    out = asyncio.run(scenario())
    assert all(isinstance(e, OperationalError) for e in out), out


def test_concurrent_uploads_with_one_refused_all_answered_as_alone(
    server: Callable[..., Any], make_upload: Callable[..., RunUpload], make_batch: Any
) -> None:
    """40 uploads at once, one of them naming a run another team holds: that one is answered
    409, every other 200 and stored, with its ledger entry (the groups they were stored in
    change nothing a client sees)."""
    s = server()
    a, b = s.token("a", "ingest"), s.token("b", "ingest")
    reader = s.client(s.token("a", "read"))
    first = httpx.post(
        f"{s.url}/api/v1/runs",
        json=make_batch(make_upload(id="held-by-a")),
        headers={"Authorization": f"Bearer {a}"},
    )
    assert first.status_code == 200
    jobs = [(a, f"cc-{i}") for i in range(39)] + [(b, "held-by-a")]

    def send(job: tuple[str, str]) -> int:
        token, run_id = job
        with httpx.Client(base_url=s.url, timeout=120) as c:
            for attempt in range(600):  # bounded: 429s are retried as the server asks
                r = c.post(
                    "/api/v1/runs",
                    json=make_batch(make_upload(id=run_id, seq=2)),
                    headers={"Authorization": f"Bearer {token}"},
                )
                if r.status_code != 429:
                    return r.status_code
                # with a pause, as the clients do: a loaded machine's slow turns refuse many
                time.sleep(0.05 + 0.1 * (attempt % 3))
            return r.status_code

    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        codes = list(pool.map(send, jobs))
    assert codes[-1] == 409 and codes[:-1] == [200] * 39, codes
    for i in range(39):
        assert reader.get(f"/api/v1/runs/cc-{i}").json()["run"]["seq"] == 2
    held = reader.get("/api/v1/runs/held-by-a").json()["run"]
    assert held["seq"] == 1
    uploads = httpx.get(f"{s.url}/healthz").json()["uploads"]
    assert uploads["stored"] == 41 and 1 <= uploads["turns"] <= 41, uploads
    assert uploads["waiting"] == 0 and uploads["pace_ms"] > 0
    assert "Traceback" not in s.output()


def test_a_group_is_stored_on_the_loop_when_nothing_has_to_be_waited_for() -> None:
    """``store_now`` stores a group on the event loop when it can; when it says it cannot
    (None), the same group goes to the writer's thread, and each upload gets its outcome."""
    on_loop: list[list[int]] = []
    in_thread: list[list[int]] = []
    loop_thread = threading.get_ident()

    def store_now(items: Sequence[int]) -> list[int] | None:
        assert threading.get_ident() == loop_thread
        if 0 in items:
            return None  # as when another process holds SQLite's write lock
        on_loop.append(list(items))
        return [i * 10 for i in items]

    def store(items: Sequence[int]) -> list[int]:
        assert threading.get_ident() != loop_thread
        in_thread.append(list(items))
        return [i * 10 for i in items]

    async def scenario() -> tuple[list[int], int]:
        writer: GroupWriter[int, int] = GroupWriter(Admission(1, 8), store, store_now=store_now)
        first = await writer.submit(_request(), 0)
        rest = await asyncio.gather(*(writer.submit(_request(), i) for i in (1, 2, 3)))
        return [first, *rest], writer.stored_on_loop

    done, stored_on_loop = asyncio.run(scenario())
    assert done == [0, 10, 20, 30]
    assert in_thread == [[0]] and [i for g in on_loop for i in g] == [1, 2, 3]
    assert stored_on_loop == 3


def test_the_loop_leaves_a_group_to_the_thread_while_another_process_writes(
    database: Database, tmp_path: Path
) -> None:
    """With SQLite's write lock held by another connection (another process: the CLI, a second
    server), :func:`api._store_group_now` answers None at once, nothing written, rather than
    waiting on the event loop for the busy timeout; likewise while this process's writer's
    turn is taken. With the lock free it stores the group."""
    import sqlite3

    uploads = [Upload("a", batch(synthetic_upload(id="now", seq=1)))]
    with database.session() as s:  # a connection in the pool, idle
        s.execute(select(Run.id)).all()
    other = sqlite3.connect(tmp_path / "server.db", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        began = time.monotonic()
        assert api._store_group_now(database, uploads) is None
        assert time.monotonic() - began < 5  # the busy timeout is 10 s: it did not wait
        other.execute("ROLLBACK")
    finally:
        other.close()
    assert _stored(database) == {}
    with database.writing():
        assert api._store_group_now(database, uploads) is None
    assert _stored(database) == {}
    out = api._store_group_now(database, uploads)
    assert out == [[{"id": "now", "seq": 1, "stored": True}]]
    assert _stored(database) == {"now": 1}
    # the connection's busy timeout is back to its setting after the attempt that met the lock
    with database.session() as s:
        assert s.connection().exec_driver_sql("PRAGMA busy_timeout").scalar() == 10_000
