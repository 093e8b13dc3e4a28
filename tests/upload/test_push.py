"""Which runs a push sends, in which batches, and what it remembers."""

from __future__ import annotations

from tests.upload.conftest import FakeIngest, stored_run

from computewatch.store import RunRow, Store
from computewatch.upload.client import Client
from computewatch.upload.protocol import MAX_RUNS_PER_BATCH
from computewatch.upload.push import PushReport, plan_push, push_runs


def _push(
    store: Store,
    ingest: FakeIngest,
    *,
    runs: list[RunRow] | None = None,
    everything: bool = False,
) -> PushReport:
    plan, skipped = plan_push(store, ingest.url, runs, everything=everything)
    report = push_runs(store, Client(ingest.url, "t"), plan, server=ingest.url)
    report.skipped[:0] = skipped
    return report


def test_finished_runs_go_once(store: Store, ingest: FakeIngest) -> None:
    a = stored_run(store, "aaaa0001")
    b = stored_run(store, "bbbb0002")
    stored_run(store, "cccc0003", status="running")
    report = _push(store, ingest)
    assert sorted(report.stored) == [a.id, b.id]
    why = "still running (streamed while it runs, pushed at its end)"
    assert ("cccc0003", why) in report.skipped
    assert store.uploaded(ingest.url) == {a.key: (1, True), b.key: (1, True)}
    # again: nothing to send
    report = _push(store, ingest)
    assert report.stored == [] and len(ingest.requests) == 1


def test_all_sends_again_with_the_same_seq_and_the_server_keeps_one(
    store: Store, ingest: FakeIngest
) -> None:
    a = stored_run(store, "aaaa0001")
    running = stored_run(store, "cccc0003", status="running")
    _push(store, ingest)
    report = _push(store, ingest, everything=True)
    assert report.already == [a.id]
    assert report.stored == [running.id]
    assert [r["seq"] for r in ingest.runs_seen() if r["id"] == a.id] == [1, 1]
    assert store.uploaded(ingest.url)[running.key] == (1, False)
    assert len(ingest.held) == 2


def test_named_runs(store: Store, ingest: FakeIngest) -> None:
    a = stored_run(store, "aaaa0001")
    stored_run(store, "bbbb0002")
    report = _push(store, ingest, runs=[a])
    assert report.stored == [a.id] and list(ingest.held) == [a.id]


def test_a_failed_push_marks_nothing(store: Store, ingest: FakeIngest) -> None:
    stored_run(store, "aaaa0001")
    ingest.status = 503
    report = _push(store, ingest)
    assert report.error is not None and report.error.retryable
    assert store.uploaded(ingest.url) == {}
    ingest.status = 200
    assert _push(store, ingest).stored == ["aaaa0001"]


def test_lost_answers_are_sent_again_with_the_same_seq(store: Store, ingest: FakeIngest) -> None:
    """The server stored the batch and died before answering: the next push sends the same
    seq, the server answers that it holds it, and keeps one copy."""
    a = stored_run(store, "aaaa0001")
    ingest.status = 502
    _push(store, ingest)
    ingest.held[a.id] = ingest.runs_seen()[0]  # stored before the answer was lost
    ingest.status = 200
    report = _push(store, ingest)
    assert report.already == [a.id] and report.stored == []
    assert store.uploaded(ingest.url) == {a.key: (1, True)}


def test_batches_hold_at_most_max_runs(store: Store, ingest: FakeIngest) -> None:
    n = MAX_RUNS_PER_BATCH + 5
    for i in range(n):
        stored_run(store, f"{i:08x}", n=3)
    report = _push(store, ingest)
    assert len(report.stored) == n
    assert [len(r.body["runs"]) for r in ingest.requests] == [MAX_RUNS_PER_BATCH, 5]


def test_uploads_are_remembered_per_server(store: Store, ingest: FakeIngest) -> None:
    a = stored_run(store, "aaaa0001")
    _push(store, ingest)
    plan, _ = plan_push(store, "http://other.example")
    assert [p.run.id for p in plan] == [a.id]
