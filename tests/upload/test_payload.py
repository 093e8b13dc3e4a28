"""A stored run as it is uploaded: identity, summary as `show --json`, documents, series in
bounded min/mean/max buckets, secrets redacted."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from tests.upload.conftest import T0, stored_run

from computewatch import jsonout
from computewatch.analysis.summary import current_summary
from computewatch.readings import Kind
from computewatch.store import Store
from computewatch.upload.payload import SeriesBuckets, build_upload, downsample_series, scrub
from computewatch.upload.protocol import MAX_POINTS


def _roundtrip(doc: Any) -> Any:
    return json.loads(jsonout.dumps(doc))


def test_identity_and_summary_as_show_prints_it(store: Store) -> None:
    run = stored_run(store, tags={"project": "llm", "team": "a"})
    up = build_upload(store, run, seq=3, project="fallback", user="alice")
    assert (up["id"], up["seq"], up["final"], up["status"]) == (run.id, 3, True, "completed")
    assert (up["host"], up["user"], up["project"]) == ("box", "alice", "llm")
    assert up["started_at"] == T0 and up["ended_at"] == T0 + 30
    assert up["tags"] == {"project": "llm", "team": "a"}
    assert _roundtrip(up["summary"]) == _roundtrip(current_summary(store, run))


def test_project_falls_back_to_the_configured_one(store: Store) -> None:
    run = stored_run(store)
    assert build_upload(store, run, seq=1, project="fallback")["project"] == "fallback"
    assert build_upload(store, run, seq=1)["project"] is None


def test_a_running_run_is_not_final(store: Store) -> None:
    run = stored_run(store, status="running")
    up = build_upload(store, run, seq=1)
    assert not up["final"] and up["status"] == "running"
    assert up["summary"] is not None and up["summary"]["status"] == "running"


def test_meta_documents_travel(store: Store) -> None:
    run = stored_run(store)
    store.set_meta(run.key, "config", {"lr": 0.001, "layers": 12})
    up = build_upload(store, run, seq=1)
    assert up["meta"] == {"config": {"lr": 0.001, "layers": 12}}


def test_secrets_are_redacted_in_every_field(store: Store) -> None:
    run = stored_run(
        store,
        tags={"api_key": "tagsecret", "db": "postgres://u:pwsecret@h/db"},
        command=["python", "train.py", "--hf-token", "argvsecret", "--lr=3"],
    )
    # what another writer might have left in the store unredacted, and documents by kind
    store.conn.execute(
        "UPDATE runs SET command=? WHERE key=?",
        (json.dumps(["python", "--password=rawsecret"]), run.key),
    )
    store.set_meta(
        run.key,
        "config",
        {
            "wandb_api_key": "metasecret",
            "nested": [{"token": "deepsecret"}, "Authorization: Bearer hdrsecret"],
            "url": "https://user:urlsecret@example.org/x",
            "tokens_per_second": 123.0,
        },
    )
    run = store.run_by_key(run.key)
    up = build_upload(store, run, seq=1, extra_names=["mycorp"])
    text = jsonout.dumps(up)
    for secret in (
        "tagsecret", "pwsecret", "argvsecret", "rawsecret", "metasecret", "deepsecret",
        "hdrsecret", "urlsecret",
    ):  # fmt: skip
        assert secret not in text, secret
    assert up["command"] == ["python", "--password=***"]
    assert up["summary"] is not None and up["summary"]["command"] == up["command"]
    assert up["meta"]["config"]["tokens_per_second"] == 123.0  # a figure, not a secret
    assert up["tags"]["api_key"] == "***"


def test_configured_names_are_redacted() -> None:
    assert scrub({"mycorp_id": "x", "other": "mycorp_id=y"}, ("mycorp",)) == {
        "mycorp_id": "***",
        "other": "mycorp_id=***",
    }


def test_series_stay_within_max_points_and_keep_the_peak(store: Store) -> None:
    run = stored_run(store, n=2000, spike_at=1234)
    series = {s["name"]: s for s in downsample_series(store, run, max_points=100)}
    gauge = series["host_load1"]
    assert len(gauge["points"]) <= 100
    assert gauge["bucket_seconds"] == 20.0
    assert all(lo <= mean <= hi for _, lo, mean, hi in gauge["points"])
    assert max(hi for *_, hi in gauge["points"]) == 99.0  # the one-tick spike survives
    assert gauge["points"][0][0] == T0


def test_counters_go_as_rates(store: Store) -> None:
    run = stored_run(store, n=50, counter_per_second=5.0)
    rate = next(s for s in downsample_series(store, run, 10) if s["name"].endswith("_total"))
    assert rate["kind"] == "rate" and rate["labels"] == {"scope": "tree"}
    assert all(p[1:] == [5.0, 5.0, 5.0] for p in rate["points"])


def test_a_counter_reset_counts_from_zero(store: Store) -> None:
    run = stored_run(store, n=4)
    store.conn.execute(
        "UPDATE samples SET value=1 WHERE run_key=? AND series=1 AND seq=3", (run.key,)
    )
    rate = next(s for s in downsample_series(store, run, 10) if s["kind"] == "rate")
    assert [p[2] for p in rate["points"]] == [5.0, 5.0, 1.0]


def test_a_short_series_goes_whole(store: Store) -> None:
    run = stored_run(store, n=10)
    gauge = next(s for s in downsample_series(store, run) if s["name"] == "host_load1")
    assert gauge["bucket_seconds"] == 0.0
    assert gauge["points"] == [[T0 + i, 50.0, 50.0, 50.0] for i in range(10)]


def test_default_bound_is_the_protocols(store: Store) -> None:
    run = stored_run(store, n=MAX_POINTS * 3 + 7)
    for s in downsample_series(store, run):
        assert len(s["points"]) <= MAX_POINTS


def test_a_run_without_samples_has_no_series(store: Store) -> None:
    key = store.create_run(
        run_id="empty1", name=None, tags={}, command=["true"], cwd=None, mode="run",
        started_at=T0, interval_seconds=1.0, host={},
    )  # fmt: skip
    up = build_upload(store, store.run_by_key(key), seq=1)
    assert up["series"] == [] and up["host"]


def test_buckets_kept_across_updates_equal_a_fresh_read(store: Store) -> None:
    """A running run read seven ticks at a time (as the live uploader reads it between
    uploads) ends with the same buckets as one read of the whole run, through k doublings,
    counters with a reset and a series that starts late."""
    key = store.create_run(
        run_id="grow0001", name=None, tags={}, command=["x"], cwd=None, mode="run",
        started_at=T0, interval_seconds=1.0, host={},
    )  # fmt: skip
    store.write_batch(
        key,
        series=[
            (0, "g", {}, Kind.GAUGE),
            (1, "c_total", {}, Kind.COUNTER),
            (2, "late", {}, Kind.GAUGE),
        ],
    )
    run = store.run_by_key(key)
    live = SeriesBuckets(max_points=10)
    total = 0.0
    for first in range(0, 137, 7):
        seqs = range(first, min(first + 7, 137))
        samples = []
        for i in seqs:
            total = 3.0 if i == 90 else total + (i % 5)  # a reset at tick 90
            samples += [(key, i, 0, float((i * 37) % 11)), (key, i, 1, total)]
            if i >= 60:
                samples.append((key, i, 2, float(i)))
        store.write_batch(key, ticks=[(i, 10.0 + i, T0 + i) for i in seqs], samples=samples)
        live.update(store, run)
        assert all(len(s["points"]) <= 10 for s in live.uploads(1.0))
    fresh = SeriesBuckets(max_points=10)
    fresh.update(store, run)
    assert live.k == fresh.k == 16
    assert live.uploads(1.0) == fresh.uploads(1.0)
    ups = {s["name"]: s for s in live.uploads(1.0)}
    assert ups["late"]["points"][0][0] == T0 + 48  # the bucket of ticks 48-63
    assert ups["c_total"]["kind"] == "rate" and ups["g"]["bucket_seconds"] == 16.0
    assert min(p[1] for p in ups["c_total"]["points"]) >= 0.0  # the reset is no negative rate


def test_live_summary_equals_the_one_built_from_the_store(store: Store) -> None:
    """The summary's aggregates fed between uploads give the summary a read of the whole run
    gives (what `show --json` prints), steps and a writer included."""
    from computewatch.analysis.aggregates import aggregates_from_store
    from computewatch.analysis.summary import summary_of
    from computewatch.upload.payload import LiveRun

    key = store.create_run(
        run_id="live0001", name="live", tags={}, command=["x"], cwd=None, mode="run",
        started_at=T0, interval_seconds=1.0, host={"allowed_cores": 2.0, "hostname": "box"},
    )  # fmt: skip
    store.write_batch(
        key,
        series=[
            (0, "tree_cpu_seconds_total", {}, Kind.COUNTER),
            (1, "tree_resident_memory_bytes", {}, Kind.GAUGE),
            (2, "host_memory_used_bytes", {}, Kind.GAUGE),
        ],
        writers=[(4001, 100.0, {"name": "live", "pid": 4001})],
    )
    live = LiveRun()
    cpu = 0.0
    for first in range(0, 200, 9):
        seqs = range(first, min(first + 9, 200))
        samples = []
        for i in seqs:
            cpu += 0.5 + (i % 3) * 0.25
            samples += [(key, i, 0, cpu), (key, i, 1, 1e6 * (i % 17)), (key, i, 2, 5e8 + i)]
        store.write_batch(
            key,
            ticks=[(i, 100.0 + i, T0 + i) for i in seqs],
            samples=samples,
            steps=[(4001, 100.0 + i + 0.5, T0 + i + 0.5, 32.0, 100.0 * i) for i in seqs],
            data_until=T0 + seqs[-1],
        )
        up = build_upload(store, store.run_by_key(key), seq=first + 1, live=live)
        assert up["summary"] is not None and up["summary"]["status"] == "running"
    store.update_run(key, status="completed", exit_code=0, ended_at=T0 + 200)
    done = store.run_by_key(key)
    kept = summary_of(store, done, live.aggregates)
    fresh = summary_of(store, done, aggregates_from_store(store, done))
    assert _roundtrip(kept) == _roundtrip(fresh)
    assert kept["steps"] is not None and kept["steps"]["count"] == 200


def test_uploads_that_continue_the_last_stored_one_add_up_to_the_whole(store: Store) -> None:
    """The live uploader's uploads against a server that takes ``series_base``: after the
    first, each carries each series' points from its last bucket on; merged as the server
    merges them (computewatch.serverdb.series), they equal the run's whole series at every
    upload, through k doublings (each sent whole), a lost answer and a refused one."""
    from computewatch.serverdb.series import merge_parts
    from computewatch.upload.payload import LiveRun
    from computewatch.upload.protocol import FEATURE_SERIES_BASE

    key = store.create_run(
        run_id="delta001", name=None, tags={}, command=["x"], cwd=None, mode="run",
        started_at=T0, interval_seconds=1.0, host={},
    )  # fmt: skip
    store.write_batch(
        key, series=[(0, "g", {}, Kind.GAUGE), (1, "c_total", {}, Kind.COUNTER),
                     (2, "late", {}, Kind.GAUGE)],
    )  # fmt: skip
    live = LiveRun(max_points=10)
    held: list[list[Any]] = []  # the server's parts of the run
    held_seq = 0
    bases: list[int | None] = []
    total = 0.0
    for seq, first in enumerate(range(0, 137, 5), start=1):
        ticks = range(first, min(first + 5, 137))
        samples = []
        for i in ticks:
            total += i % 5
            samples += [(key, i, 0, float((i * 37) % 11)), (key, i, 1, total)]
            if i >= 60:
                samples.append((key, i, 2, float(i)))
        store.write_batch(key, ticks=[(i, 10.0 + i, T0 + i) for i in ticks], samples=samples)
        run = store.run_by_key(key)
        up = build_upload(store, run, seq=seq, max_points=10, live=live)
        base = up.get("series_base")
        bases.append(base)
        if seq == 12:  # the answer is lost: the server stored it, the client never heard
            held, held_seq = [up["series"]], seq
            continue
        if base is not None and base != held_seq:
            live.answered(seq, {"id": run.id, "seq": seq, "stored": False, "needs_full": True},
                          [FEATURE_SERIES_BASE])  # fmt: skip
            up = build_upload(store, run, seq=seq, max_points=10, live=live)
            assert "series_base" not in up
        if up.get("series_base") is None:
            held = [up["series"]]
        else:
            held.append(up["series"])
        held_seq = seq
        live.answered(seq, {"id": run.id, "seq": seq, "stored": True}, [FEATURE_SERIES_BASE])
        whole = live.series.uploads(1.0)  # what a whole upload would carry now
        assert _roundtrip(merge_parts(held)) == _roundtrip(whole), seq
    assert bases[0] is None and bases[1] == 1  # the second continues the first
    assert sum(b is not None for b in bases) > len(bases) // 2
    assert bases[12] == 11  # sent after the lost answer: continued 11, sent back, resent whole
    assert bases[2] is None  # the buckets widened (k doubled): whole


def test_a_server_without_the_feature_gets_whole_uploads(store: Store) -> None:
    from computewatch.upload.payload import LiveRun

    run = stored_run(store, status="running")
    live = LiveRun()
    for seq in (1, 2, 3):
        up = build_upload(store, run, seq=seq, live=live)
        assert "series_base" not in up
        live.answered(seq, {"id": run.id, "seq": seq, "stored": True}, [])


def _counted_run(store: Store, *, declared_total: int | None = None) -> Any:
    """A run started 10 s ago, running, with 11 steps of 1e20 counted FLOP one second apart."""
    t0 = time.time() - 10.0
    key = store.create_run(
        run_id="flop0001", name="flops", tags={}, command=["x"], cwd=None, mode="run",
        started_at=t0, interval_seconds=1.0, host={"allowed_cores": 2.0, "hostname": "box"},
    )  # fmt: skip
    meta: dict[str, Any] = {"name": "flops", "pid": 4001}
    if declared_total is not None:
        meta["total_steps"] = declared_total  # track(total_steps=)
    store.write_batch(
        key,
        ticks=[(i, 100.0 + i, t0 + i) for i in range(11)],
        steps=[(4001, 100.0 + i, t0 + i, None, None, 1e20) for i in range(11)],
        writers=[(4001, 100.0, meta)],
        data_until=t0 + 10,
    )
    return store.run_by_key(key)


def test_a_live_upload_carries_the_flops_so_far_and_their_forecast(store: Store) -> None:
    from computewatch.upload.payload import LiveRun

    run = _counted_run(store)
    up = build_upload(store, run, seq=1, live=LiveRun(total_steps=101))
    s = up["summary"]
    assert s is not None and not up["final"]
    flops = s["flops"]
    assert flops["method"] == "counted" and flops["value"] == 11e20
    assert flops["flops_per_second"]["value"] == 1e20  # 10 steps of 1e20 in 10 s
    fc = s["forecast"]
    assert (fc["total_steps"], fc["steps_done"], fc["complete"]) == (101, 11, False)
    # 90 steps to go at 1 s: 100 s in all, 10 times the FLOPs of the first 10 s
    assert fc["flops"]["high"] >= fc["flops"]["value"] == pytest.approx(1.1e22, rel=0.05)
    assert "energy" not in s and "energy_kwh" not in fc  # at the run's end only


def test_a_live_upload_forecasts_to_the_step_target_track_declared(store: Store) -> None:
    run = _counted_run(store, declared_total=1000)
    s = build_upload(store, run, seq=1)["summary"]
    assert s is not None and s["forecast"]["total_steps"] == 1000


def test_a_live_upload_without_a_step_target_has_no_forecast(store: Store) -> None:
    s = build_upload(store, _counted_run(store), seq=1)["summary"]
    assert s is not None and s["flops"]["value"] == 11e20 and "forecast" not in s


def test_live_uploads_count_flops_from_the_new_steps_only(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the first read, a live upload's FLOPs and forecast come from the steps stored since
    the last upload (the run's history is not read again), and equal a whole build's."""
    from computewatch.accounting.engine import live_accounting
    from computewatch.upload.payload import LiveRun

    run = _counted_run(store)
    live = LiveRun(total_steps=101)
    reads: list[int] = []
    real = Store.steps
    monkeypatch.setattr(Store, "steps", lambda self, key: reads.append(key) or real(self, key))
    for seq in range(1, 4):
        t0 = run.started_at
        more = [(4001, 111.0 + 10 * seq + i, t0 + 11 + i, None, None, 2e20) for i in range(10)]
        store.write_batch(run.key, steps=more, data_until=t0 + 30 * seq)
        run = store.run_by_key(run.key)
        reads.clear()
        s = build_upload(store, run, seq=seq, live=live)["summary"]
        assert reads == [], "a live upload read every step again"
        assert s is not None
        whole = live_accounting(store, run, s, total_steps=101)  # every step read
        assert s["flops"] == whole["flops"] and s["forecast"] == whole.get("forecast")
        assert s["flops"]["value"] == 11e20 + seq * 10 * 2e20
