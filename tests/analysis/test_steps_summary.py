"""Phases, ranks and requests sections of the summary, on runs written into a store by hand
with hand-computed answers, and on a real ``track()`` run."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from computewatch.analysis.steps import request_accounting, steps_sections
from computewatch.analysis.summary import build_summary
from computewatch.records import figure
from computewatch.store import COMPLETED, RunRow, Store
from computewatch.views.html.run import build_html
from computewatch.views.html.steps import phases_table, requests_table
from computewatch.views.summary_text import print_summary

T0 = 1_700_000_000.0
M0 = 100.0  # monotonic time of every writer's track() start
Request = tuple[int, str, float, float, float | None, float | None, bool]


def write_run(
    store: Store,
    *,
    steps: Sequence[tuple[int, float]] = (),
    phases: Sequence[tuple[int, str, float, float, float | None]] = (),
    requests: Sequence[Request] = (),
    writers: dict[int, dict[str, Any]] | None = None,
) -> RunRow:
    rk = store.create_run(
        run_id="0b0b0b0b0b0b",
        name="anatomy",
        tags={},
        command=["python", "train.py"],
        cwd="/work",
        mode="run",
        started_at=T0,
        interval_seconds=0.5,
        host={"allowed_cores": 1.0, "logical_cpus": 1},
    )
    pids = {p for p, _ in steps} | {p[0] for p in phases} | {r[0] for r in requests}
    metas = writers if writers is not None else {p: {} for p in pids}
    store.write_batch(
        rk,
        steps=[(pid, m, T0 + m - M0, None, None) for pid, m in steps],
        phases=phases,
        requests=requests,
        writers=[(pid, M0, {"pid": pid, **meta}) for pid, meta in metas.items()],
    )
    store.update_run(rk, status=COMPLETED, exit_code=0, ended_at=T0 + 10.0)
    return store.run_by_key(rk)


# Two steps of 1 s each (100 → 101 → 102). Step 1: data 0.2 s, forward 0.3 s, backward 0.4 s
# holding a comm of 0.1 s inside it; 0.1 s unaccounted. Step 2: data 0.5, forward 0.3, no
# backward; 0.2 s unaccounted. A phase ending after the last step belongs to no step.
ANATOMY_PHASES = [
    (1, "data", 100.0, 100.2, None),
    (1, "forward", 100.2, 100.5, 0.25),
    (1, "backward", 100.5, 100.9, None),
    (1, "comm", 100.7, 100.8, None),
    (1, "data", 101.0, 101.5, None),
    (1, "forward", 101.5, 101.8, 0.2),
    (1, "data", 102.0, 102.25, None),
]


def test_phases_split_step_time_without_double_counting_nested_ones(store: Store) -> None:
    run = write_run(store, steps=[(1, 101.0), (1, 102.0)], phases=ANATOMY_PHASES)
    ph = steps_sections(store, run)["phases"]
    assert ph["steps"] == 2
    assert ph["step_seconds"] == pytest.approx(2.0)
    by = ph["by_name"]
    assert list(by) == ["data", "forward", "backward", "comm"]  # by self time, largest first
    assert by["data"]["seconds"] == pytest.approx(0.7)
    assert by["data"]["share"] == pytest.approx(0.35)
    assert by["data"]["steps"] == 2
    assert by["data"]["per_step_seconds"]["mean"] == pytest.approx(0.35)
    assert by["data"]["per_step_seconds"]["p50"] == pytest.approx(0.35)
    assert by["data"]["per_step_seconds"]["p90"] == pytest.approx(0.2 + 0.9 * 0.3)
    assert by["forward"]["accel_seconds"] == pytest.approx(0.45)
    assert by["data"]["accel_seconds"] is None
    # backward's inclusive time holds comm; its self time does not.
    assert by["backward"]["seconds"] == pytest.approx(0.4)
    assert by["backward"]["self_seconds"] == pytest.approx(0.3)
    assert by["backward"]["share"] == pytest.approx(0.15)
    assert by["comm"]["seconds"] == pytest.approx(0.1)
    assert by["comm"]["share"] == pytest.approx(0.05)
    assert by["comm"]["within"] == "backward"
    assert by["backward"]["within"] is None and by["data"]["within"] is None
    shares = sum(v["share"] for v in by.values()) + ph["unaccounted"]["share"]
    assert shares == pytest.approx(1.0)
    assert ph["unaccounted"]["seconds"] == pytest.approx(0.3)
    assert ph["outside_steps_seconds"] == pytest.approx(0.25)


def test_overlapping_async_phases_and_clipping_keep_shares_within_the_step(store: Store) -> None:
    # Two all-reduce buckets in flight at once (overlapping comm intervals), and a comm that
    # started in the previous step: clipped to this step's start.
    phases = [
        (7, "backward", 100.2, 101.0, None),
        (7, "comm", 100.4, 100.8, None),
        (7, "comm", 100.6, 101.0, None),
        (7, "comm", 100.9, 101.5, None),  # ends in step 2 (101 → 102): counts from 101.0
    ]
    run = write_run(store, steps=[(7, 101.0), (7, 102.0)], phases=phases)
    ph = steps_sections(store, run)["phases"]
    by = ph["by_name"]
    assert by["comm"]["seconds"] == pytest.approx(0.6 + 0.5)  # union per step, not 0.4 + 0.4
    assert by["comm"]["steps"] == 2
    assert by["backward"]["self_seconds"] == pytest.approx(0.2)
    assert by["comm"]["within"] == "backward"
    assert ph["unaccounted"]["seconds"] == pytest.approx(2.0 - 0.8 - 0.5)


def test_a_run_without_phases_or_ranks_or_requests_has_null_sections(store: Store) -> None:
    run = write_run(store, steps=[(1, 101.0)])
    s = build_summary(store, run)
    assert s["phases"] is None and s["ranks"] is None and s["requests"] is None
    text = io.StringIO()
    print_summary(s, text)
    assert "phases" not in text.getvalue() and "requests" not in text.getvalue()


RANK_META = {
    10: {"rank": 0, "local_rank": 0, "world_size": 2},
    11: {"rank": 1, "local_rank": 1, "world_size": 2},
}


def ranked_run(store: Store) -> RunRow:
    # Both ranks step every second (they wait for each other in the all-reduce). Rank 1
    # computes 0.9 s of each step and spends 0.1 s in comm; rank 0 computes 0.5 s, waits 0.5 s.
    steps, phases = [], []
    for k in range(4):
        end = M0 + k + 1
        for pid, comm in ((10, 0.5), (11, 0.1)):
            steps.append((pid, end))
            phases.append((pid, "comm", end - comm, end, None))
    return write_run(store, steps=steps, phases=phases, writers=RANK_META)


def test_ranks_name_the_slowest_and_measure_imbalance_and_comm(store: Store) -> None:
    run = ranked_run(store)
    rk = steps_sections(store, run)["ranks"]
    assert rk["count"] == 2 and rk["world_size"] == 2
    r0, r1 = rk["ranks"]
    assert (r0["rank"], r0["pids"], r0["steps"]) == (0, [10], 4)
    assert r0["step_time_seconds"] == {"mean": 1.0, "p50": 1.0, "p90": 1.0}
    assert r0["comm_seconds"] == pytest.approx(2.0)
    assert r0["compute_seconds"] == pytest.approx(2.0)
    assert r0["comm_share"] == pytest.approx(0.5)
    assert r1["compute_seconds_per_step"] == pytest.approx(0.9)
    assert r1["comm_share"] == pytest.approx(0.1)
    assert rk["slowest_rank"] == 1
    assert rk["load_imbalance"] == pytest.approx(0.9 / 0.7 - 1, abs=1e-4)
    assert rk["comm_share"] == pytest.approx(0.3)


@pytest.mark.parametrize(
    "name",
    ["comm", "comm/allreduce", "allreduce", "all_gather", "all-reduce", "reduce_scatter_tensor",
     "all_to_all_single", "nccl:all_reduce", "ncclKernel_AllReduce_RING_LL_Sum_float",
     "NCCL broadcast", "barrier", "communication"],
)  # fmt: skip
def test_phases_named_like_communication_count_as_comm(store: Store, name: str) -> None:
    from computewatch.analysis.chrome_trace import chrome_trace

    steps, phases = [], []
    for k in range(4):
        end = M0 + k + 1
        for pid, comm in ((10, 0.5), (11, 0.1)):
            steps.append((pid, end))
            phases.append((pid, name, end - comm, end, None))
            phases.append((pid, "forward", end - 1.0, end - comm, None))
    run = write_run(store, steps=steps, phases=phases, writers=RANK_META)
    rk = steps_sections(store, run)["ranks"]
    assert rk["comm_share"] == pytest.approx(0.3)
    assert rk["comm_phases"] == [name]
    cats = {e["name"]: e.get("cat") for e in chrome_trace(store, run)["traceEvents"]}
    assert (cats[name], cats["forward"]) == ("comm", "phase")


@pytest.mark.parametrize(
    "name", ["commit", "compute", "gather_batch", "reduce_lr", "send_metrics", "forward"]
)
def test_other_phases_are_not_communication(name: str) -> None:
    from computewatch.analysis.steps import is_comm_phase

    assert not is_comm_phase(name)


def test_nested_communication_phases_count_once_in_the_ranks(store: Store) -> None:
    # A DDP bucket's "comm" holding an "allreduce" over the same time: waiting once.
    steps, phases = [], []
    for k in range(2):
        end = M0 + k + 1
        for pid in (10, 11):
            steps.append((pid, end))
            phases.append((pid, "comm", end - 0.5, end, None))
            phases.append((pid, "allreduce", end - 0.4, end - 0.1, None))
    run = write_run(store, steps=steps, phases=phases, writers=RANK_META)
    rk = steps_sections(store, run)["ranks"]
    assert rk["comm_share"] == pytest.approx(0.5)
    assert rk["comm_phases"] == ["allreduce", "comm"]


def test_a_single_rank_is_not_a_distributed_run(store: Store) -> None:
    run = write_run(store, steps=[(10, 101.0)], writers={10: {"rank": 0, "world_size": 1}})
    assert steps_sections(store, run)["ranks"] is None


def test_ranks_and_phases_print_and_render(store: Store) -> None:
    run = ranked_run(store)
    s = build_summary(store, run)
    out = io.StringIO()
    print_summary(s, out)
    text = out.getvalue()
    assert "rank 1" in text and "slowest" in text
    assert "comm" in text
    page = build_html(store, run)
    assert 'id="section-steps"' in page
    assert "slowest rank" in page
    data = json.loads(
        page.split('<script type="application/json" id="cw-data">')[1].split("</script>")[0]
    )
    ids = {c["id"] for c in data["charts"]}
    assert {"phase_time", "rank_step_time"} <= ids
    rank_chart = next(c for c in data["charts"] if c["id"] == "rank_step_time")
    assert [s["label"] for s in rank_chart["series"]] == ["rank 0", "rank 1"]
    assert len(data["grids"][rank_chart["grid"]]) == len(rank_chart["series"][0]["mean"])
    assert f'id="chart-{rank_chart["id"]}"' in page


def requests_run(store: Store) -> RunRow:
    # Ten requests, one every second, latencies 0.1 .. 1.0 s; the 4th and 8th fail.
    reqs: list[Request] = [
        (5, "generate", M0 + i, M0 + i + 0.1 * (i + 1), 10.0, 20.0 * (i + 1), i not in (3, 7))
        for i in range(10)
    ]
    reqs.append((5, "embed", M0 + 10.0, M0 + 10.5, 4.0, None, True))
    return write_run(store, requests=reqs)


def test_requests_give_counts_latency_rates_and_tokens(store: Store) -> None:
    run = requests_run(store)
    rq = steps_sections(store, run)["requests"]
    assert rq["count"] == 11 and rq["errors"] == 2
    lat = rq["latency_seconds"]
    assert lat["max"] == pytest.approx(1.0)
    assert lat["p50"] == pytest.approx(0.5)  # sorted: .1 .. .5, .5, .6 ..: the 6th of 11
    assert lat["p90"] == pytest.approx(0.9)
    assert rq["span_seconds"] == pytest.approx(10.5)
    assert rq["requests_per_second"] == pytest.approx(11 / 10.5, abs=1e-4)
    assert rq["tokens_in_total"] == 104.0
    assert rq["tokens_out_total"] == 20.0 * 55
    assert rq["tokens_per_second"] == pytest.approx(1100 / 10.5, abs=1e-4)
    gen = rq["by_name"]["generate"]
    assert gen["count"] == 10 and gen["errors"] == 2
    assert gen["latency_seconds"]["mean"] == pytest.approx(0.55)
    assert rq["by_name"]["embed"]["tokens_out_total"] is None


def test_request_accounting_allocates_the_runs_energy_and_cost() -> None:
    reqs = {"count": 4, "tokens_in_total": 100.0, "tokens_out_total": 900.0}
    energy = {"facility": figure(0.002, "kWh", "polled", low=0.0018, high=0.0022)}
    cost = {"total": figure(0.5, "USD", "modeled")}
    out = request_accounting(reqs, energy, cost)
    assert out["count"] == 4
    e = out["energy_per_request"]
    assert (e["value"], e["low"], e["high"]) == pytest.approx((0.0005, 0.00045, 0.00055))
    assert e["method"] == "polled" and e["unit"] == "kWh"
    assert "allocated evenly" in e["assumptions"][0]
    assert out["energy_per_1m_tokens"]["value"] == pytest.approx(2.0)
    assert out["cost_per_request"]["value"] == pytest.approx(0.125)
    assert out["cost_per_1m_tokens"]["value"] == pytest.approx(500.0)
    none = request_accounting({"count": 4}, energy, {"total": figure(None, "USD", "modeled")})
    assert none["cost_per_request"] is None and none["cost_per_1m_tokens"] is None
    assert none["energy_per_1m_tokens"] is None  # no tokens reported
    assert none["energy_per_request"]["value"] == pytest.approx(0.0005)


def test_requests_print_and_render(store: Store) -> None:
    run = requests_run(store)
    s = build_summary(store, run)
    s["requests"] = request_accounting(
        s["requests"], {"facility": figure(0.011, "kWh", "modeled")}, None
    )
    out = io.StringIO()
    print_summary(s, out)
    text = out.getvalue()
    assert "11 requests" in text and "2 errors" in text
    assert "per request" in text
    store.update_run(run.key, summary=s)
    page = build_html(store, store.run_by_key(run.key))
    assert "Requests" in page and "latency p99" in page


SCRIPT = """
import time, computewatch
with computewatch.track(name="anatomy", interval=0.1) as run:
    for _ in range(5):
        with run.phase("forward"):
            time.sleep(0.02)
        with run.phase("backward"):
            time.sleep(0.01)
            with run.phase("comm"):
                time.sleep(0.03)
        run.step()
"""


def test_a_real_tracked_run_reports_its_phases(
    cw: Any, make_script: Callable[[str, str], Path]
) -> None:
    script = make_script("anatomy.py", SCRIPT)
    subprocess.run([sys.executable, str(script)], env=cw.env(), check=True, timeout=120)
    s = cw.show()
    by = s["phases"]["by_name"]
    assert by["comm"]["steps"] == 5 and by["comm"]["within"] == "backward"
    assert by["comm"]["per_step_seconds"]["p50"] >= 0.03
    assert by["backward"]["seconds"] >= by["backward"]["self_seconds"] + 0.15
    assert by["forward"]["per_step_seconds"]["mean"] >= 0.02
    total = sum(v["share"] for v in by.values()) + s["phases"]["unaccounted"]["share"]
    assert total == pytest.approx(1.0, abs=1e-3)
    text = cw.ok("show", "last").stdout
    assert "phases" in text and "comm" in text


def test_the_sections_charts_are_drawn_in_a_browser(store: Store, tmp_path: Path) -> None:
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("no Chromium at /usr/bin/chromium (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    import tempfile

    from computewatch.views.html import write_report

    run = ranked_run(store)
    store.update_run(run.key, summary=build_summary(store, run))
    page_path = write_report(store, store.run_by_key(run.key), tmp_path / "r.html")
    errors: list[str] = []
    with sync_api.sync_playwright() as pw, tempfile.TemporaryDirectory() as profile:
        ctx = pw.chromium.launch_persistent_context(
            profile,
            executable_path="/usr/bin/chromium",
            headless=True,
            args=["--headless", "--no-sandbox", "--disable-gpu"],
        )
        try:
            page = ctx.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(page_path.as_uri())
            page.wait_for_function("window.computewatchDrawnAt !== undefined")
            drawn = page.evaluate("window.computewatchCharts.map(c => c.id)")
            series = page.evaluate(
                "window.computewatchCharts.find(c => c.id === 'rank_step_time')"
                ".plot.series.map(s => s.label)"
            )
        finally:
            ctx.close()
    assert {"phase_time", "rank_step_time"} <= set(drawn)
    assert series[1:] == ["rank 0", "rank 1"]
    assert errors == []


def _cells(html_text: str) -> list[str]:
    """The text of each table cell, in order."""
    return [
        re.sub(r"<[^>]+>", "", c).strip()
        for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", html_text)
    ]


def test_the_phase_table_prints_what_is_missing_as_n_a(store: Store) -> None:
    run = write_run(store, steps=[(1, 101.0), (1, 102.0)], phases=ANATOMY_PHASES)
    cells = _cells(phases_table(steps_sections(store, run)["phases"]))
    # phase, share, seconds, self seconds, steps, mean/step, p50/step, p90/step, accelerator,
    # within (the shares and seconds are worked out in the test above)
    data = cells[cells.index("data") :][:10]
    assert data[1:3] == ["35.0%", "700.0 ms"]
    assert data[8:] == ["n/a", "n/a"]  # no accelerator time; a top-level phase
    forward = cells[cells.index("forward") :][:10]
    assert forward[8:] == ["450.0 ms", "n/a"]  # 0.25 + 0.2 s on the accelerator
    comm = cells[cells.index("comm") :][:10]
    assert comm[9] == "backward"
    unaccounted = cells[cells.index("unaccounted") :]
    assert unaccounted[1:3] == ["15.0%", "300.0 ms"]  # 0.1 + 0.2 s of the two 1 s steps
    assert unaccounted[3:] == ["n/a"] * 7
    assert "—" not in cells


def test_the_request_figures_ranges_are_in_the_units_of_their_values(store: Store) -> None:
    run = requests_run(store)
    rq = steps_sections(store, run)["requests"]
    assert rq is not None
    energy = {"facility": figure(0.011, "kWh", "modeled", low=0.0099, high=0.0121)}
    cells = _cells(requests_table(request_accounting(rq, energy, None)))
    # 11 requests: 0.011 kWh / 11 = 0.001 kWh = 3,600 J = 1.0 Wh a request; low 0.0009 kWh =
    # 3,240 J, high 0.0011 kWh = 3,960 J = 1.1 Wh (J below 1 Wh, then Wh: units.format_energy)
    row = cells[cells.index("energy per request") :][:4]
    assert row == ["energy per request", "1.0 Wh", "modeled", "3,240 J–1.1 Wh"]
