"""A stored run as it is uploaded: identity, summary as `show --json`, documents, series in
bounded min/mean/max buckets, secrets redacted."""

from __future__ import annotations

import json
from typing import Any

from tests.upload.conftest import T0, stored_run

from computewatch import jsonout
from computewatch.analysis.summary import current_summary
from computewatch.store import Store
from computewatch.upload.payload import build_upload, downsample_series, scrub
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
