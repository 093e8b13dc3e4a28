"""Two server processes on one database, eight clients uploading the same runs at once in any
order of ``seq``: every upload is answered 200 (a race on a new run id is retried as an update),
each run is stored once, and the highest ``seq`` wins."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from computewatch.upload.protocol import RunUpload

RUNS = "/api/v1/runs"


@pytest.mark.slow
def test_concurrent_uploads_of_the_same_runs(
    server: Callable[..., Any], make_upload: Callable[..., RunUpload], make_batch: Any
) -> None:
    a = server()
    b = server(db_url=a.db_url)
    token = a.token("ml", "ingest")
    ids = [f"run-{i:02d}" for i in range(12)]
    uploads = [
        make_upload(id=i, seq=seq, status="completed" if seq == 3 else "running")
        for i in ids
        for seq in (1, 2, 3)
    ]
    statuses: list[int] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        rng = random.Random(k)
        mine = uploads[:]
        rng.shuffle(mine)
        target = (a, b)[k % 2]
        with httpx.Client(
            base_url=target.url, headers={"Authorization": f"Bearer {token}"}, timeout=120
        ) as c:
            for j in range(0, len(mine), 6):
                r = c.post(RUNS, json=make_batch(*mine[j : j + 6]))
                with lock:
                    statuses.append(r.status_code)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(statuses) == {200}, statuses
    page = a.client(token).get(RUNS, params={"limit": 500}).json()
    assert sorted(r["id"] for r in page["runs"]) == ids
    assert {(r["seq"], r["status"]) for r in page["runs"]} == {(3, "completed")}
