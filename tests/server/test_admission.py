"""An overloaded server says so at once: past ``--max-queued-uploads`` waiting uploads the next
is answered 429 with Retry-After (never 5xx, never a wait without bound), and every upload
retried as told is stored once. Real ``computewatch server`` on SQLite."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from computewatch.upload.protocol import RunUpload

pytestmark = pytest.mark.parametrize("db", ["sqlite"], indirect=True)


def test_uploads_past_the_queue_are_refused_at_once_then_stored(
    server: Callable[..., Any], make_upload: Callable[..., RunUpload], make_batch: Any
) -> None:
    s = server(args=["--max-queued-uploads", "1"])
    token = s.token("a", "ingest")
    bodies = {f"adm-{i}": make_batch(make_upload(id=f"adm-{i}")) for i in range(24)}
    answers: dict[str, list[int]] = {k: [] for k in bodies}
    retry_after: set[str] = set()

    def send(run_id: str) -> None:
        with httpx.Client(base_url=s.url, timeout=120) as c:
            for _ in range(200):  # bounded: 429s are retried as the server asks
                r = c.post(
                    "/api/v1/runs",
                    json=bodies[run_id],
                    headers={"Authorization": f"Bearer {token}"},
                )
                answers[run_id].append(r.status_code)
                if r.status_code != 429:
                    return
                assert r.json()["error"] == "busy"
                retry_after.add(r.headers["Retry-After"])
                time.sleep(0.05)

    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        list(pool.map(send, bodies))
    codes = [c for a in answers.values() for c in a]
    assert set(codes) <= {200, 429}, codes
    assert 429 in codes and retry_after == {"1"}
    assert all(a[-1] == 200 for a in answers.values()), answers
    reader = s.client(token)
    for run_id in bodies:
        assert reader.get(f"/api/v1/runs/{run_id}").status_code == 200
    assert "Traceback" not in s.output()
