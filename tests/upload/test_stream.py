"""The live uploader: uploads a running run on its own thread, backs off, and makes one final
attempt within its deadline, leaving the rest to `push` with one line."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest
from tests.conftest import free_loopback_port
from tests.upload.conftest import T0, FakeIngest, stored_run, wait_until

from computewatch.store import COMPLETED, Store
from computewatch.upload.settings import ServerSettings
from computewatch.upload.stream import LiveUploader, backoff_delay, next_beat

TOKEN = "cwt_stream-token"


def test_backoff_grows_is_capped_and_jittered() -> None:
    rng = random.Random(1)
    for failures, top in [(1, 10.0), (2, 20.0), (3, 40.0), (10, 120.0), (50, 120.0)]:
        delays = [backoff_delay(failures, 10.0, 120.0, rng) for _ in range(50)]
        assert all(top / 2 <= d <= top for d in delays)
        assert len(set(delays)) > 1


def _finish(store: Store, key: int) -> None:
    store.update_run(key, status=COMPLETED, exit_code=0, ended_at=T0 + 60)


def test_streams_while_running_then_the_final_state(tmp_path: Path, ingest: FakeIngest) -> None:
    db = tmp_path / "cw.db"
    with Store.open(db) as store:
        run = stored_run(store, status="running")
    err = io.StringIO()
    up = LiveUploader(ServerSettings(ingest.url, TOKEN, "proj", 0.05), db, stderr=err)
    up.begin(run.id)
    wait_until(lambda: len(ingest.runs_seen()) >= 3)
    seen = ingest.runs_seen()
    assert all(not r["final"] and r["status"] == "running" for r in seen)
    seqs = [r["seq"] for r in seen]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert seen[0]["project"] == "proj"
    assert up.bytes_sent > 0
    with Store.open(db) as store:
        _finish(store, run.key)
    assert up.close() is True
    last = ingest.held[run.id]
    assert last["final"] and last["status"] == "completed"
    assert last["seq"] > max(seqs[:3])
    with Store.open(db) as store:
        assert store.uploaded(ingest.url)[run.key] == (last["seq"], True)
    assert err.getvalue() == ""
    assert all(r.headers["Authorization"] == f"Bearer {TOKEN}" for r in ingest.requests)


def _closed_port() -> int:
    return free_loopback_port()


def test_an_unreachable_server_leaves_the_run_for_push(tmp_path: Path) -> None:
    db = tmp_path / "cw.db"
    with Store.open(db) as store:
        run = stored_run(store, status="running")
    err = io.StringIO()
    url = f"http://127.0.0.1:{_closed_port()}"
    up = LiveUploader(ServerSettings(url, TOKEN, None, 0.05), db, stderr=err, max_backoff=0.1)
    up.begin(run.id)
    wait_until(lambda: up.failures >= 2)
    with Store.open(db) as store:
        _finish(store, run.key)
        assert up.close() is False
        assert store.uploaded(url) == {}
    lines = err.getvalue().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"computewatch: run {run.id} not uploaded (cannot reach")
    assert lines[0].endswith("it waits in the local store for `computewatch push`")
    assert TOKEN not in err.getvalue()


def test_a_server_that_hangs_costs_the_deadline_only(tmp_path: Path, ingest: FakeIngest) -> None:
    db = tmp_path / "cw.db"
    with Store.open(db) as store:
        run = stored_run(store)
    ingest.hang = 60.0
    err = io.StringIO()
    up = LiveUploader(ServerSettings(ingest.url, TOKEN), db, stderr=err, final_deadline=0.3)
    up.run_id = run.id  # finished already: only the final attempt
    assert up.close() is False
    # the request's own timeout or the deadline, whichever a loaded machine reaches first
    assert "did not answer" in err.getvalue()
    with Store.open(db) as store:
        assert store.uploaded(ingest.url) == {}


def test_a_refused_token_stops_the_stream(tmp_path: Path, ingest: FakeIngest) -> None:
    db = tmp_path / "cw.db"
    with Store.open(db) as store:
        run = stored_run(store, status="running")
    ingest.status = 401
    ingest.reply = b'{"detail": "unknown token"}'
    err = io.StringIO()
    up = LiveUploader(ServerSettings(ingest.url, TOKEN, None, 0.05), db, stderr=err)
    up.begin(run.id)
    assert up._thread is not None
    up._thread.join(20)
    assert not up._thread.is_alive()
    assert len(ingest.requests) == 1  # no retry can help a bad token
    assert up.close() is False
    assert "refused the token (401): unknown token" in err.getvalue()
    assert len(ingest.requests) == 1 and TOKEN not in err.getvalue()


def test_a_run_not_in_the_store_waits_for_push(tmp_path: Path, ingest: FakeIngest) -> None:
    """The store could not take the run (it went to the spool): nothing to stream; one line."""
    db = tmp_path / "cw.db"
    Store.open(db).close()
    err = io.StringIO()
    up = LiveUploader(ServerSettings(ingest.url, TOKEN, None, 0.05), db, stderr=err)
    up.begin("notthere")
    wait_until(lambda: up.failures >= 1)
    assert up.close() is False
    assert "(the store does not hold it yet)" in err.getvalue()
    assert ingest.requests == []


def test_next_beat_is_the_first_beat_at_or_after() -> None:
    assert next_beat(100.0, 100.0, 5.0) == 100.0
    assert next_beat(100.0, 105.0, 5.0) == 105.0  # on a beat: that beat
    assert next_beat(100.0, 105.0 + 1e-12, 5.0) == 105.0  # float noise is not a missed beat
    assert next_beat(100.0, 105.1, 5.0) == 110.0
    assert next_beat(100.0, 131.0, 5.0) == 135.0


class _Clock:
    """time.monotonic for the stream module, moved by the uploader's own waits and its
    uploads' scripted durations."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class _Waits:
    """The uploader's stop event: each wait moves the clock; set after ``stop_after`` waits."""

    def __init__(self, clock: _Clock, stop_after: int) -> None:
        self.clock = clock
        self.left = stop_after

    def wait(self, seconds: float | None = None) -> bool:
        self.left -= 1
        if self.left < 0:
            return True
        self.clock.now += seconds or 0.0
        return False

    def set(self) -> None:
        self.left = -1


def test_a_slow_answer_keeps_the_run_on_its_beat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Uploads go at the run's first upload plus whole intervals, whatever the answers took:
    a run answered late does not come back an interval after the late answer (in step with
    every other run the server answered late), and a slow upload skips beats (ten times its
    time) instead of shifting them."""
    import computewatch.upload.stream as stream

    db = tmp_path / "cw.db"
    with Store.open(db) as store:
        run = stored_run(store, status="running")
    clock = _Clock()
    monkeypatch.setattr(stream, "time", clock)
    took = iter([0.05, 0.8, 0.05, 1.2, 0.05, 0.05, 0.05])
    starts: list[float] = []

    class Scripted(LiveUploader):
        def _send(self, store: Store, run_key: int, timeout: float) -> int:
            starts.append(clock.now)
            clock.now += next(took)
            return 1000

    up = Scripted(ServerSettings("http://127.0.0.1:9", TOKEN, "proj", 5.0), db)
    up._stop = _Waits(clock, stop_after=7)  # type: ignore[assignment]
    up.run_id = run.id
    up._loop()
    first = starts[0]
    assert first == 1001.0  # the first upload after min(interval, 1 s)
    offsets = [round(s - first, 6) for s in starts]
    # at +5, 0.8 s: quiet until +13, the beat +15; at +20, 1.2 s: until +32, the beat +35
    assert offsets == [0.0, 5.0, 15.0, 20.0, 35.0, 40.0, 45.0]
