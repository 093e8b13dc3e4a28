"""Governance as a replay of the log (computewatch.governance.replay): runs, running runs and
forecasts make each model's compute and tiers; a tier entry must say what the runs before it
give; an obligation must follow a recorded crossing with its tier's deadline; a done one must
have been open; a prune entry's snapshot carries what the pruned entries added up to."""

from __future__ import annotations

from typing import Any

from computewatch.governance.replay import Replay, tier_json
from computewatch.governance.status import status_json
from computewatch.governance.tiers import DEFAULT_TIERS
from computewatch.ledger.log import LogEntry


def _figures(model: str, flop: float, stage: str = "pretrain") -> dict[str, Any]:
    return {
        "model": model,
        "base_model": None,
        "stage": stage,
        "gpu_hours": 8.0,
        "energy_kwh": 1.0,
        "duration_seconds": 3600.0,
        "devices": [{"model": "H100-SXM", "count": 8}],
        "flops": {"hardware": {"value": flop, "low": flop * 0.9, "high": flop * 1.1}},
    }


def _run(run_id: str, model: str, flop: float, **over: Any) -> tuple[str, dict[str, Any]]:
    body = {
        "run_id": run_id,
        "team": "lab",
        "status": "completed",
        "seq": 1,
        "started_at": 1.7e9,
        "ended_at": 1.7e9 + 3600,
        "figures": _figures(model, flop),
    }
    body.update(over)
    return "run", body


def _log(*items: tuple[str, dict[str, Any]]) -> Replay:
    r = Replay()
    for seq, (kind, body) in enumerate(items, 1):
        r.feed(LogEntry(seq, "2026-12-01T10:00:00.000000Z", kind, body))
    return r


TIERS = ("governance-tiers", {"tiers": [tier_json(t) for t in DEFAULT_TIERS]})


def _tier(model: str, tier: str, state: str) -> tuple[str, dict[str, Any]]:
    return "tier", {
        "model": model,
        "tier": tier,
        "state": state,
        "judged_flop": None,
        "method": "hardware",
        "threshold": 1e25,
    }


def _opened(
    oid: int,
    model: str,
    tier: str,
    deadline: str = "2026-12-15T10:00:00Z",
) -> tuple[str, dict[str, Any]]:
    return "obligation-opened", {
        "obligation": oid,
        "model": model,
        "tier": tier,
        "trigger": "crossed",
        "rule": "r",
        "judged_flop": 1.1e25,
        "method": "hardware",
        "threshold": 1e25,
        "opened_at": "2026-12-01T10:00:00Z",
        "deadline": deadline,
        "state": "open",
        "done_at": None,
        "reference": None,
    }


def test_runs_make_the_status_and_the_newest_entry_of_a_run_wins() -> None:
    r = _log(_run("a", "m", 6e24), _run("b", "m", 3e24), _run("a", "m", 1e24))
    [s] = r.statuses()
    assert len(s.compute.runs) == 2
    assert s.compute.cumulative["hardware"].value == 4e24
    states = {t.tier.name: t.state for t in s.tiers}
    assert states["eu-gpai"] == "crossed" and states["eu-systemic-risk"] == "approaching"


def test_a_running_entry_brings_the_forecast_and_the_run_leaves_it_when_done() -> None:
    running = (
        "running",
        {
            "model": "big",
            "runs": [
                {
                    "run_id": "x",
                    "team": "lab",
                    "started_at": 1.7e9,
                    "figures": _figures("big", 2e24),
                }
            ],
            "forecast_additional_flop_high": 1e25,
        },
    )
    r = _log(running)
    [s] = r.statuses()
    assert {t.tier.name: t.state for t in s.tiers}["eu-systemic-risk"] == "forecast"
    assert status_json([s], 0)[0]["forecast_additional_flop_high"] == 1e25
    r.feed(LogEntry(2, "t", *_run("x", "big", 2e24)))
    [s] = r.statuses()
    assert [run.run_id for run in s.compute.runs] == ["x"] and s.compute.runs[0].status != "running"


def test_governance_entries_that_do_not_add_up_are_problems() -> None:
    r = _log(TIERS, _run("a", "m", 2e24), _tier("m", "eu-systemic-risk", "crossed"))
    assert r.problems and "entries before it give approaching" in r.problems[0][1]
    r = _log(TIERS, _run("a", "m", 2e25), _opened(1, "m", "eu-systemic-risk"))
    assert any("without a recorded crossing" in p for _, p in r.problems)
    r = _log(
        TIERS,
        _run("a", "m", 2e25),
        _tier("m", "eu-systemic-risk", "crossed"),
        _opened(1, "m", "eu-systemic-risk", deadline="2026-12-30T10:00:00Z"),
    )
    assert [p for _, p in r.problems] == [
        "obligation 1's deadline is not 14 days after it opened, as eu-systemic-risk says"
    ]
    r = _log(TIERS, ("obligation-done", {"obligation": 4, "reference": "x"}))
    assert "was marked done but was not open" in r.problems[0][1]
    good = _log(
        TIERS,
        _run("a", "m", 2e25),
        _tier("m", "eu-gpai", "crossed"),
        _tier("m", "eu-systemic-risk", "crossed"),
        _opened(1, "m", "eu-systemic-risk"),
        (
            "obligation-done",
            {"obligation": 1, "reference": "EU-17", "done_at": "2026-12-02T10:00:00Z"},
        ),
    )
    assert good.problems == []
    [o] = good.statuses()[0].obligations
    assert (o.state, o.reference) == ("done", "EU-17")


def test_a_prune_snapshot_carries_the_pruned_state() -> None:
    items = [
        TIERS,
        _run("a", "m", 6e24),
        _run("b", "m", 5e24),
        _tier("m", "eu-gpai", "crossed"),
        _tier("m", "eu-systemic-risk", "crossed"),
        _opened(1, "m", "eu-systemic-risk"),
        _run("c", "m", 1e24),
    ]
    whole = _log(*items)
    before = Replay()
    t = "2026-12-01T10:00:00.000000Z"
    for seq, (kind, body) in enumerate(items[:5], 1):
        before.feed(LogEntry(seq, t, kind, body))
    kept = Replay(first_seq=6, size=5)
    kept.load_snapshot(before.snapshot())
    kept.carried_loaded = True
    for seq, (kind, body) in enumerate(items[5:], 6):
        kept.feed(LogEntry(seq, t, kind, body))
    kept.feed(LogEntry(8, t, "prune", {"first_seq": 6, "governance": before.snapshot()}))
    assert kept.problems == []
    assert status_json(kept.statuses(), 0) == status_json(whole.statuses(), 0)


def test_a_model_is_team_and_name_and_entries_before_that_name_the_first_team() -> None:
    """Two teams' runs of one name are two models; a bare name in a tier, obligation or
    running entry written before models were qualified is the model of the team that first
    declared it, as migration 0008 qualified the obligations table."""
    beta = _run("b", "m", 2e25, team="beta")
    ft = _run("f", "chat", 1e23, team="beta")
    ft[1]["figures"]["base_model"] = "lab/m"
    r = _log(
        TIERS,
        _run("a", "m", 6e24),
        beta,
        ft,
        _tier("m", "eu-gpai", "crossed"),  # legacy: lab's (the first to declare m)
        _tier("beta/m", "eu-gpai", "crossed"),
        _tier("beta/m", "eu-systemic-risk", "crossed"),
        _opened(1, "beta/m", "eu-systemic-risk"),
    )
    assert r.problems == []
    by = {s.compute.model: s for s in r.statuses()}
    assert set(by) == {"lab/m", "beta/m", "beta/chat"}
    assert by["lab/m"].compute.cumulative["hardware"].value == 6e24
    assert by["beta/m"].compute.cumulative["hardware"].value == 2e25
    assert by["beta/chat"].compute.base_model == "lab/m"
    assert by["beta/chat"].compute.cumulative["hardware"].value == 6e24 + 1e23
    assert [o.model for o in r.obligations.values()] == ["beta/m"]
    assert r.owners == {"m": "lab", "chat": "beta"}
    # a legacy running entry of the name holds every team's running runs of it
    running = {
        "model": "m",
        "runs": [
            {"run_id": "x", "team": "beta", "started_at": 1.7e9, "figures": _figures("m", 1e20)}
        ],
        "forecast_additional_flop_high": 5e25,
    }
    r.feed(LogEntry(9, "2026-12-01T10:00:00.000000Z", "running", running))
    assert set(r.running) == {"beta/m"} and r.forecasts == {"lab/m": 5e25}
    # beta's view: its runs only, lab's base model not its to see
    [chat, m] = r.statuses(frozenset({"beta"}))
    assert chat.hidden_base and m.compute.model == "beta/m"
