"""Governance against a real server: resumed runs and a fine-tune summed per model, a forecast
opening an obligation before the crossing, marking it done, team isolation, the notification
pack, the status a read-only replay of the log that ``ledger replay`` of an export recomputes
to the byte, one open obligation per model and tier whoever judges at once, and the ledger
exported and verified, with every kind of tampering named (in an export and in the database
itself)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import CW, TIMEOUT
from tests.server.conftest import ServerProcess, batch

from computewatch.governance import service
from computewatch.governance.ledger_ops import verify_database
from computewatch.ledger.keys import load_or_create_private_key
from computewatch.serverdb.engine import open_database, upgrade
from computewatch.serverdb.ingest import store_batch
from computewatch.serverdb.ledger_store import count, size
from computewatch.upload.protocol import RunUpload


@pytest.fixture(autouse=True)
def count_simulated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The synthetic uploads' devices are simulated: these tests count them."""
    config = tmp_path / "count-simulated.toml"
    config.write_text("[governance]\ncount_simulated = true\n")
    monkeypatch.setenv("COMPUTEWATCH_CONFIG", str(config))
    service.count_simulated.cache_clear()
    yield config
    service.count_simulated.cache_clear()


def _flops(value: float, spread: float = 0.15) -> dict[str, Any]:
    return {"value": value, "low": value * (1 - spread), "high": value * (1 + spread),
            "unit": "FLOP", "method": "estimated", "assumptions": [], "source": "test"}  # fmt: skip


def _governed(make_upload: Callable[..., RunUpload], model: str, flop: float, *,
              base: str | None = None, stage: str = "pretrain", forecast: float | None = None,
              **fields: Any) -> RunUpload:  # fmt: skip
    up = make_upload(gpus=8, gpu_model="H100-SXM", **fields)
    summary = up["summary"]
    assert summary is not None
    summary["flops"] = _flops(flop)
    if forecast is not None:
        summary["forecast"] = {"flops": _flops(forecast, 0.1)}
    up["meta"]["governance"] = {"model": model, "base_model": base, "stage": stage,
                                "parameters": None}  # fmt: skip
    return up


def _cli(srv: ServerProcess, *args: str, env: dict[str, str] | None = None,
         ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    e = srv.env()
    e.pop("COMPUTEWATCH_SERVER", None)
    e.pop("COMPUTEWATCH_TOKEN", None)
    e.update(env or {})
    return subprocess.run([*CW, *args], capture_output=True, text=True, env=e, timeout=TIMEOUT,
                          check=False, cwd=srv.home)  # fmt: skip


@pytest.mark.slow
def test_models_tiers_obligations_and_the_ledger(
    server: Callable[..., ServerProcess], make_upload: Callable[..., RunUpload], tmp_path: Path
) -> None:
    srv = server()
    ingest, admin = srv.token("lab", "ingest"), srv.token("lab", "admin")
    other = srv.token("other-team", "read")
    runs = [
        _governed(make_upload, "acme-7b", 2e24),
        _governed(make_upload, "acme-7b", 3e24),  # resumed after a failure
        _governed(make_upload, "acme-7b", 1e24),  # and again
        _governed(make_upload, "acme-7b-chat", 1e23, base="acme-7b", stage="finetune"),
        _governed(make_upload, "acme-70b", 2e24, forecast=1.2e25, final=False, status="running"),
    ]
    r = srv.client(ingest).post("/api/v1/runs", json=batch(*runs))
    assert r.status_code == 200, r.text

    st = _cli(srv, "governance", "status", "--json", "--server", srv.url, "--token", admin)
    assert st.returncode == 0, st.stderr
    models = {m["model"]: m for m in json.loads(st.stdout)}
    base, chat, big = models["lab/acme-7b"], models["lab/acme-7b-chat"], models["lab/acme-70b"]
    assert chat["base_model"] == "lab/acme-7b"  # a bare name: the run's team's model
    assert base["runs"] == 3
    assert base["cumulative_flop"]["hardware"]["value"] == pytest.approx(6e24)
    assert base["judged_flop"] == pytest.approx(6e24 * 1.15)
    assert base["gpu_hours"] == pytest.approx(3 * 8 * 1.0)
    tiers = {t["tier"]: t["state"] for t in base["tiers"]}
    assert tiers["eu-systemic-risk"] == "approaching" and tiers["eu-gpai"] == "crossed"
    assert chat["cumulative_flop"]["hardware"]["value"] == pytest.approx(6.1e24)  # SB 53
    assert chat["own_flop"]["hardware"]["value"] == pytest.approx(1e23)  # EU one-third rule
    chat_tiers = {t["tier"]: t["state"] for t in chat["tiers"]}
    assert chat_tiers["eu-modification"] == "below"
    big_tiers = {t["tier"]: t["state"] for t in big["tiers"]}
    assert big_tiers["eu-systemic-risk"] == "forecast"  # opened before the crossing
    [obligation] = [o for o in big["obligations"] if o["tier"] == "eu-systemic-risk"]
    assert obligation["state"] == "open" and obligation["trigger"] == "forecast"
    assert 13.9 < obligation["days_left"] <= 14.0

    mine = _cli(srv, "governance", "status", "--json", "--server", srv.url, "--token", other)
    assert mine.returncode == 0 and json.loads(mine.stdout) == []  # another team's models

    done = _cli(srv, "governance", "done", str(obligation["id"]), "--reference", "EU-2026-17",
                "--server", srv.url, "--token", admin)  # fmt: skip
    assert done.returncode == 0, done.stderr
    again = _cli(srv, "governance", "done", str(obligation["id"]), "--reference", "x",
                 "--server", srv.url, "--token", admin)  # fmt: skip
    assert again.returncode == 1 and "already" in again.stderr

    report = tmp_path / "acme.html"
    rp = _cli(srv, "governance", "report", "acme-7b", "-o", str(report), "--server", srv.url,
              "--token", admin)  # fmt: skip
    assert rp.returncode == 0, rp.stderr
    page = report.read_text()
    assert "Training compute of lab/acme-7b" in page and "<svg" in page and "train.py" not in page
    unknown = _cli(srv, "governance", "report", "acme-7", "-o", str(tmp_path / "x.json"),
                   "--server", srv.url, "--token", admin)  # fmt: skip
    assert unknown.returncode == 1
    assert "did you mean" in unknown.stderr and "lab/acme-7b" in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1

    admin_client = srv.client(admin)
    entries_before = _count_entries(srv)
    first = admin_client.get("/api/v1/governance/status", params={"at": 1.8e9})
    again = admin_client.get("/api/v1/governance/status", params={"at": 1.8e9})
    assert first.status_code == 200 and first.json() == again.json()
    assert _count_entries(srv) == entries_before  # reading the status appends nothing

    export = tmp_path / "ledger.jsonl"
    ex = _cli(srv, "ledger", "export", "-o", str(export), "--server", srv.url, "--token", admin)
    assert ex.returncode == 0, ex.stderr
    key = _cli(srv, "ledger", "public-key")  # the server's own home holds its key
    assert key.returncode == 0, key.stderr
    pub = tmp_path / "server.pub"
    pub.write_text(key.stdout)
    ok = _cli(srv, "ledger", "verify", str(export), "--public-key", str(pub), "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    verdict = json.loads(ok.stdout)
    kinds = [json.loads(line)["kind"] for line in export.read_text().splitlines()[1:]]
    assert kinds.count("run") == 4  # the four finished runs; the running one as "running"
    for kind in ("obligation-opened", "obligation-done", "tier", "running", "governance-tiers"):
        assert kind in kinds, kind
    assert verdict["last_signed_seq"] == len(kinds) == verdict["size"]
    assert "train.py" not in export.read_text()  # totals and hashes, no command lines
    replayed = _cli(srv, "ledger", "replay", str(export), "--json", "--at", "1800000000")
    assert replayed.returncode == 0, replayed.stderr
    status = _cli(srv, "governance", "status", "--json", "--at", "1800000000", "--server",
                  srv.url, "--token", admin)  # fmt: skip
    assert replayed.stdout == status.stdout  # the status, recomputed from the export alone

    lines = export.read_text().splitlines(keepends=True)
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text("".join([*lines[:2], lines[2].replace('"lab"', '"lab2"'), *lines[3:]]))
    bad = _cli(srv, "ledger", "verify", str(tampered), "--public-key", str(pub))
    assert bad.returncode == 1 and "TAMPERED (altered)" in bad.stdout, bad.stdout
    tampered.write_text("".join([*lines[:3], *lines[4:]]))
    bad = _cli(srv, "ledger", "verify", str(tampered), "--public-key", str(pub))
    assert bad.returncode == 1 and "TAMPERED (removed)" in bad.stdout and "entry 3" in bad.stdout
    assert _cli(srv, "ledger", "verify", str(export), "--public-key", str(tmp_path)).returncode


def _count_entries(srv: ServerProcess) -> int:
    db = open_database(srv.db_url)
    try:
        with db.session() as session:
            return count(session)
    finally:
        db.dispose()


@pytest.mark.parametrize(
    ("tamper", "what"),
    [
        ("UPDATE ledger_entries SET body = replace(body, '\"lab\"', '\"x\"') WHERE seq = 2",
         "altered"),
        ("DELETE FROM ledger_entries WHERE seq = 2", "removed"),
        ("UPDATE ledger_entries SET seq = -seq WHERE seq IN (1, 2); "
         "UPDATE ledger_entries SET seq = 3 - (-seq) WHERE seq < 0", "altered"),
    ],
    ids=["update", "delete", "reorder"],
)  # fmt: skip
def test_tampering_with_the_database_is_named(
    make_upload: Callable[..., RunUpload], tmp_path: Path, tamper: str, what: str
) -> None:
    db = open_database(f"sqlite:///{tmp_path / 'server.db'}")
    upgrade(db)
    with db.session() as session:
        store_batch(session, "lab", batch(*[_governed(make_upload, "m", 1e22) for _ in range(3)]))
    key = load_or_create_private_key(tmp_path / "key.pem")
    assert verify_database(db, key.public_key()).ok
    with sqlite3.connect(tmp_path / "server.db") as c:
        c.executescript(tamper)
    verdict = verify_database(db, key.public_key())
    assert verdict.problem is not None
    assert verdict.problem.what == what and verdict.problem.seq in (1, 2), verdict.problem
    db.engine.dispose()


def test_ledger_verify_of_a_database_exits_1_naming_the_entry(
    make_upload: Callable[..., RunUpload], tmp_path: Path, cw: Any
) -> None:
    url = f"sqlite:///{tmp_path / 'server.db'}"
    db = open_database(url)
    upgrade(db)
    with db.session() as session:
        store_batch(session, "lab", batch(_governed(make_upload, "m", 1e22)))
        store_batch(session, "lab", batch(_governed(make_upload, "m", 1e22)))
    db.engine.dispose()
    assert cw("ledger", "verify", "--db", url).returncode == 0
    with sqlite3.connect(tmp_path / "server.db") as c:
        c.execute("DELETE FROM ledger_entries WHERE seq = 1")
    r = cw("ledger", "verify", "--db", url)
    assert r.returncode == 1
    assert r.stdout.strip() == (
        "TAMPERED (removed) in the database: entry 1 was removed (seq jumps to 2)"
    )
    usage = cw("ledger", "verify")
    assert usage.returncode == 2 and "give an export FILE or --db URL" in usage.stderr


def test_upkeep_signs_prunes_and_opens_obligations(
    make_upload: Callable[..., RunUpload],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    count_simulated: Path,
) -> None:
    from computewatch.server.governance_api import maintain_once

    monkeypatch.setenv("COMPUTEWATCH_LEDGER_KEY", str(tmp_path / "key.pem"))
    monkeypatch.setenv("COMPUTEWATCH_CONFIG", str(count_simulated))
    db = open_database(f"sqlite:///{tmp_path / 'server.db'}")
    upgrade(db)
    with db.session() as session:
        store_batch(session, "lab", batch(*[_governed(make_upload, "m", 3e24) for _ in range(4)]))
        store_batch(session, "lab", batch(_governed(make_upload, "big", 2e24, forecast=1.2e25,
                                                    final=False, status="running")))  # fmt: skip
    maintain_once(db, now=time.time())
    with db.session() as session:
        before = service.status(session)
    with sqlite3.connect(tmp_path / "server.db") as c:  # two entries from long ago
        c.execute("UPDATE ledger_entries SET time = '2010-01-01T00:00:00.000000Z' WHERE seq <= 2")
    maintain_once(db, now=time.time() + 7200)
    key = load_or_create_private_key(tmp_path / "key.pem")
    verdict = verify_database(db, key.public_key(), tmp_path / "key.pem.checkpoint")
    assert verdict.ok, verdict.problem
    assert verdict.last_signed_seq == verdict.size and any("pruned" in n for n in verdict.notes)
    with sqlite3.connect(tmp_path / "server.db") as c:
        kinds = [k for (k,) in c.execute("SELECT kind FROM ledger_entries ORDER BY seq")]
        opened = c.execute("SELECT model, tier, trigger FROM obligations ORDER BY id").fetchall()
    assert kinds[-1] == "prune" and kinds.count("run") == 2  # runs 1 and 2 pruned
    assert sorted(opened) == [("lab/big", "eu-systemic-risk", "forecast"),
                              ("lab/m", "eu-systemic-risk", "crossed")]  # fmt: skip
    with db.session() as session:
        after = service.status(session)  # the pruned runs are carried in the prune entry
    assert service_json(after) == service_json(before)
    db.engine.dispose()


def test_a_prune_keeps_simulated_runs_apart_and_dates_their_crossing_either_way(
    make_upload: Callable[..., RunUpload], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pruned runs on simulated devices stay out of the totals while they are not counted, and
    count (crossed when they crossed) once ``count_simulated`` is turned on after the prune."""
    from computewatch.server.governance_api import maintain_once

    monkeypatch.setenv("COMPUTEWATCH_LEDGER_KEY", str(tmp_path / "key.pem"))
    monkeypatch.setenv("COMPUTEWATCH_CONFIG", str(tmp_path / "none.toml"))
    service.count_simulated.cache_clear()
    db = open_database(f"sqlite:///{tmp_path / 'server.db'}")
    upgrade(db)
    with db.session() as session:
        store_batch(session, "lab", batch(*[_governed(make_upload, "m", 3e24) for _ in range(4)]))
    maintain_once(db, now=time.time())
    with db.session() as session:
        before = service.status(session)
    [m] = service_json(before)
    assert m["judged_flop"] is None and m["simulated_runs"] == 4
    with sqlite3.connect(tmp_path / "server.db") as c:  # two runs from long ago
        c.execute("UPDATE ledger_entries SET time = '2010-01-01T00:00:00.000000Z' WHERE seq <= 2")
    maintain_once(db, now=time.time() + 7200)
    with db.session() as session:
        after = service.status(session)
    assert service_json(after) == service_json(before)  # the pruned two still do not count

    monkeypatch.setenv("COMPUTEWATCH_CONFIG", str(tmp_path / "count-simulated.toml"))
    service.count_simulated.cache_clear()
    maintain_once(db, now=time.time() + 7300)
    with db.session() as session:
        [m] = service_json(service.status(session))
    assert m["judged_flop"] == pytest.approx(4 * 3e24 * 1.15)
    tiers = {t["tier"]: t for t in m["tiers"]}
    assert tiers["eu-gpai"]["state"] == "crossed"
    assert tiers["eu-gpai"]["crossed_at"] is not None  # the first run's end, from the snapshot
    db.engine.dispose()


def service_json(statuses: Any) -> Any:
    from computewatch.governance.status import status_json

    return status_json(statuses, 1.8e9)


@pytest.mark.parametrize("db", ["sqlite", "postgresql"])
def test_judging_at_once_opens_one_obligation_and_reading_appends_nothing(
    make_upload: Callable[..., RunUpload], db_url: str, db: str
) -> None:
    """Four threads (each its own connection) run the upkeep at once on a model past 1e25: one
    obligation, one obligation-opened entry; the database refuses a second open one."""
    import threading

    from sqlalchemy.exc import IntegrityError

    from computewatch.serverdb.governance_models import Obligation

    database = open_database(db_url)
    upgrade(database)
    with database.session() as session:
        store_batch(session, "lab", batch(_governed(make_upload, "big", 2e25)))
    errors: list[BaseException] = []

    def judge() -> None:
        try:
            with database.writing(), database.session() as session:
                service.upkeep(session, service.server_tiers(), time.time(), None)
                session.commit()
        except BaseException as e:  # collected: the assertion below says which
            errors.append(e)

    threads = [threading.Thread(target=judge) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    with database.session() as session:
        rows = session.query(Obligation).all()
        n = len(list(service.replay_log(session).obligations))
        before = size(session)
        service.status(session)
        service.status(session)
        assert size(session) == before
    assert [(o.model, o.tier, o.state) for o in rows] == [("lab/big", "eu-systemic-risk", "open")]
    assert n == 1
    with database.session() as session, pytest.raises(IntegrityError):
        session.add(Obligation(model="lab/big", tier="eu-systemic-risk", trigger="crossed", rule="",
                               threshold=1e25, opened_at=0.0, state="open"))  # fmt: skip
        session.flush()
    database.dispose()


def test_obligation_reminders_go_once_each_through_the_delivery(
    make_upload: Callable[..., RunUpload], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    receiver: Any,
) -> None:  # fmt: skip
    from computewatch.governance.reminders import due_reminders
    from computewatch.server.governance_api import maintain_once

    config = tmp_path / "config.toml"
    config.write_text(f'[server]\nbudget_notify = ["webhook:{receiver.url}/hook"]\n'
                      "[governance]\ncount_simulated = true\n")  # fmt: skip
    monkeypatch.setenv("COMPUTEWATCH_CONFIG", str(config))
    monkeypatch.setenv("COMPUTEWATCH_LEDGER_KEY", str(tmp_path / "key.pem"))
    db = open_database(f"sqlite:///{tmp_path / 'server.db'}")
    upgrade(db)
    with db.session() as session:
        store_batch(session, "lab", batch(_governed(make_upload, "big", 2e25)))
    now = time.time()
    maintain_once(db, now=now)  # opens the obligation and says so
    receiver.wait(lambda r: len(r.bodies) >= 1)
    [alert] = receiver.alerts()
    assert alert["labels"]["reminder"] == "opened" and alert["labels"]["model"] == "lab/big"
    assert "14.0 days left" in alert["annotations"]["summary"]
    with db.session() as session:
        assert due_reminders(session, now + 3600) == []  # nothing new an hour later
        [week] = due_reminders(session, now + 8 * 86400)
        assert week.kind == "7d"
        [late] = due_reminders(session, now + 20 * 86400)  # 1d passed unseen: overdue only
        assert late.kind == "overdue"
        assert due_reminders(session, now + 21 * 86400) == []
    db.engine.dispose()


def test_upkeep_failures_are_logged_once_each_and_the_recovery_said(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A loose ledger key or a database away stops the checkpoints: the server says why, once
    per distinct cause, and says when upkeep works again; the loop itself never ends."""
    import asyncio

    from computewatch.server import governance_api

    outcomes: list[Exception | None] = [
        PermissionError("ledger key is readable by others: chmod 600 it"),
        PermissionError("ledger key is readable by others: chmod 600 it"),
        OSError("database is locked"),
        None,
        None,
    ]

    def once(db: object) -> None:
        if not outcomes:
            raise asyncio.CancelledError
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    monkeypatch.setattr(governance_api, "maintain_once", once)
    monkeypatch.setattr(governance_api, "MAINTAIN_SECONDS", 0.0)
    caplog.set_level("WARNING", logger="computewatch.server")
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(governance_api.maintain(None))  # type: ignore[arg-type]
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "ledger upkeep failed (no signed head until it is fixed): "
        "ledger key is readable by others: chmod 600 it",
        "ledger upkeep failed (no signed head until it is fixed): database is locked",
        "ledger upkeep works again",
    ]


def test_the_first_upkeep_replays_the_log_before_it_takes_the_write_lock(
    make_upload: Callable[..., RunUpload], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server's first upkeep replays the whole log (its cache is empty): that replay is read
    before the upkeep's write transaction, so no writer waits for it. (Inside the transaction,
    a server started on 1,000,000 entries held SQLite's write lock for 11 s: other processes'
    writers met their 10 s busy timeout, and the server's uploads waited.)"""
    from computewatch.governance.replay import Replay
    from computewatch.server.governance_api import maintain_once

    monkeypatch.setenv("COMPUTEWATCH_LEDGER_KEY", str(tmp_path / "key.pem"))
    db = open_database(f"sqlite:///{tmp_path / 'server.db'}")
    upgrade(db)
    with db.session() as session:
        store_batch(session, "lab", batch(*[_governed(make_upload, "m", 1e22) for _ in range(30)]))
    service._CACHE.clear()  # as in a server process just started
    fed: list[tuple[bool, int]] = []  # (write lock held, entries fed)
    feed_all = Replay.feed_all

    def counted(self: Replay, entries: Any) -> Replay:
        seen = list(entries)
        fed.append((db._write_lock.locked(), len(seen)))
        return feed_all(self, seen)

    monkeypatch.setattr(Replay, "feed_all", counted)
    maintain_once(db, now=time.time())
    locked = [n for held, n in fed if held]
    assert sum(n for held, n in fed if not held) >= 30, fed  # the log read without the lock
    assert max(locked, default=0) <= 2, fed  # only what was appended since, under the lock
    db.engine.dispose()
