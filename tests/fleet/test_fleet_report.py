"""``computewatch fleet`` against a real Prometheus (Debian's ``prometheus`` 2.42) serving a TSDB
backfilled with ``promtool tsdb create-blocks-from openmetrics`` from synthetic agent data:
three nodes, GPUs of two models (one node's simulated), six jobs of three teams and one job
without a team, a stretch of allocated-but-idle GPU time, and one job scraped without
``honor_labels`` (its ``job`` label moved to ``exported_job``). Every figure the CLI prints is
checked against sums computed here from the same synthetic data.

The Grafana dashboard under ``deploy/grafana/`` is checked here too: each panel's PromQL uses
only the metric contract's names and is accepted by the same Prometheus.

Needs ``apt-get install prometheus chromium`` (scripts/test installs them).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from computewatch.catalog import find_by_nvml_name, reference

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
if not Path(PROMTOOL).exists():  # the same Debian package as prometheus
    pytest.skip(
        "no prometheus/promtool (apt-get install prometheus); CI installs it",
        allow_module_level=True,
    )

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "computewatch-fleet.json"
STEP = 60  # seconds between synthetic scrapes
HOURS = 12
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
NODES = {"node-a": (H100, 4, False), "node-b": (H100, 4, False), "node-c": (A100, 2, True)}
CPU_WATTS = 30.0  # each job's CPU share of its node, watts
EVIL_USER = "</script><b>erin"

CONTRACT = {
    "computewatch_gpu_utilization_ratio", "computewatch_gpu_memory_used_bytes",
    "computewatch_gpu_memory_total_bytes", "computewatch_gpu_power_watts",
    "computewatch_gpu_temperature_celsius", "computewatch_gpu_energy_joules_total",
    "computewatch_gpu_throttled", "computewatch_gpu_allocated", "computewatch_job_info",
    "computewatch_job_cpu_seconds_total", "computewatch_job_memory_bytes",
    "computewatch_job_processes", "computewatch_job_gpu_seconds_total",
    "computewatch_job_gpu_busy_seconds_total", "computewatch_job_gpu_idle_seconds_total",
    "computewatch_job_gpu_memory_used_bytes", "computewatch_job_energy_joules_total",
    "computewatch_job_steps_total", "computewatch_job_step_time_seconds_total",
    "computewatch_job_flops_total", "computewatch_host_cpu_utilization_ratio",
    "computewatch_host_memory_used_bytes", "computewatch_host_memory_total_bytes",
    "computewatch_host_swap_used_bytes", "computewatch_filesystem_avail_bytes",
    "computewatch_filesystem_size_bytes", "computewatch_cpu_energy_joules_total",
    # the DCGM exporter's fields (docs/observability.md)
    "computewatch_gpu_sm_active_ratio", "computewatch_gpu_tensor_active_ratio",
    "computewatch_gpu_dram_active_ratio", "computewatch_gpu_sm_clock_hertz",
    "computewatch_gpu_memory_clock_hertz", "computewatch_gpu_throttle_seconds_total",
    "computewatch_gpu_xid_errors_total", "computewatch_gpu_ecc_errors_total",
    "computewatch_gpu_pcie_transmit_bytes_per_second",
    "computewatch_gpu_pcie_receive_bytes_per_second",
    "computewatch_gpu_nvlink_transmit_bytes_total", "computewatch_gpu_nvlink_receive_bytes_total",
}  # fmt: skip


@dataclass(frozen=True)
class Job:
    name: str
    user: str
    team: str
    node: str
    gpus: tuple[int, ...]
    start_h: float
    end_h: float
    util: float
    idle_hours: float = 0.0  # the first hours at utilization 0.02 (held, idle)
    exported: bool = False  # scraped without honor_labels: job -> exported_job

    def active(self, t: float) -> bool:
        """Whether the job holds its GPUs during the interval starting ``t`` seconds in."""
        return self.start_h * 3600 <= t and t + STEP <= self.end_h * 3600

    def util_at(self, t: float) -> float:
        return 0.02 if t < (self.start_h + self.idle_hours) * 3600 else self.util


JOBS = (
    Job("train-llm", "alice", "nlp", "node-a", (0, 1, 2, 3), 0, 8, 0.9),
    Job("finetune", EVIL_USER, "", "node-a", (0, 1), 9, 12, 0.7),
    Job("detector", "bob", "vision", "node-b", (0, 1), 2, 12, 0.6),
    Job("notebook", "carol", "vision", "node-b", (2, 3), 0, 6, 0.5, idle_hours=3),
    Job("eval", "frank", "nlp", "node-b", (2, 3), 7, 12, 0.3, exported=True),
    Job("asr", "dave", "speech", "node-c", (0, 1), 1, 11, 0.4),
)


def gpu_watts(util: float) -> float:
    return 60.0 + 500.0 * util


def interval(job: Job, t: float) -> dict[str, float]:
    """What ``job`` adds to its counters in the interval starting ``t`` s after T0."""
    if not job.active(t):
        return {"held": 0.0, "busy": 0.0, "idle": 0.0, "energy": 0.0}
    n, u = len(job.gpus), job.util_at(t)
    return {
        "held": n * STEP,
        "busy": n * u * STEP,
        "idle": n * STEP if u < 0.05 else 0.0,
        "energy": (n * gpu_watts(u) + CPU_WATTS) * STEP,
    }


def expected(a: float, b: float, key: Callable[[Job], list[tuple[str, float]]]) -> dict[str, Any]:
    """Sums per group over the intervals inside [a, b] (seconds after T0)."""
    out: dict[str, dict[str, float]] = {}
    for job in JOBS:
        for k in range(int(a // STEP), int(b // STEP)):
            c = interval(job, k * STEP)
            for group, share in key(job):
                acc = out.setdefault(group, {"held": 0.0, "busy": 0.0, "idle": 0.0, "energy": 0.0})
                for f, v in c.items():
                    acc[f] += v * share
    return {g: v for g, v in out.items() if v["held"] or v["energy"]}


def model_of(job: Job) -> list[tuple[str, float]]:
    model, _, simulated = NODES[job.node]
    return [(f"{model} (simulated)" if simulated else model, 1.0)]


KEYS: dict[str, Callable[[Job], list[tuple[str, float]]]] = {
    "job": lambda j: [(j.name, 1.0)],
    "user": lambda j: [(j.user, 1.0)],
    "team": lambda j: [(j.team, 1.0)],
    "gpu-model": model_of,
}


# -- the synthetic TSDB -------------------------------------------------------------------------


def _labels(d: dict[str, str]) -> str:
    esc = {k: v.replace("\\", "\\\\").replace('"', '\\"') for k, v in d.items()}
    return "{" + ",".join(f'{k}="{v}"' for k, v in esc.items()) + "}"


class OpenMetrics:
    """Families of timestamped samples, written as one OpenMetrics file for promtool."""

    def __init__(self) -> None:
        self.families: dict[str, tuple[str, dict[str, list[str]]]] = {}

    def add(self, name: str, kind: str, labels: dict[str, str], t: float, v: float) -> None:
        base = name.removesuffix("_total") if kind == "counter" else name
        _, series = self.families.setdefault(base, (kind, {}))
        series.setdefault(name + _labels(labels), []).append(f"{v:.6f} {t:.0f}")

    def text(self) -> str:
        lines = []
        for base, (kind, series) in self.families.items():
            lines.append(f"# TYPE {base} {kind}")
            for key, samples in series.items():
                lines += [f"{key} {s}" for s in samples]
        lines.append("# EOF")
        return "\n".join(lines) + "\n"


def dcgm(om: OpenMetrics, lb: dict[str, str], ts: float, u: float, t: float) -> None:
    """The DCGM-equivalent families of one GPU at one time (GPM, clocks, errors, links)."""
    gpm = {**lb, "method": "gpm"}
    om.add("computewatch_gpu_sm_active_ratio", "gauge", gpm, ts, 0.85 * u)
    om.add("computewatch_gpu_tensor_active_ratio", "gauge", gpm, ts, 0.6 * u)
    om.add("computewatch_gpu_dram_active_ratio", "gauge", gpm, ts, 0.5 * u)
    om.add("computewatch_gpu_sm_clock_hertz", "gauge", lb, ts, 1.98e9)
    om.add("computewatch_gpu_memory_clock_hertz", "gauge", lb, ts, 2.6e9)
    hot_s = max(min(t, 5 * 3600) - 4 * 3600, 0) if lb["gpu_index"] == "0" else 0
    thermal = {**lb, "reason": "sw_thermal_slowdown"}
    om.add("computewatch_gpu_throttle_seconds_total", "counter", thermal, ts, float(hot_s))
    om.add("computewatch_gpu_xid_errors_total", "counter", lb, ts, 0.0)
    om.add("computewatch_gpu_ecc_errors_total", "counter", {**lb, "type": "corrected"}, ts, 0.0)
    om.add("computewatch_gpu_pcie_transmit_bytes_per_second", "gauge", lb, ts, 2e9 * u)
    om.add("computewatch_gpu_pcie_receive_bytes_per_second", "gauge", lb, ts, 4e9 * u)
    om.add("computewatch_gpu_nvlink_transmit_bytes_total", "counter", lb, ts, 5e10 * t)
    om.add("computewatch_gpu_nvlink_receive_bytes_total", "counter", lb, ts, 5e10 * t)


def synthesize(t0: float) -> str:
    om = OpenMetrics()
    n = HOURS * 3600 // STEP
    gpu_energy: dict[tuple[str, int], float] = {}
    for node, (model, count, simulated) in NODES.items():
        for k in range(n + 1):
            t = k * STEP
            om.add("computewatch_host_cpu_utilization_ratio", "gauge", {"node": node}, t0 + t, 0.3)
            om.add("computewatch_host_memory_used_bytes", "gauge", {"node": node}, t0 + t, 2e11)
            om.add("computewatch_host_memory_total_bytes", "gauge", {"node": node}, t0 + t, 1e12)
            for i in range(count):
                holder = next(
                    (j for j in JOBS if j.node == node and i in j.gpus and j.active(t)), None
                )
                u = holder.util_at(t) if holder else 0.0
                lb = {
                    "gpu": f"GPU-{node}-{i}",
                    "gpu_index": str(i),
                    "gpu_model": model,
                    "node": node,
                }
                if simulated:
                    lb["simulated"] = "true"
                watts = gpu_watts(u) if holder else 50.0
                e = gpu_energy.get((node, i), 0.0)
                om.add("computewatch_gpu_utilization_ratio", "gauge", lb, t0 + t, u)
                om.add("computewatch_gpu_allocated", "gauge", lb, t0 + t, 1.0 if holder else 0.0)
                om.add("computewatch_gpu_power_watts", "gauge", lb, t0 + t, watts)
                om.add("computewatch_gpu_energy_joules_total", "counter", lb, t0 + t, e)
                om.add(
                    "computewatch_gpu_memory_used_bytes",
                    "gauge",
                    lb,
                    t0 + t,
                    4e10 * (holder is not None),
                )
                om.add("computewatch_gpu_memory_total_bytes", "gauge", lb, t0 + t, 8.5e10)
                om.add("computewatch_gpu_temperature_celsius", "gauge", lb, t0 + t, 40 + 40 * u)
                hot = node == "node-a" and i == 0 and 4 * 3600 <= t < 5 * 3600
                om.add(
                    "computewatch_gpu_throttled",
                    "gauge",
                    {**lb, "reason": "thermal"},
                    t0 + t,
                    float(hot),
                )
                om.add(
                    "computewatch_gpu_throttled", "gauge", {**lb, "reason": "power"}, t0 + t, 0.0
                )
                gpu_energy[(node, i)] = e + watts * STEP
                dcgm(om, lb, t0 + t, u, t)
    for job in JOBS:
        lb = {"job": job.name, "user": job.user, "team": job.team, "node": job.node}
        if job.exported:
            lb = {
                "job": "computewatch-agents",
                "exported_job": job.name,
                **{k: v for k, v in lb.items() if k != "job"},
            }
        acc = {"held": 0.0, "busy": 0.0, "idle": 0.0, "energy": 0.0, "cpu": 0.0}
        for k in range(int(job.start_h * 3600 // STEP), int(job.end_h * 3600 // STEP) + 1):
            t = k * STEP
            ts = t0 + t
            om.add("computewatch_job_gpu_seconds_total", "counter", lb, ts, acc["held"])
            om.add("computewatch_job_gpu_busy_seconds_total", "counter", lb, ts, acc["busy"])
            om.add("computewatch_job_gpu_idle_seconds_total", "counter", lb, ts, acc["idle"])
            om.add("computewatch_job_energy_joules_total", "counter", lb, ts, acc["energy"])
            om.add("computewatch_job_cpu_seconds_total", "counter", lb, ts, acc["cpu"])
            om.add(
                "computewatch_job_info",
                "gauge",
                {**lb, "kind": "slurm", "slurm_account": job.team},
                ts,
                1.0,
            )
            om.add("computewatch_job_memory_bytes", "gauge", lb, ts, 3e10)
            om.add("computewatch_job_processes", "gauge", lb, ts, 4.0)
            om.add("computewatch_job_gpu_memory_used_bytes", "gauge", lb, ts, 4e10 * len(job.gpus))
            for f, v in interval(job, t).items():
                acc[f] += v
            acc["cpu"] += 2.0 * STEP
    return om.text()  # fmt: skip


@dataclass
class Prom:
    url: str
    t0: float  # start of the synthetic data (Unix seconds)
    t1: float  # its end
    config: Path  # an empty computewatch configuration, so no user file leaks in


@pytest.fixture(scope="module")
def prom(
    tmp_path_factory: pytest.TempPathFactory, prometheus: Callable[..., Any]
) -> Iterator[Prom]:
    d = tmp_path_factory.mktemp("prom")
    # Backfilled blocks must lie behind the head block (the last ~2 h) and inside retention.
    t1 = float((int(time.time()) // 3600) * 3600 - 3 * 3600)
    t0 = t1 - HOURS * 3600
    om = d / "data.om"
    om.write_text(synthesize(t0))
    made = subprocess.run(
        [
            PROMTOOL,
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            "--quiet",
            str(om),
            str(d / "tsdb"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    cfg = d / "prometheus.yml"
    cfg.write_text("global:\n  scrape_interval: 15s\n")
    empty = d / "config.toml"
    empty.write_text("")
    with prometheus(cfg, d / "tsdb", "--storage.tsdb.retention.time=30d") as p:
        yield Prom(p.url, t0, t1, empty)


def fleet(cw: Any, prom: Prom, *args: str) -> subprocess.CompletedProcess[str]:
    r: subprocess.CompletedProcess[str] = cw(
        "fleet", "--prometheus", prom.url, "--config", str(prom.config), *args
    )
    return r


def fleet_json(cw: Any, prom: Prom, *args: str) -> dict[str, Any]:
    r = fleet(cw, prom, "--json", *args)
    assert r.returncode == 0, r.stderr
    data: dict[str, Any] = json.loads(r.stdout)
    return data


def by_group(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["group"]: g for g in report["groups"]}


def check_usage(got: dict[str, Any], want: dict[str, float]) -> None:
    """The figures of one group against the synthetic sums (increase() extrapolates at most
    half a scrape interval per series at the window's edges: well under 1% here)."""
    assert got["gpu_hours"]["value"] == pytest.approx(want["held"] / 3600, rel=0.01)
    assert got["idle_gpu_hours"]["value"] == pytest.approx(want["idle"] / 3600, rel=0.01, abs=0.01)
    assert got["utilization_mean"]["value"] == pytest.approx(want["busy"] / want["held"], abs=0.005)
    assert got["energy_kwh"]["value"] == pytest.approx(want["energy"] / 3.6e6, rel=0.01)


# -- the figures --------------------------------------------------------------------------------


def test_by_team_whole_window(cw: Any, prom: Prom) -> None:
    r = fleet_json(
        cw, prom, "--until", str(prom.t1), "--since", "12h", "--by", "team",
        "--region", "FR", "--pue", "1.2", "--gpu-hour-usd", "2.5",
    )  # fmt: skip
    want = expected(0, HOURS * 3600, KEYS["team"])
    got = by_group(r)
    assert set(got) == {"nlp", "vision", "speech", ""}
    assert got[""]["label"] == "(no team)"
    intensity = reference.grid_rows()["FR"].g_per_kwh
    for team, w in want.items():
        g = got[team]
        check_usage(g, w)
        kwh = w["energy"] / 3.6e6
        assert g["energy_facility_kwh"]["value"] == pytest.approx(kwh * 1.2, rel=0.01)
        assert g["carbon_gco2e"]["value"] == pytest.approx(kwh * 1.2 * intensity, rel=0.01)
        assert g["cost_usd"]["value"] == pytest.approx(w["held"] / 3600 * 2.5, rel=0.01)
        for f in ("gpu_hours", "idle_gpu_hours", "utilization_mean", "energy_kwh", "cost_usd"):
            assert g[f]["method"] in ("measured", "polled", "modeled")
    # The idle stretch: the notebook held 2 GPUs for 3 hours at 2% utilization.
    assert got["vision"]["idle_gpu_hours"]["value"] == pytest.approx(6.0, rel=0.01)
    assert got["nlp"]["idle_gpu_hours"]["value"] == pytest.approx(0.0, abs=0.01)
    # Largest first; the total is the sum.
    hours = [g["gpu_hours"]["value"] for g in r["groups"]]
    assert hours == sorted(hours, reverse=True)
    total = r["total"]
    assert total["gpu_hours"]["value"] == pytest.approx(sum(hours), rel=1e-4)
    assert total["jobs"] == len(JOBS)
    assert r["carbon"]["intensity"]["region"] == "FR"
    assert r["carbon"]["intensity"]["how"] == "--region"
    assert r["carbon"]["pue"]["source"] == "--pue"
    assert all(p["source"] == "--gpu-hour-usd" for p in r["prices"].values())
    assert set(r["methods"]) >= {"gpu_hours", "utilization_mean", "idle_gpu_hours", "energy_kwh",
                                 "cost_usd", "carbon_gco2e"}  # fmt: skip
    assert any("simulated" in n for n in r["notes"])  # node-c's GPUs are simulated
    assert r["window"]["seconds"] == HOURS * 3600
    assert r["fleet"]["gpu_count"] == sum(c for _, c, _ in NODES.values())


@pytest.mark.parametrize("by", ["job", "user", "gpu-model"])
def test_each_grouping(cw: Any, prom: Prom, by: str) -> None:
    r = fleet_json(cw, prom, "--until", str(prom.t1), "--since", "12h", "--by", by)
    want = expected(0, HOURS * 3600, KEYS[by])
    got = by_group(r)
    assert set(got) == set(want)
    for key, w in want.items():
        check_usage(got[key], w)
    if by == "job":
        assert "eval" in got  # its job label was in exported_job
        assert "computewatch-agents" not in got
    if by == "gpu-model":
        assert got[f"{A100} (simulated)"]["simulated"] is True
        assert got[H100]["simulated"] is False
        # Priced from the catalog: the median per-GPU price of the instances with that GPU.
        for label in (H100, f"{A100} (simulated)"):
            acc = find_by_nvml_name(label.removesuffix(" (simulated)"))
            assert acc is not None
            rates = [
                i.usd_per_hour / i.gpus for i in reference.instances().values()
                if i.gpu_model == acc.model
            ]  # fmt: skip
            assert got[label]["cost_usd"]["value"] == pytest.approx(
                want[label]["held"] / 3600 * statistics.median(rates), rel=0.01
            )
            assert got[label]["cost_usd"]["low"] == pytest.approx(
                want[label]["held"] / 3600 * min(rates), rel=0.01
            )
            assert r["prices"][label]["method"].startswith("catalog")
        # No region given: the world average, said out loud.
        assert r["carbon"]["intensity"]["how"] == "unknown"
        assert any("world average" in n for n in r["notes"])


def test_window_cutting_through_jobs(cw: Any, prom: Prom) -> None:
    end = prom.t0 + 10 * 3600
    r = fleet_json(cw, prom, "--until", str(end), "--since", "6h", "--by", "user")
    want = expected(4 * 3600, 10 * 3600, KEYS["user"])
    got = by_group(r)
    assert set(got) == set(want)
    for user, w in want.items():
        check_usage(got[user], w)


def test_text_table(cw: Any, prom: Prom) -> None:
    r = fleet(cw, prom, "--until", str(prom.t1), "--since", "12h", "--gpu-hour-usd", "2")
    assert r.returncode == 0, r.stderr
    want = expected(0, HOURS * 3600, KEYS["team"])
    lines = {line.split()[0]: line for line in r.stdout.splitlines() if line.strip()}
    for team in ("nlp", "vision", "speech", "total"):
        assert team in lines, r.stdout
    nlp_hours = want["nlp"]["held"] / 3600
    assert re.search(rf"\b{nlp_hours:,.1f}\b", lines["nlp"]), lines["nlp"]
    assert "(no team)" in r.stdout
    assert "$2/GPU-hour" in r.stdout or "$2.00/GPU-hour" in r.stdout
    assert "world average" in r.stdout  # the assumption is said in the text too


# -- errors -------------------------------------------------------------------------------------


def test_empty_window_is_one_clear_message(cw: Any, prom: Prom) -> None:
    r = fleet(cw, prom, "--until", str(prom.t0 - 86400), "--since", "1h")
    assert r.returncode == 1
    assert "no computewatch job data" in r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_unreachable_prometheus(cw: Any, prom: Prom, free_port: Callable[[], int]) -> None:
    port = free_port()  # nothing listens there
    r = cw("fleet", "--prometheus", f"http://127.0.0.1:{port}", "--since", "1h")
    assert r.returncode == 1
    assert f"cannot reach Prometheus at http://127.0.0.1:{port}" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("url", ["127.0.0.1:9090", "ftp://x/", "http://:9090", "http://h:port/"])
def test_bad_url(cw: Any, url: str) -> None:
    r = cw("fleet", "--prometheus", url)
    assert r.returncode == 1
    assert "not a valid Prometheus URL" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--since", "2099-01-01T00:00:00Z"], 2, "--since must be before --until"),
        (["--since", "yesterday"], 2, "expected a duration"),
        (["--region", "Atlantis"], 1, "unknown region"),
        (["--instance-type", "aws:p99.huge"], 1, "not in the price catalog"),
        (["--pue", "0.5"], 2, "a PUE is between 1 and 10"),
    ],
)
def test_bad_options(cw: Any, prom: Prom, args: list[str], code: int, message: str) -> None:
    r = fleet(cw, prom, "--until", str(prom.t1), *args)
    assert r.returncode == code, r.stderr
    assert message in r.stderr
    assert "Traceback" not in r.stderr


# -- the Grafana dashboard ----------------------------------------------------------------------

_VARIABLES = {
    "$__rate_interval": "5m",
    "$__interval": "1m",
    "$__range": "1h",
    "${__range}": "1h",
    "$node": ".*",
    "$team": ".*",
    "$user": ".*",
    "$job": ".*",
    "${node:regex}": ".*",
}


def _panels(dash: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for p in dash["panels"]:
        yield p
        yield from p.get("panels", [])


def _exprs(dash: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (p.get("title", ""), t["expr"])
        for p in _panels(dash)
        for t in p.get("targets", [])
        if t.get("expr")
    ]


def _substitute(expr: str) -> str:
    for k in sorted(_VARIABLES, key=len, reverse=True):
        expr = expr.replace(k, _VARIABLES[k])
    return expr


_METRIC = re.compile(r"\bcomputewatch_[a-z_]+\b")


def test_dashboard_structure() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["title"] and dash["uid"]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("node", "team", "user", "job"):
        assert variables[name]["type"] == "query", name
        assert variables[name]["datasource"]["uid"] == "${datasource}"
    titles = " ".join(p.get("title", "") for p in _panels(dash)).lower()
    for word in ("utilization", "gpu-hours", "idle", "energy", "memory", "throttl"):
        assert word in titles, word
    ids = [p["id"] for p in _panels(dash)]
    assert len(ids) == len(set(ids))
    for p in _panels(dash):
        if p.get("type") == "row":
            continue
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert p.get("targets"), p["title"]
    exprs = _exprs(dash)
    assert len(exprs) >= 8
    for title, expr in exprs:
        names = set(_METRIC.findall(expr))
        assert names, (title, expr)
        assert names <= CONTRACT, (title, names - CONTRACT)


def test_dashboard_queries_run_on_prometheus(prom: Prom) -> None:
    dash = json.loads(DASHBOARD.read_text())
    queries = [(t, _substitute(e)) for t, e in _exprs(dash)]
    for v in dash["templating"]["list"]:
        q = v.get("query")
        text = q.get("query", "") if isinstance(q, dict) else str(q or "")
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", text)
        if m:
            count = f"count by ({m.group(2)}) ({m.group(1)})"
            queries.append((f"variable {v['name']}", _substitute(count)))
    with_data = 0
    at = prom.t0 + 6 * 3600
    for title, q in queries:
        assert "$" not in q, (title, q)
        body = urllib.parse.urlencode({"query": q, "time": f"{at}"}).encode()
        try:
            with urllib.request.urlopen(f"{prom.url}/api/v1/query", body, timeout=30) as r:
                doc = json.load(r)
        except urllib.error.HTTPError as e:
            pytest.fail(f"{title}: {q}: {e.read().decode()}")
        assert doc["status"] == "success", (title, q, doc)
        with_data += bool(doc["data"]["result"])
    assert with_data >= len(queries) - 3  # flops/steps/filesystem panels may have no data here


# -- the HTML report in a real browser ---------------------------------------------------------

CHROMIUM = "/usr/bin/chromium"


def test_html_report_in_chromium(cw: Any, prom: Prom, tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium); CI installs it")
    from playwright.sync_api import sync_playwright

    out = tmp_path / "fleet.html"
    r = fleet(cw, prom, "--until", str(prom.t1), "--since", "12h", "--by", "user",
              "--html", str(out), "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    page_text = out.read_text()
    assert "<script>" not in page_text.split("<body>")[0]  # scripts only at the end
    assert EVIL_USER not in page_text  # escaped everywhere
    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as pw, tempfile.TemporaryDirectory(prefix="cw-chromium-") as profile:
        context = pw.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update"],
            viewport={"width": 1400, "height": 900},
        )  # fmt: skip
        try:
            context.route(
                "**/*",
                lambda route: (
                    route.continue_() if route.request.url.startswith("file:") else route.abort()
                ),
            )
            page = context.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda q: requests.append(q.url))
            page.goto(out.as_uri(), wait_until="load")
            page.wait_for_function("window.computewatchCharts && window.computewatchCharts.length")
            data = page.evaluate("JSON.parse(document.getElementById('cw-data').textContent)")
            ids = [c["id"] for c in data["charts"]]
            assert {"fleet_util", "fleet_held", "fleet_gpus"} <= set(ids)
            assert page.evaluate("window.computewatchCharts.length") == len(ids)
            for cid in ids:
                inked = page.evaluate(
                    """(id) => {
                        const cv = document.querySelector('#chart-' + id + ' canvas');
                        const px = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;
                        let n = 0;
                        for (let i = 3; i < px.length; i += 4) { if (px[i] > 0) { n++; } }
                        return n;
                    }""",
                    cid,
                )
                assert inked > 1000, cid
            # One bar per user, as long as its GPU-hours; the user name shows as typed.
            bars = page.locator("svg.bars g.bar")
            assert bars.count() == len(report["groups"])
            widths: dict[str, float] = {}
            for i in range(bars.count()):
                bar = bars.nth(i)
                group = bar.get_attribute("data-group") or ""
                held = float(bar.get_attribute("data-gpu-hours") or "nan")
                assert held == pytest.approx(
                    by_group(report)[group]["gpu_hours"]["value"], rel=1e-4
                )
                widths[group] = float(bar.locator("rect.held").get_attribute("width") or "nan")
            top = max(widths.values())
            for group, w in widths.items():
                share = by_group(report)[group]["gpu_hours"]["value"] / max(
                    g["gpu_hours"]["value"] for g in report["groups"]
                )
                assert w / top == pytest.approx(share, abs=0.01)
            assert page.locator("#groups tbody th", has_text=EVIL_USER).count() == 1
            assert page.locator("b").count() == 0
            # The per-user utilization chart has a series per user, values within 0-1.
            util = next(c for c in data["charts"] if c["id"] == "fleet_util")
            assert {s["label"] for s in util["series"]} == {g["label"] for g in report["groups"]}
            vals = [v for s in util["series"] for v in s["mean"] if v is not None]
            assert vals and all(0 <= v <= 1 for v in vals) and max(vals) > 0.8
        finally:
            context.close()
    assert errors == []
    assert [u for u in requests if not u.startswith("file:")] == []
    assert math.isfinite(report["total"]["gpu_hours"]["value"])
