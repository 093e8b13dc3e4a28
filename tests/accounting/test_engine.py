"""The accounting engine against a run written into a store by hand, with hand-computed answers.

The run lasts one hour (3,600 s) so that watts read as watt-hours: a figure in kWh below is
watts x 3,600 s / 3.6e6 J/kWh = watts / 1,000. Every expected value says how it was computed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from computewatch.accounting.engine import AccountingOptions, account, accounted
from computewatch.config import Config
from computewatch.readings import Kind, Labels, labels
from computewatch.store import COMPLETED, RunRow, Store

FIXTURES = Path(__file__).parent / "fixtures"
NO_DMI = str(FIXTURES / "no_such_dmi_dir")
T0 = 1_700_000_000.0
MONO0 = 5000.0
HOUR = 3600.0
GIB = 2**30
XEON = "Intel(R) Xeon(R) Platinum 8480+"  # cpu_tdp.csv: 350 W per 56-core socket


def approx(x: float) -> Any:
    # figure() keeps 6 significant digits
    return pytest.approx(x, rel=1e-5)


# Host CPU seconds over the run, by cpu and mode: busy = user + system + softirq
# = 60,000 + 30,000 + 10,800 = 100,800 s (56 CPUs x 3600 s x 50% busy); idle and iowait are
# not busy.
HOST_CPU: list[tuple[str, Labels, Kind, list[float]]] = [
    ("host_cpu_seconds_total", labels(cpu=0, mode="user"), Kind.COUNTER, [100.0, 60_100.0]),
    ("host_cpu_seconds_total", labels(cpu=0, mode="system"), Kind.COUNTER, [10.0, 30_010.0]),
    ("host_cpu_seconds_total", labels(cpu=1, mode="softirq"), Kind.COUNTER, [0.0, 10_800.0]),
    ("host_cpu_seconds_total", labels(cpu=1, mode="idle"), Kind.COUNTER, [0.0, 50_000.0]),
    ("host_cpu_seconds_total", labels(cpu=1, mode="iowait"), Kind.COUNTER, [0.0, 400.0]),
]
# RAPL over the run: package 360,000 J on each of 2 sockets (720,000 J = 0.2 kWh),
# DRAM 36,000 J on socket 0 only (0.01 kWh).
RAPL: list[tuple[str, Labels, Kind, list[float]]] = [
    ("cpu_energy_joules_total", labels(socket=0, domain="package"), Kind.COUNTER, [5e5, 8.6e5]),
    ("cpu_energy_joules_total", labels(socket=1, domain="package"), Kind.COUNTER, [0.0, 3.6e5]),
    ("cpu_energy_joules_total", labels(socket=0, domain="dram"), Kind.COUNTER, [1e3, 3.7e4]),
]


def write_run(
    store: Store,
    series: list[tuple[str, Labels, Kind, list[float]]] = HOST_CPU,
    run_id: str = "0b0b0b0b0b0b",
) -> RunRow:
    """A completed one-hour run with two ticks (start and end) of ``series``."""
    rk = store.create_run(
        run_id=run_id,
        name="train",
        tags={},
        command=["python", "train.py"],
        cwd="/work",
        mode="run",
        started_at=T0,
        interval_seconds=1.0,
        host={"logical_cpus": 56, "allowed_cores": 28.0},
    )
    store.write_batch(
        rk,
        series=[(i, n, lb, k) for i, (n, lb, k, _) in enumerate(series)],
        ticks=[(0, MONO0, T0), (1, MONO0 + HOUR, T0 + HOUR)],
        samples=[
            (rk, seq, i, v)
            for i, (_, _, _, vals) in enumerate(series)
            for seq, v in enumerate(vals)
        ],
        data_until=T0 + HOUR,
    )
    store.update_run(rk, status=COMPLETED, exit_code=0, ended_at=T0 + HOUR)
    return store.run_by_key(rk)


def gpu(index: int, joules: float | None, method: str | None = "counter", **kw: Any) -> Any:
    g: dict[str, Any] = {
        "uuid": f"GPU-{index}",
        "index": index,
        "name": "NVIDIA H100 80GB HBM3",
        "model": "H100-SXM",
        "simulated": False,
        "utilization_mean": 0.5,
        "energy_joules": joules,
        "energy_method": method,
    }
    g.update(kw)
    return g


def make_summary(**over: Any) -> dict[str, Any]:
    """A one-hour run: 25,200 CPU-s (share 25,200 / 100,800 busy = 0.25; 25% of its 28 cores),
    64 GiB installed with peak RSS 8 of 32 GiB used (memory share 0.25), and two GPUs:
    GPU 0 with a counter (3.6 MJ = 1 kWh), GPU 1 polled (1.8 MJ = 0.5 kWh)."""
    s: dict[str, Any] = {
        "id": "0b0b0b0b0b0b",
        "duration_seconds": HOUR,
        "cpu": {"seconds_total": 25_200.0, "utilization_mean": 0.25},
        "memory": {
            "host_total_bytes": 64 * GIB,
            "peak_rss_bytes": 8 * GIB,
            "peak_host_used_bytes": 32 * GIB,
        },
        "host": {"cpu_model": XEON, "logical_cpus": 56, "allowed_cores": 28.0},
        "gpus": [gpu(0, 3.6e6, "counter"), gpu(1, 1.8e6, "polled")],
        "steps": {"count": 0},
        "notes": ["a note"],
    }
    s.update(over)
    return s


def opts(**kw: Any) -> AccountingOptions:
    """No environment variables and no DMI: nothing about the location leaks in from here."""
    kw.setdefault("environ", {})
    kw.setdefault("dmi_root", NO_DMI)
    return AccountingOptions(**kw)


@pytest.fixture
def run(store: Store) -> RunRow:
    return write_run(store)


def acc(
    store: Store, run: RunRow, summary: dict[str, Any] | None = None, **kw: Any
) -> dict[str, Any]:
    return account(store, run, summary if summary is not None else make_summary(), opts(**kw))


# --- energy: GPU ----------------------------------------------------------------------------


def test_gpu_counter_and_polled_energy(store: Store, run: RunRow) -> None:
    g = acc(store, run)["energy"]["components"]["gpu"]
    # 3.6e6 J +/-5% = [3.42e6, 3.78e6]; 1.8e6 J +/-10% = [1.62e6, 1.98e6]
    # total 5.4e6 J = 1.5 kWh, low 5.04e6 J = 1.4 kWh, high 5.76e6 J = 1.6 kWh
    assert (g["value"], g["low"], g["high"]) == (approx(1.5), approx(1.4), approx(1.6))
    assert g["unit"] == "kWh"
    assert g["method"] == "polled"  # any polled GPU makes the whole figure polled
    assert (
        "GPU 0: counter, share 100.0%" in g["assumptions"]
        and "GPU 1: polled, share 100.0%" in g["assumptions"]
    )


def test_gpu_counter_only_is_measured_within_5_percent(store: Store, run: RunRow) -> None:
    s = make_summary(gpus=[gpu(0, 3.6e6, "counter", simulated=True), gpu(1, None)])
    g = acc(store, run, s)["energy"]["components"]["gpu"]
    # 3.6e6 J = 1 kWh, +/-5%
    assert (g["value"], g["low"], g["high"]) == (approx(1.0), approx(0.95), approx(1.05))
    assert g["method"] == "measured"
    assert "GPU 0: counter (simulated device), share 100.0%" in g["assumptions"]
    assert "GPU 1: no energy reading" in g["assumptions"]


def test_no_gpu_no_gpu_component(store: Store, run: RunRow) -> None:
    e = acc(store, run, make_summary(gpus=[]))["energy"]
    assert "gpu" not in e["components"]
    assert not any(r.startswith("GPU:") for r in e["attribution"])


# --- energy: CPU and memory -----------------------------------------------------------------


def test_cpu_share_rule_is_the_runs_share_of_busy_host_time(store: Store, run: RunRow) -> None:
    e = acc(store, run)["energy"]
    # 25,200 s of 60,000 + 30,000 + 10,800 = 100,800 busy seconds (idle, iowait left out) = 25%
    assert (
        "CPU: the run's share of the host's busy CPU time (25200.0 s of 100800.0 s = 25.0%); "
        "use --whole-machine to charge everything"
    ) in e["attribution"]


def test_cpu_and_dram_from_rapl_times_the_cpu_share(store: Store) -> None:
    run = write_run(store, HOST_CPU + RAPL)
    c = acc(store, run)["energy"]["components"]
    # package: (8.6e5 - 5e5) + 3.6e5 = 720,000 J x 0.25 = 180,000 J = 0.05 kWh, +/-10%
    assert (c["cpu"]["value"], c["cpu"]["low"], c["cpu"]["high"]) == (
        approx(0.05),
        approx(0.045),
        approx(0.055),
    )
    assert c["cpu"]["method"] == "measured"
    assert "RAPL package counters x 0.250 (the run's CPU share)" in c["cpu"]["assumptions"]
    # dram: 3.7e4 - 1e3 = 36,000 J x 0.25 = 9,000 J = 0.0025 kWh, +/-10%
    assert (c["memory"]["value"], c["memory"]["low"], c["memory"]["high"]) == (
        approx(0.0025),
        approx(0.00225),
        approx(0.00275),
    )
    assert c["memory"]["method"] == "measured"


def test_cpu_modeled_from_a_known_cpu(store: Store, run: RunRow) -> None:
    c = acc(store, run)["energy"]["components"]["cpu"]
    # Xeon Platinum 8480+: 350 W per 56-core socket; 56 logical CPUs / (2 x 56) = 0.5 socket
    # -> 175 W. E = 175 x (0.3 x 3600 s x share 0.25 + 0.7 x 25,200 CPU-s / 56 CPUs)
    # = 175 x (270 + 315) = 102,375 J = 0.0284375 kWh, +/-40% -> [0.0170625, 0.0398125]
    # (the same as the host's power at u = 100,800 / (56 x 3600) = 0.5, 175 x 0.65 W, x share)
    assert (c["value"], c["low"], c["high"]) == (
        approx(0.0284375),
        approx(0.0170625),
        approx(0.0398125),
    )
    assert c["method"] == "modeled"
    text = " ".join(c["assumptions"])
    assert "TDP 350 W per 56-core socket" in text and "x 0.5 sockets' worth" in text
    assert "0.3 x duration x CPU share 0.250 + 0.7 x 25200.00 CPU-s / 56 CPUs" in text
    assert "no RAPL counters readable here" in text


@pytest.mark.parametrize(
    ("logical", "util", "watts"),
    [
        (56, 0.0, 52.5),  # 0.5 socket: 175 W x 0.3 (idle)
        (56, 1.0, 175.0),  # 175 W x (0.3 + 0.7)
        (56, 0.5, 113.75),  # 175 W x 0.65
        (224, 0.5, 455.0),  # two sockets: 700 W x 0.65
        (8, 0.5, 16.25),  # a VM seeing 8 threads: 350 x 8 / 112 = 25 W x 0.65
    ],
)
def test_known_cpu_socket_share_and_linear_curve(
    store: Store, logical: int, util: float, watts: float
) -> None:
    # no host CPU time: share 1; the run's CPU seconds are u x logical CPUs x 3600 s, so
    # E = W x (0.3 x 3600 + 0.7 x u x 3600) = W x (0.3 + 0.7 u) x 3600 s -> kWh = that / 1000
    s = make_summary(
        cpu={"seconds_total": util * logical * HOUR, "utilization_mean": util},
        host={"cpu_model": XEON, "logical_cpus": logical, "allowed_cores": float(logical)},
    )
    c = acc(store, write_run(store, []), s)["energy"]["components"]["cpu"]
    assert c["value"] == approx(watts / 1000)


def test_cpu_modeled_from_an_unknown_cpu(store: Store, run: RunRow) -> None:
    s = make_summary(host={"cpu_model": "Mystery CPU 9000", "logical_cpus": 56})
    c = acc(store, run, s)["energy"]["components"]["cpu"]
    # defaults.csv: 7 W per core x 56 logical / 2 = 196 W;
    # E = 196 x (0.3 x 3600 x 0.25 + 0.7 x 25,200 / 56) = 196 x 585 = 114,660 J = 0.03185 kWh,
    # +/-60% -> [0.01274, 0.05096]
    assert (c["value"], c["low"], c["high"]) == (approx(0.03185), approx(0.01274), approx(0.05096))
    assert c["method"] == "modeled"
    assert any("'Mystery CPU 9000' not in the catalog" in a for a in c["assumptions"])
    assert "uncertainty +/-60%" in c["assumptions"]


def test_configured_cpu_tdp_wins_over_the_catalog(store: Store, run: RunRow) -> None:
    c = acc(store, run, config=Config(cpu_tdp_watts=200.0))["energy"]["components"]["cpu"]
    # 200 x (0.3 x 3600 x 0.25 + 0.7 x 25,200 / 56) = 200 x 585 = 117,000 J = 0.0325 kWh, +/-40%
    assert (c["value"], c["low"], c["high"]) == (approx(0.0325), approx(0.0195), approx(0.0455))
    assert any("TDP 200 W (configured)" in a for a in c["assumptions"])


def test_memory_modeled_per_installed_gib_times_share(store: Store, run: RunRow) -> None:
    m = acc(store, run)["energy"]["components"]["memory"]
    # 0.375 W/GiB x 64 GiB = 24 W; share = peak RSS 8 / host peak used 32 = 0.25 -> 6 W;
    # x 3600 s = 21,600 J = 0.006 kWh, +/-50%
    assert (m["value"], m["low"], m["high"]) == (approx(0.006), approx(0.003), approx(0.009))
    assert m["method"] == "modeled"
    assert any("0.375 W per GiB x 64.0 GiB installed" in a for a in m["assumptions"])
    m = acc(store, run, config=Config(memory_watts_per_gib=0.5))["energy"]["components"]["memory"]
    # 0.5 W/GiB x 64 GiB x 0.25 = 8 W -> 0.008 kWh
    assert m["value"] == approx(0.008)


def test_server_watts_from_the_configuration(store: Store, run: RunRow) -> None:
    c = acc(store, run)["energy"]["components"]
    assert "server" not in c  # 0 W by default: no component
    c = acc(store, run, config=Config(server_watts=100.0))["energy"]["components"]
    # 100 W x 3600 s x CPU share 0.25 = 90,000 J = 0.025 kWh, no stated range
    s = c["server"]
    assert (s["value"], s["low"], s["high"], s["method"]) == (
        approx(0.025),
        approx(0.025),
        approx(0.025),
        "modeled",
    )


def test_whole_machine_charges_everything(store: Store) -> None:
    run = write_run(store, HOST_CPU + RAPL)
    e = acc(store, run, whole_machine=True, config=Config(server_watts=100.0))["energy"]
    assert e["attribution"][-1] == "CPU and memory: the whole machine is charged (--whole-machine)"
    c = e["components"]
    assert c["cpu"]["value"] == approx(0.2)  # 720,000 J x 1
    assert c["memory"]["value"] == approx(0.01)  # 36,000 J x 1
    assert c["server"]["value"] == approx(0.1)  # 100 W x 1 h
    e = acc(store, write_run(store, HOST_CPU, "0c0c0c0c0c0c"), whole_machine=True)["energy"]
    c = e["components"]
    # every busy second of the host: 175 x (0.3 x 3600 + 0.7 x 100,800 / 56) = 175 x 2340
    # = 409,500 J = 0.11375 kWh
    assert c["cpu"]["value"] == approx(0.11375)
    assert c["memory"]["value"] == approx(0.024)  # 24 W x 1 h, all of the memory


def test_without_host_cpu_time_the_whole_machine_is_charged(store: Store) -> None:
    run = write_run(store, [])
    e = acc(store, run)["energy"]
    assert "CPU and memory: the whole machine (host CPU time not available)" in e["attribution"]
    # share 1 for the idle part, the run's own CPU seconds for the busy part:
    # 175 x (0.3 x 3600 + 0.7 x 25,200 / 56) = 175 x 1395 = 244,125 J = 0.0678125 kWh
    assert e["components"]["cpu"]["value"] == approx(0.0678125)


# --- energy: PUE and facility ---------------------------------------------------------------


def test_pue_from_the_flag(store: Store, run: RunRow) -> None:
    p = acc(store, run, pue=1.3, config=Config(pue=1.2), region="aws:us-east-1")["energy"]["pue"]
    assert p == {"value": 1.3, "low": 1.3, "high": 1.3, "source": "--pue"}


def test_pue_from_the_configuration(store: Store, run: RunRow, tmp_path: Path) -> None:
    cfg = Config(path=tmp_path / "c.toml", pue=1.2)
    p = acc(store, run, config=cfg, region="aws:us-east-1")["energy"]["pue"]
    assert p == {"value": 1.2, "low": 1.2, "high": 1.2, "source": f"configuration {cfg.path}"}


def test_pue_from_the_provider_of_a_cloud_region(store: Store, run: RunRow) -> None:
    p = acc(store, run, region="aws:us-east-1")["energy"]["pue"]
    assert (p["value"], p["low"], p["high"]) == (1.14, 1.14, 1.14)  # pue.csv, aws
    assert p["source"].startswith("aws published PUE: ")


def test_pue_from_the_provider_dmi_shows(store: Store, run: RunRow) -> None:
    p = acc(store, run, dmi_root=str(FIXTURES / "dmi_gcp"))["energy"]["pue"]
    assert p["value"] == 1.09  # pue.csv, gcp


def test_default_pue_with_its_range(store: Store, run: RunRow) -> None:
    p = acc(store, run, region="FR")["energy"]["pue"]
    # defaults.csv: 1.56 +/-20% -> [1.248, 1.872]
    assert (p["value"], p["low"], p["high"]) == (1.56, approx(1.248), approx(1.872))
    assert p["source"].startswith("default PUE, facility unknown: Uptime Institute")


def measured_summary() -> dict[str, Any]:
    return make_summary(gpus=[gpu(0, 3.6e6, "counter")])


def test_facility_is_device_times_pue_and_all_measured(store: Store) -> None:
    run = write_run(store, HOST_CPU + RAPL)
    e = acc(store, run, measured_summary(), pue=1.2)["energy"]
    # gpu 1 [0.95, 1.05] + cpu 0.05 [0.045, 0.055] + dram 0.0025 [0.00225, 0.00275]
    # = 1.0525 [0.99725, 1.10775]
    d = e["device"]
    assert (d["value"], d["low"], d["high"]) == (approx(1.0525), approx(0.99725), approx(1.10775))
    assert d["method"] == "measured"
    f = e["facility"]
    # x 1.2: 1.263 [1.1967, 1.3293]
    assert (f["value"], f["low"], f["high"]) == (approx(1.263), approx(1.1967), approx(1.3293))
    assert f["method"] == "measured"
    assert f["assumptions"] == ["PUE 1.2 (--pue)"]


def test_facility_range_takes_the_pue_range(store: Store) -> None:
    run = write_run(store, HOST_CPU + RAPL)
    f = acc(store, run, measured_summary(), region="FR")["energy"]["facility"]
    # 1.0525 x 1.56, low 0.99725 x 1.248, high 1.10775 x 1.872
    assert (f["value"], f["low"], f["high"]) == (
        approx(1.0525 * 1.56),
        approx(0.99725 * 1.248),
        approx(1.10775 * 1.872),
    )


def test_total_method_is_the_weakest_part(store: Store, run: RunRow) -> None:
    rapl = write_run(store, HOST_CPU + RAPL, "0d0d0d0d0d0d")
    # a polled GPU with RAPL: polled
    assert acc(store, rapl)["energy"]["device"]["method"] == "polled"
    # a modeled CPU (no RAPL) with a counter GPU: modeled
    e = acc(store, run, measured_summary())["energy"]
    assert e["components"]["gpu"]["method"] == "measured"
    assert e["device"]["method"] == e["facility"]["method"] == "modeled"
    # configured server power is modeled too
    e = acc(store, rapl, measured_summary(), config=Config(server_watts=10.0))["energy"]
    assert e["device"]["method"] == "modeled"


# --- carbon ---------------------------------------------------------------------------------


def test_carbon_from_the_regions_annual_average(store: Store) -> None:
    run = write_run(store, HOST_CPU + RAPL)
    c = acc(store, run, measured_summary(), region="FR", pue=1.2)["carbon"]
    # facility 1.263 kWh [1.1967, 1.3293] x 44 g/kWh (France, Ember 2024), intensity +/-15%:
    # 55.572 g, low 1.1967 x 44 x 0.85 = 44.75658, high 1.3293 x 44 x 1.15 = 67.26258
    op = c["operational"]
    assert (op["value"], op["low"], op["high"]) == (
        approx(55.572),
        approx(44.75658),
        approx(67.26258),
    )
    assert op["unit"] == "gCO2e" and op["method"] == "modeled"
    assert c["intensity"] == {
        "g_per_kwh": 44.0,
        "region": "FR",
        "name": "France",
        "how": "--region",
        "method": "modeled",
        "source": "Ember yearly electricity data (2024)",
        "year": 2024,
    }
    assert c["total"]["value"] == approx(55.572)
    assert "embodied" not in c


def test_carbon_without_a_location_uses_the_world_average(store: Store) -> None:
    run = write_run(store, HOST_CPU + RAPL)
    c = acc(store, run, measured_summary(), pue=1.2)["carbon"]
    # 1.263 kWh x 473 g/kWh = 597.399 g; +/-50%: 1.1967 x 473 x 0.5 = 283.01955,
    # 1.3293 x 473 x 1.5 = 943.13835
    op = c["operational"]
    assert (op["value"], op["low"], op["high"]) == (
        approx(597.399),
        approx(283.01955),
        approx(943.13835),
    )
    assert (c["intensity"]["how"], c["intensity"]["region"]) == ("unknown", "WORLD")
    assert "intensity uncertainty +/-50%" in op["assumptions"]
    assert any(a.startswith("location unknown: using the world average") for a in op["assumptions"])


@dataclass
class FakeElectricityMaps:
    status: int = 200
    body: bytes = json.dumps(
        {"zone": "DE", "carbonIntensity": 302, "datetime": "2026-11-29T15:00:00.000Z"}
    ).encode()
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    base_url: str = ""


@pytest.fixture
def emaps(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeElectricityMaps]:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    state = FakeElectricityMaps()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.requests.append((self.path, self.headers.get("auth-token")))
            self.send_response(state.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(state.body)))
            self.end_headers()
            self.wfile.write(state.body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.base_url = f"http://127.0.0.1:{server.server_address[1]}/v3"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_live_intensity_from_electricity_maps(store: Store, emaps: FakeElectricityMaps) -> None:
    run = write_run(store, HOST_CPU + RAPL)
    cfg = Config(electricitymaps_token="tok-1", electricitymaps_url=emaps.base_url)
    c = acc(store, run, measured_summary(), region="DE", pue=1.2, config=cfg)["carbon"]
    assert emaps.requests == [("/v3/carbon-intensity/latest?zone=DE", "tok-1")]
    # 1.263 kWh x 302 g/kWh = 381.426 g; live +/-10%: 1.1967 x 302 x 0.9 = 325.26306,
    # 1.3293 x 302 x 1.1 = 441.59346
    op = c["operational"]
    assert (op["value"], op["low"], op["high"]) == (
        approx(381.426),
        approx(325.26306),
        approx(441.59346),
    )
    i = c["intensity"]
    assert (i["g_per_kwh"], i["method"], i["region"]) == (302.0, "measured", "DE")
    assert i["source"] == "Electricity Maps (live), zone DE, 2026-11-29 15:00 UTC"


def test_live_intensity_error_falls_back_to_the_annual_average(
    store: Store, emaps: FakeElectricityMaps
) -> None:
    emaps.status = 500
    run = write_run(store, HOST_CPU + RAPL)
    cfg = Config(electricitymaps_token="tok-1", electricitymaps_url=emaps.base_url)
    c = acc(store, run, measured_summary(), region="DE", pue=1.2, config=cfg)["carbon"]
    assert len(emaps.requests) == 1
    # 1.263 kWh x 344 g/kWh (Germany, Ember 2024) = 434.472 g, +/-15%
    op = c["operational"]
    assert op["value"] == approx(434.472)
    assert (c["intensity"]["g_per_kwh"], c["intensity"]["method"]) == (344.0, "modeled")
    assert (
        "live intensity unavailable (Electricity Maps server error (HTTP 500)); annual average used"
    ) in op["assumptions"]


def test_no_token_no_network_call(store: Store, emaps: FakeElectricityMaps) -> None:
    run = write_run(store, HOST_CPU + RAPL)
    cfg = Config(electricitymaps_url=emaps.base_url)
    c = acc(store, run, measured_summary(), region="DE", config=cfg)["carbon"]
    assert emaps.requests == []
    assert c["intensity"]["g_per_kwh"] == 344.0


def test_embodied_carbon(store: Store) -> None:
    run = write_run(store, HOST_CPU + RAPL)
    c = acc(store, run, region="FR", pue=1.2, config=Config(embodied=True))["carbon"]
    e = c["embodied"]
    # defaults.csv: 150 kgCO2e per GPU, 2500 per server; the server x 28 / 56 cores = 0.5;
    # (2 x 150 + 2500 x 0.5) kg = 1550 kg = 1.55e6 g over 6 x 8760 h = 52,560 h, for 1 h:
    # 1.55e6 / 52560 = 29.49010 g, range x0.5 to x2
    g = 1.55e6 / 52_560
    assert (e["value"], e["low"], e["high"]) == (approx(g), approx(g / 2), approx(g * 2))
    assert e["method"] == "modeled"
    assert "amortised over 6 years" in " ".join(e["assumptions"])
    t = c["total"]
    op = c["operational"]
    assert t["value"] == approx(op["value"] + g)
    assert (t["low"], t["high"]) == (approx(op["low"] + g / 2), approx(op["high"] + 2 * g))


# --- cost -----------------------------------------------------------------------------------


def test_cost_from_an_instance_type(store: Store, run: RunRow) -> None:
    c = acc(store, run, instance_type="aws:p5.48xlarge")["cost"]
    # $55.04/h for 8 GPUs; the run used 2: 2/8 x 55.04 x 1 h = $13.76
    assert c["compute"]["value"] == approx(13.76)
    assert c["total"]["value"] == approx(13.76)
    assert (c["total"]["unit"], c["total"]["method"]) == ("USD", "modeled")
    text = " ".join(c["total"]["assumptions"])
    assert "aws:p5.48xlarge on demand $55.04/h ($6.88/GPU-hour" in text
    assert "2 of its 8 GPUs, for 1.0000 h" in text
    assert c["electricity"] is None


def test_cost_instance_with_a_discount(store: Store, run: RunRow) -> None:
    c = acc(store, run, instance_type="aws:p5.48xlarge", config=Config(discount=0.6))["cost"]
    # 55.04 x (1 - 0.6) x 2/8 x 1 h = $5.504
    assert c["total"]["value"] == approx(5.504)
    assert "discount 60% (configured: spot/reserved)" in c["total"]["assumptions"]


def test_cost_instance_for_a_cpu_only_run_is_its_cores_share(store: Store, run: RunRow) -> None:
    c = acc(store, run, make_summary(gpus=[]), instance_type="aws:p5.48xlarge")["cost"]
    # no GPU: 28 allowed of 56 logical CPUs = 0.5 x 55.04 x 1 h = $27.52
    assert c["total"]["value"] == approx(27.52)


def test_cost_instance_from_dmi(store: Store, run: RunRow) -> None:
    c = acc(store, run, dmi_root=str(FIXTURES / "dmi_aws"))["cost"]
    assert c["total"]["value"] == approx(13.76)  # p5.48xlarge from product_name, as above


def test_cost_per_gpu_hour(store: Store, run: RunRow) -> None:
    cfg = Config(usd_per_gpu_hour=2.5, usd_per_hour=100.0)
    c = acc(store, run, config=cfg, instance_type="aws:p5.48xlarge")["cost"]
    # the configured GPU-hour rate wins: 2 GPUs x 1 h x $2.5 = $5
    assert c["total"]["value"] == approx(5.0)
    assert c["total"]["assumptions"][0] == "2 GPU(s) x 1.0000 h x $2.5/GPU-hour (configured)"


def test_cost_per_hour(store: Store, run: RunRow) -> None:
    c = acc(store, run, config=Config(usd_per_hour=3.0))["cost"]
    assert c["total"]["value"] == approx(3.0)  # 1 h x $3


def test_cost_of_electricity_is_added(store: Store) -> None:
    run = write_run(store, HOST_CPU + RAPL)
    cfg = Config(usd_per_hour=3.0, usd_per_kwh=0.2)
    c = acc(store, run, measured_summary(), pue=1.2, config=cfg)["cost"]
    # facility 1.263 kWh [1.1967, 1.3293] x $0.2 = $0.2526 [0.23934, 0.26586]
    el = c["electricity"]
    assert (el["value"], el["low"], el["high"]) == (
        approx(0.2526),
        approx(0.23934),
        approx(0.26586),
    )
    t = c["total"]
    # $3 (no range) + electricity
    assert (t["value"], t["low"], t["high"]) == (approx(3.2526), approx(3.23934), approx(3.26586))


def test_unknown_instance_type_is_said(store: Store, run: RunRow) -> None:
    c = acc(store, run, instance_type="aws:p99.huge")["cost"]
    assert c["total"]["value"] is None and c["compute"] is None
    assert (
        "instance type 'aws:p99.huge' (from --instance-type) is not in the price catalog"
        in c["total"]["assumptions"]
    )
    assert c["per_unit"] == {}


def test_no_price_says_how_to_set_one(store: Store, run: RunRow) -> None:
    c = acc(store, run)["cost"]
    assert c["total"]["value"] is None
    assert c["total"]["low"] is None and c["total"]["high"] is None
    assert c["total"]["assumptions"] == [
        "no price known: set [cost] instance_type, usd_per_gpu_hour or usd_per_hour in the "
        "configuration, or --instance-type"
    ]


def test_unit_costs(store: Store, run: RunRow) -> None:
    s = make_summary(steps={"count": 100, "samples_total": 3200.0, "tokens_total": 1e6})
    c = acc(store, run, s, instance_type="aws:p5.48xlarge")["cost"]
    # $13.76 / 100 steps = 0.1376; / 3200 samples x 1e3 = 4.3; / 1e6 tokens x 1e6 = 13.76
    assert c["per_unit"] == {
        "usd_per_step": approx(0.1376),
        "usd_per_1k_samples": approx(4.3),
        "usd_per_1m_tokens": approx(13.76),
    }
    s = make_summary(steps={"count": 100})
    assert acc(store, run, s, instance_type="aws:p5.48xlarge")["cost"]["per_unit"] == {
        "usd_per_step": approx(0.1376)
    }


# --- the whole --------------------------------------------------------------------------------


def test_account_returns_every_section(store: Store, run: RunRow) -> None:
    out = acc(store, run, region="FR")
    assert set(out) == {"energy", "carbon", "cost", "flops"}  # no steps target: no forecast
    # 2 H100 (bf16 989.4 TFLOP/s) x 3600 s x 0.5 active x 0.35 = 1.2467e18 FLOP
    assert out["flops"]["value"] == approx(2 * 3600 * 0.5 * 989.4e12 * 0.35)
    json.dumps(out)  # the summary is stored as JSON


def test_accounted_turns_a_failure_into_a_note(store: Store, run: RunRow) -> None:
    out = accounted(store, run, make_summary(), opts(precision="fp7"))
    assert out == {
        "notes": [
            "a note",
            "accounting failed: ValueError: unknown precision 'fp7'; expected one of "
            "fp64, fp32, tf32, bf16, fp16, fp8",
        ]
    }
    assert set(accounted(store, run, make_summary(), opts())) >= {"energy", "cost"}
