"""The event hub of a server process on PostgreSQL: notifications that arrive together are
handed to the streams together, one hand-over to the event loop for the lot, not one per
change (each hand-over wakes every stream of the team, and each stream writes to its socket:
at 400 uploads a second and 200 streams a process that was thousands of writes a second)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence

import pytest

from computewatch.server import events
from computewatch.server.events import EventHub, Subscription
from computewatch.serverdb.changes import Change
from computewatch.serverdb.engine import Database, open_database, upgrade
from computewatch.serverdb.ingest import Upload, store_group

from .conftest import PostgresCluster, batch, synthetic_upload


@pytest.fixture
def postgres(postgres_cluster: PostgresCluster) -> Iterator[Database]:
    url = postgres_cluster.create_database()
    d = open_database(url)
    upgrade(d)
    yield d
    d.dispose()
    postgres_cluster.drop_database(url)


async def _take(sub: Subscription, n: int, timeout: float = 30) -> list[Change]:
    got: list[Change] = []
    async with asyncio.timeout(timeout):
        while len(got) < n:
            change = await sub.queue.get()
            assert change is not None
            got.append(change)
    return got


def test_notifications_that_come_together_are_handed_over_together(
    postgres: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed: list[int] = []
    deliver = events._deliver

    def counted(subs: Sequence[Subscription], changes: Sequence[Change]) -> None:
        handed.append(len(changes))
        deliver(subs, changes)

    monkeypatch.setattr(events, "_deliver", counted)
    hub = EventHub(postgres)

    async def scenario() -> list[Change]:
        sub = hub.subscribe(None)
        # one upload and its event first: the hub listens from then on
        await asyncio.to_thread(_store, postgres, ["first"])
        assert [c.id for c in await _take(sub, 1)] == ["first"]
        handed.clear()
        ids = [f"together-{i}" for i in range(50)]
        await asyncio.to_thread(_store, postgres, ids)  # 50 NOTIFYs, sent at one commit
        got = await _take(sub, 50)
        hub.unsubscribe(sub)
        return got

    try:
        got = asyncio.run(scenario())
    finally:
        hub.close()
    assert sorted(c.id for c in got) == sorted(f"together-{i}" for i in range(50))
    assert sum(handed) == 50
    assert len(handed) <= 3, f"{len(handed)} hand-overs for 50 changes committed together"


def _store(d: Database, ids: list[str]) -> None:
    with d.session() as s:
        out = store_group(s, [Upload("a", batch(synthetic_upload(id=i))) for i in ids])
    assert all(isinstance(o, list) and o[0]["stored"] for o in out), out
