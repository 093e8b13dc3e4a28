"""Phases, data waits, requests, declared FLOPs and rank metadata, end to end: a real script
inside ``computewatch run`` (attached) and on its own (``track()`` starts a sampler), read back
from the store."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from computewatch.store import Store

pytestmark = pytest.mark.slow

SCRIPT = """
import time
import computewatch

with computewatch.track(name="anatomy") as run:
    run.set_flops(per_token=100.0)

    def slow_data():
        for i in range(3):
            time.sleep(0.03)
            yield i

    for i in run.data(slow_data()):
        with run.phase("outer"):
            with run.phase("inner"):
                time.sleep(0.002)
        try:
            with computewatch.phase("boom"):
                raise ValueError("a failing phase")
        except ValueError:
            pass
        run.step(samples=2, tokens=10)

    @run.phase("recurse")
    def recurse(n):
        return recurse(n - 1) if n else 0

    recurse(1)
    run.step()

    @run.request("generate")
    def generate(prompt):
        if prompt == "bad":
            raise RuntimeError("failed request")
        return prompt.upper()

    for prompt in ("a", "bad", "b"):
        try:
            generate(prompt)
        except RuntimeError:
            pass
    with run.request("chat", tokens_in=5) as r:
        r.tokens_out = 7
    try:
        with run.request("chat", tokens_in=3):
            raise KeyError("x")
    except KeyError:
        pass
"""


@pytest.mark.parametrize("where", ["attached", "standalone"])
def test_phases_requests_flops_and_ranks_are_stored(cw, make_script, where) -> None:
    script = make_script("anatomy.py", SCRIPT)
    cmd = [sys.executable, script]
    if where == "attached":
        cmd = [sys.executable, "-m", "computewatch", "run", "--quiet", "--", *cmd]
    env = cw.env(RANK="1", LOCAL_RANK="1", WORLD_SIZE="2")
    r = subprocess.run(
        cmd, capture_output=True, text=True, env=env, cwd=cw.tmp, timeout=120, check=False
    )
    assert r.returncode == 0, r.stderr
    with Store.open(cw.db, create=False) as store:
        run = store.find_run("last")
        assert run.mode == ("run" if where == "attached" else "track")
        steps = store.steps(run.key)
        phases = store.phases(run.key)
        requests = store.requests(run.key)
        writers = store.writers(run.key)

    # set_flops(per_token=...): each step with tokens gets tokens × FLOPs per token
    assert [(s.samples, s.tokens, s.flops) for s in steps] == [(2, 10, 1000)] * 3 + [
        (None, None, None)
    ]
    (meta,) = [m for _, m in writers.values()]
    assert meta["settings"] == {"flops_per_token": 100.0}
    assert (meta["rank"], meta["local_rank"], meta["world_size"]) == (1, 1, 2)

    by_name: dict[str, list[Any]] = {}
    for p in phases:
        by_name.setdefault(p.name, []).append(p)
    assert {k: len(v) for k, v in by_name.items()} == {
        "data": 3, "outer": 3, "inner": 3, "boom": 3, "recurse": 2,
    }  # fmt: skip
    assert all(p.end - p.start >= 0.025 for p in by_name["data"])  # the generator's sleep
    for outer, inner in zip(by_name["outer"], by_name["inner"], strict=True):
        assert outer.start <= inner.start <= inner.end <= outer.end
        assert inner.end - inner.start >= 0.002
    deep, shallow = sorted(by_name["recurse"], key=lambda p: p.end - p.start)
    assert shallow.start <= deep.start and deep.end <= shallow.end
    for i, step in enumerate(steps[:3]):  # each step's phases end inside it
        prev = steps[i - 1].mono if i else float("-inf")
        names = sorted(p.name for p in phases if prev < p.end <= step.mono)
        assert names == ["boom", "data", "inner", "outer"]

    assert [(q.name, q.ok) for q in requests] == [
        ("generate", True), ("generate", False), ("generate", True), ("chat", True),
        ("chat", False),
    ]  # fmt: skip
    assert (requests[3].tokens_in, requests[3].tokens_out) == (5, 7)
    assert (requests[4].tokens_in, requests[4].tokens_out) == (3, None)
    assert all(q.start <= q.end for q in requests)
