"""The HTML report: self-contained, escaped, with the charts' data and the summary's sections;
and ``computewatch report`` as a real child process."""

from __future__ import annotations

import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from computewatch.accounting.engine import AccountingOptions, account, with_accounting
from computewatch.analysis.summary import build_summary
from computewatch.analysis.summary_types import RunSummary
from computewatch.config import Config
from computewatch.readings import Kind, Labels, labels
from computewatch.store import COMPLETED, RunRow, Store
from computewatch.views.html import build_html, chart_data, write_report
from computewatch.views.html.page import json_for_script
from computewatch.views.html.run import accounting_section, summary_of

T0 = 1_700_000_000.0
MONO0 = 5000.0
MIB = 1024 * 1024
GPUS = ("GPU-11111111-2222-3333-4444-555555555555", "GPU-66666666-7777-8888-9999-000000000000")
ASSETS = Path(__file__).resolve().parents[3] / "src" / "computewatch" / "views" / "html" / "assets"
NASTY = "</script><b>x"


def make_run(
    store: Store,
    *,
    run_id: str = "0a0a0a0a0a0a",
    name: str | None = "train",
    n: int = 120,
    gpus: bool = True,
    steps: bool = True,
    only: tuple[str, ...] | None = None,
    cpu_spike_at: int | None = None,
    tags: dict[str, str] | None = None,
    command: list[str] | None = None,
    rapl: bool = False,
    flops: float | None = None,
    settings: dict[str, float] | None = None,
) -> RunRow:
    """A finished run of ``n`` one-second ticks written by hand: the tree burns one CPU-second
    per second (50 % of 2 cores), disks and network move fixed rates, GPUs hold steady. With
    ``rapl``, RAPL counters: 10 W on the CPU package, 3 W on DRAM. Each step carries ``flops``;
    ``settings`` are what ``track()`` declared (``peak_flops``, ``recompute_factor``)."""
    host: dict[str, Any] = {"allowed_cores": 2.0, "logical_cpus": 8, "hostname": "box"}
    if gpus:
        host["gpus"] = [
            {"uuid": u, "index": i, "name": "NVIDIA H100 80GB HBM3", "simulated": True}
            for i, u in enumerate(GPUS)
        ]
        host["gpus_used"] = list(GPUS)
    rk = store.create_run(
        run_id=run_id,
        name=name,
        tags=tags or {"team": "ml"},
        command=command or ["python", "train.py"],
        cwd="/work",
        mode="run",
        started_at=T0,
        interval_seconds=1.0,
        host=host,
    )
    cpu = []
    total = 0.0
    for i in range(n):
        total += 1.0 if i else 0.0
        if cpu_spike_at is not None and i == cpu_spike_at:
            total += 1.0  # one second at 2 cores: 100 %
        cpu.append(total)
    defs: list[tuple[str, Labels, Kind, list[float]]] = [
        ("tree_cpu_seconds_total", (), Kind.COUNTER, cpu),
        ("tree_resident_memory_bytes", (), Kind.GAUGE, [100.0 * MIB] * n),
        ("host_memory_used_bytes", (), Kind.GAUGE, [4e9] * n),
        ("host_memory_total_bytes", (), Kind.GAUGE, [16e9] * n),
        ("host_disk_read_bytes_total", labels(device="sda"), Kind.COUNTER,
         [1000.0 * i for i in range(n)]),
        ("host_disk_written_bytes_total", labels(device="sda"), Kind.COUNTER,
         [2000.0 * i for i in range(n)]),
        ("host_network_receive_bytes_total", labels(interface="eth0"), Kind.COUNTER,
         [500.0 * i for i in range(n)]),
        ("host_network_receive_bytes_total", labels(interface="lo"), Kind.COUNTER,
         [1e9 * i for i in range(n)]),
        ("host_network_transmit_bytes_total", labels(interface="eth0"), Kind.COUNTER,
         [300.0 * i for i in range(n)]),
    ]  # fmt: skip
    if gpus:
        for g, uuid in enumerate(GPUS):
            lb = labels(gpu=uuid)
            defs += [
                ("gpu_utilization_ratio", lb, Kind.GAUGE, [0.5 + 0.25 * g] * n),
                ("gpu_memory_used_bytes", lb, Kind.GAUGE, [(10 + g) * 1024.0 * MIB] * n),
                ("gpu_memory_total_bytes", lb, Kind.GAUGE, [80 * 1024.0 * MIB] * n),
                ("gpu_power_watts", lb, Kind.GAUGE, [300.0 + 50 * g] * n),
                ("gpu_energy_joules_total", labels(gpu=uuid, method="counter"), Kind.COUNTER,
                 [(300.0 + 50 * g) * i for i in range(n)]),
            ]  # fmt: skip
    if rapl:
        defs += [
            ("cpu_energy_joules_total", labels(domain="package", socket="0"), Kind.COUNTER,
             [10.0 * i for i in range(n)]),
            ("cpu_energy_joules_total", labels(domain="dram", socket="0"), Kind.COUNTER,
             [3.0 * i for i in range(n)]),
        ]  # fmt: skip
    if only is not None:
        defs = [d for d in defs if d[0] in only]
    store.write_batch(
        rk,
        series=[(i, nm, lb, k) for i, (nm, lb, k, _) in enumerate(defs)],
        ticks=[(i, MONO0 + i, T0 + i) for i in range(n)],
        samples=[(rk, seq, i, v) for i, d in enumerate(defs) for seq, v in enumerate(d[3])],
        steps=[(4242, MONO0 + i + 0.5, T0 + i + 0.5, 32.0, None, flops) for i in range(n)]
        if steps
        else [],
        writers=[(4242, MONO0, {"pid": 4242, "settings": settings or {}})] if steps else [],
        data_until=T0 + n - 1,
    )
    store.update_run(rk, status=COMPLETED, exit_code=0, ended_at=T0 + n, notes=["a note"])
    return store.run_by_key(rk)


class Page(HTMLParser):
    """Every start tag with its attributes, and the text of each ``<script>``."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.text: list[str] = []
        self._script: dict[str, str | None] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._script = dict(attrs)
            self.scripts.append((self._script, ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._script = None

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)
        else:
            self.text.append(data)

    def count(self, tag: str) -> int:
        return sum(1 for t, _ in self.tags if t == tag)

    def data(self) -> Any:
        found = [t for a, t in self.scripts if a.get("type") == "application/json"]
        assert len(found) == 1
        return json.loads(found[0])


def test_page_is_self_contained(store: Store) -> None:
    page = build_html(store, make_run(store))
    doc = Page(page)
    assert page.startswith("<!DOCTYPE html>")
    assert doc.count("script") == 3  # the data, uPlot, ours: all inline
    for attrs, text in doc.scripts:
        assert "src" not in attrs
        assert text.strip()
    assert doc.count("link") == 0
    assert "<script src" not in page.lower() and "<link" not in page.lower()
    for tag, attrs in doc.tags:  # no tag loads anything: no src, no href at all
        assert "src" not in attrs, tag
        assert "href" not in attrs, tag
    assert "@import" not in page and "url(" not in page
    # The only web addresses are the one in uPlot's banner comment, not a reference.
    assert set(re.findall(r"https?://[^\s\"')]+", page)) <= {"https://github.com/leeoniya/uPlot"}


def test_assets_cannot_close_their_element() -> None:
    for name in ("uPlot.iife.min.js", "uPlot.min.css", "report.js", "report.css"):
        text = (ASSETS / name).read_text().lower()
        assert "</script" not in text and "</style" not in text and "<!--" not in text, name
    assert (ASSETS / "uPlot.LICENSE").read_text().startswith("The MIT License")


def test_embedded_data_has_the_charts(store: Store) -> None:
    run = make_run(store)
    doc = Page(build_html(store, run))
    data = doc.data()
    expected = chart_data(store, run, summary_of(store, run))
    expected["run"] = {"id": run.id, "name": run.name, "started_at": run.started_at}
    assert data == json.loads(json.dumps(expected))
    ids = [c["id"] for c in data["charts"]]
    assert ids == [
        "cpu", "memory", "gpu_util", "gpu_memory", "gpu_power", "throughput_steps",
        "throughput_samples", "step_time", "disk", "network",
    ]  # fmt: skip
    charts = {c["id"]: c for c in data["charts"]}
    assert data["grids"]["ticks"] == [T0 + i for i in range(120)]  # short: every tick
    for c in data["charts"]:
        assert c["series"], c["id"]
        grid = data["grids"][c["grid"]]
        for s in c["series"]:
            assert len(s["mean"]) == len(grid)
            assert any(v is not None for v in s["mean"])
            assert "lo" not in s  # nothing was downsampled
        assert doc.count("figure") == len(data["charts"])
    cpu = charts["cpu"]["series"][0]["mean"]
    assert cpu[0] is None and set(cpu[1:]) == {0.5}  # 1 CPU-s/s of 2 allowed cores
    assert [s["label"] for s in charts["gpu_util"]["series"]] == ["GPU 0", "GPU 1"]
    assert set(charts["gpu_util"]["series"][1]["mean"]) == {0.75}
    assert "simulated" in charts["gpu_util"]["subtitle"]
    net = {s["label"]: s["mean"] for s in charts["network"]["series"]}
    assert set(net["received"][1:]) == {500.0}  # lo left out
    disk = {s["label"]: s["mean"] for s in charts["disk"]["series"]}
    assert set(disk["host write"][1:]) == {2000.0}
    steps = charts["throughput_steps"]["series"][0]["mean"]
    assert sum(steps) / len(steps) == pytest.approx(1.0, rel=0.05)  # one step a second
    assert set(charts["step_time"]["series"][0]["mean"]) == {0.5, 1.0}  # first from start


def test_long_run_is_downsampled_and_keeps_its_spike(store: Store) -> None:
    n = 9000
    run = make_run(store, n=n, gpus=False, steps=False, cpu_spike_at=6001)
    data = chart_data(store, run, summary_of(store, run))
    ticks = data["grids"]["ticks"]
    assert len(ticks) == 1800  # buckets of 5
    cpu = next(c for c in data["charts"] if c["id"] == "cpu")
    assert cpu["per_bucket"] == 5
    s = cpu["series"][0]
    assert max(v for v in s["hi"] if v is not None) == 1.0  # the one second at 100 %
    assert min(v for v in s["lo"] if v is not None) == 0.5
    assert s["mean"][6001 // 5] == pytest.approx(0.6)


def test_charts_only_where_there_is_data(store: Store) -> None:
    run = make_run(store, gpus=False, steps=False, only=("host_memory_used_bytes",))
    data = chart_data(store, run, summary_of(store, run))
    assert [c["id"] for c in data["charts"]] == ["memory"]
    assert [s["label"] for s in data["charts"][0]["series"]] == ["host used"]
    page = build_html(store, run)
    assert 'id="section-gpus"' not in page


def test_a_run_without_samples_has_no_charts(store: Store) -> None:
    run = make_run(store, gpus=False, steps=False, only=())
    assert chart_data(store, run, summary_of(store, run)) == {"grids": {}, "charts": []}
    page = build_html(store, run)
    assert 'id="section-charts"' not in page and 'id="section-run"' in page


def test_user_input_is_escaped(store: Store) -> None:
    run = make_run(
        store,
        name=NASTY,
        tags={"<img src=x onerror=alert(1)>": "a&b\"c'"},
        command=["python", "-c", "print('</script>')", "<!--"],
    )
    store.update_run(run.key, notes=["<script>alert(1)</script>"])
    run = store.run_by_key(run.key)
    page = build_html(store, run)
    assert NASTY not in page
    assert "<img" not in page and "<b>" not in page
    assert page.count("</script>") == 3  # only the page's own three elements end
    assert "&lt;/script&gt;&lt;b&gt;x" in page  # shown as text in the title and heading
    doc = Page(page)
    assert doc.count("b") == 0 and doc.count("img") == 0 and doc.count("script") == 3
    assert NASTY in "".join(doc.text)  # reads as the text the user typed
    assert doc.data()["run"]["name"] == NASTY  # and round-trips through the JSON block
    assert "&lt;img src=x onerror=alert(1)&gt;=a&amp;b&quot;c&#x27;" in page


def test_json_for_script_cannot_end_its_element() -> None:
    text = json_for_script({"a": "</script><!-- & >", "b": [1.5, None]})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"a": "</script><!-- & >", "b": [1.5, None]}


def accounted(store: Store, run: RunRow, tmp_path: Path) -> RunSummary:
    """The run's summary with the accounting the engine adds when a run ends: in Austria
    (103 gCO2e/kWh), PUE 1.5, $3.60 an hour, on no cloud."""
    opts = AccountingOptions(
        config=Config(usd_per_hour=3.6),
        region="AT",
        pue=1.5,
        environ={},
        dmi_root=str(tmp_path / "no-dmi"),
    )
    summary = build_summary(store, run)
    return with_accounting(summary, account(store, run, summary, opts))


def section(page: str, name: str, until: str) -> str:
    return page[page.index(f'id="section-{name}"') : page.index(f'id="section-{until}"')]


def cells(html_text: str) -> str:
    """The text of the HTML, each cell or item on its own, ``|`` between them."""
    return "|".join(t.strip() for t in re.split(r"<[^>]+>", html_text) if t.strip())


def test_accounting_sections_show_the_engines_figures(store: Store, tmp_path: Path) -> None:
    run = make_run(store, rapl=True)
    assert 'class="accounting"' not in build_html(store, run)
    store.update_run(run.key, summary=accounted(store, run, tmp_path))
    page = build_html(store, store.run_by_key(run.key))
    # Energy over the 120 s run (the counters' last minus first, at 119 s):
    #   GPUs 300 W x 119 s + 350 W x 119 s = 77,350 J (counters, +/-5 %: 73,482.5-81,217.5 J)
    #   CPU package 10 W x 119 s = 1,190 J, DRAM 3 W x 119 s = 357 J (RAPL, +/-10 %)
    #   device 78,897 J = 0.021916 kWh; facility x PUE 1.5 = 0.032874 kWh
    #   low (73,482.5 + 1,071 + 321.3) x 1.5 / 3.6e6 = 0.031198 kWh,
    #   high (81,217.5 + 1,309 + 392.7) x 1.5 / 3.6e6 = 0.034550 kWh
    energy = cells(section(page, "energy", "carbon"))
    # (the sections list what they hold by name: the stored summary's keys are sorted)
    # Range ends are written as the values are (units.format_energy: J below 1 Wh = 3,600 J,
    # then Wh with one decimal), never in scientific notation:
    #   CPU 1,071-1,309 J; GPUs 73,482.5 J = 20.4 Wh, 81,217.5 J = 22.6 Wh; DRAM 321.3-392.7 J
    #   device 74,874.8 J = 20.8 Wh, 82,919.2 J = 23.0 Wh
    #   facility 112,312.2 J = 31.2 Wh, 124,378.8 J = 34.5 Wh
    assert "components.cpu|1,190 J|measured|1,071 J–1,309 J" in energy
    assert "components.gpu|21.5 Wh|measured|20.4 Wh–22.6 Wh" in energy
    assert "components.memory|357 J|measured|321 J–393 J" in energy
    assert "device|21.9 Wh|measured|20.8 Wh–23.0 Wh" in energy
    assert "facility|32.9 Wh|measured|31.2 Wh–34.5 Wh|PUE 1.5 (--pue)" in energy
    assert "pue|1.5|1.5–1.5|--pue" in energy
    assert "e-0" not in energy
    # Carbon: 0.032874 kWh x 103 g/kWh = 3.386 g; the range widened by the grid's +/-15 %:
    #   0.031198 x 103 x 0.85 = 2.731 g, 0.034550 x 103 x 1.15 = 4.092 g (three digits)
    carbon = cells(section(page, "carbon", "cost"))
    assert "operational|3.39 g CO2e|modeled|2.73 g CO2e–4.09 g CO2e" in carbon
    assert "total|3.39 g CO2e|modeled|2.73 g CO2e–4.09 g CO2e" in carbon
    # The SCI score of one run is the operational carbon plus M, the embodied share (always
    # estimated): (2 GPUs x 150 kg + the server's 2,500 kg x 0.25 of its cores) x 1000 g x
    # (120 s = 1/30 h) / (6 years = 52,560 h) = 0.5866 g, range x0.5 to x2 (0.2933-1.1733 g):
    #   3.386 + 0.587 = 3.973 g; 2.731 + 0.293 = 3.024 g; 4.092 + 1.173 = 5.265 g
    assert "sci|3.97 g CO2e per run|3.02 g CO2e per run–5.27 g CO2e per run" in carbon
    assert "sci.inputs.M_g|0.5866" in carbon
    assert "intensity.g_per_kwh|103" in carbon and "intensity.name|Austria" in carbon
    # Cost: 120 s = 1/30 h x $3.60/h = $0.12; 120 steps: $0.001 a step; 3,840 samples (32 a
    # step): $0.03125 per 1,000
    cost = cells(section(page, "cost", "flops"))
    assert "compute|$0.12|modeled|$0.12–$0.12|0.0333 h x $3.6/hour (configured)" in cost
    assert "total|$0.12|modeled" in cost
    assert "per_unit.usd_per_1k_samples|0.03125|per_unit.usd_per_step|0.001" in cost
    assert 'id="section-forecast"' not in page  # no step target
    # The headline figures become cards at the top too.
    cards = cells(page[page.index('class="cards"') : page.index("</section>")])
    assert "energy|32.9|Wh|facility, measured" in cards
    assert "carbon|3.39|g CO2e|total, modeled" in cards
    assert "cost|$0.12|total, modeled" in cards


def test_mfu_and_hfu_show_as_percentages(store: Store, tmp_path: Path) -> None:
    # 120 steps of 4e14 FLOP, the first at 0.5 s: the window from the first step to the last
    # is 119 s and holds 119 steps' FLOPs; at a declared peak of 1e15 FLOP/s
    #   MFU = 119 x 4e14 / (119 s x 1e15 FLOP/s) = 0.4; HFU = MFU x recompute factor 1.25 = 0.5
    run = make_run(store, flops=4e14, settings={"peak_flops": 1e15, "recompute_factor": 1.25})
    store.update_run(run.key, summary=accounted(store, run, tmp_path))
    page = build_html(store, store.run_by_key(run.key))
    flops = cells(section(page, "flops", "host"))
    assert "flops|4.8e+16 FLOP|counted" in flops  # 120 steps x 4e14
    assert "flops_per_second|4e+14 FLOP/s|counted" in flops
    assert "mfu|40.0%|counted|40.0%–40.0%" in flops
    assert "hfu|50.0%|counted|50.0%–50.0%" in flops
    cards = cells(page[page.index('class="cards"') : page.index("</section>")])
    assert "flops|4.8e+16|FLOP|counted" in cards


def test_accounting_section_of_any_shape() -> None:
    assert "<table" in accounting_section("cost", {"value": 3, "unit": "USD"})
    odd = accounting_section("forecast", [1, "two", {"x": 1}])
    assert "forecast" in odd and "two" in odd
    assert "<td>" in accounting_section("energy", 12.5)


def test_write_report_writes_the_page(store: Store, tmp_path: Path) -> None:
    run = make_run(store)
    out = write_report(store, run, tmp_path / "r.html")
    assert out == tmp_path / "r.html"
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    with pytest.raises(OSError):
        write_report(store, run, tmp_path / "missing" / "r.html")
    assert not (tmp_path / "missing").exists()


# -- the CLI on a real run ------------------------------------------------------------------


@pytest.mark.slow
def test_cli_report_of_a_real_run(cw: Any, tmp_path: Path) -> None:
    code = "import time; t = time.time()\nwhile time.time() - t < 1.0: sum(range(1000))"
    cw.ok("run", "--quiet", "--interval", "0.1", "--name", NASTY, "--", sys.executable, "-c", code)
    rid = cw.json("runs")[0]["id"]

    r = cw.ok("report", "last", "-o", "x.html")
    assert r.stdout.strip() == "x.html"
    page = (tmp_path / "x.html").read_text(encoding="utf-8")
    doc = Page(page)
    assert NASTY not in page
    charts = {c["id"] for c in doc.data()["charts"]}
    assert {"cpu", "memory"} <= charts
    assert rid in page
    assert 'id="section-energy"' in page  # accounted at the run's end, shown as stored

    r = cw.ok("report", rid[:6])
    assert r.stdout.strip() == f"computewatch-{rid}.html"
    assert (tmp_path / f"computewatch-{rid}.html").is_file()

    r = cw("report", "no-such-run", "-o", "y.html")
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and "no run matches 'no-such-run'" in r.stderr
    assert not (tmp_path / "y.html").exists()

    r = cw("report", "last", "-o", str(tmp_path / "no" / "such" / "dir" / "z.html"))
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1
    assert r.stderr.startswith("computewatch: cannot write ") and "No such file" in r.stderr
    r = cw("report", "last", "-o", str(tmp_path))  # a directory
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert "Traceback" not in r.stderr


def test_cli_report_without_a_database(cw: Any) -> None:
    r = cw("report", "last")
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and "no runs recorded yet" in r.stderr


def test_ticks_numbered_otherwise_still_line_up(store: Store) -> None:
    # Ticks need not be numbered 0, 1, 2, ...: the grid is their order, not their numbers.
    rk = store.create_run(
        run_id="0c0c0c0c0c0c", name=None, tags={}, command=["x"], cwd=None, mode="run",
        started_at=T0, interval_seconds=1.0, host={"allowed_cores": 1.0},
    )  # fmt: skip
    seqs = [7, 9, 10, 15, 16]
    store.write_batch(
        rk,
        series=[(0, "tree_cpu_seconds_total", (), Kind.COUNTER)],
        ticks=[(seq, MONO0 + i, T0 + i) for i, seq in enumerate(seqs)],
        samples=[(rk, seq, 0, float(i * i)) for i, seq in enumerate(seqs) if seq != 10],
    )
    run = store.run_by_key(rk)
    data = chart_data(store, run, summary_of(store, run))
    assert data["grids"]["ticks"] == [T0 + i for i in range(5)]
    # CPU-seconds 0, 1, (missing), 9, 16 at t = 0, 1, 2, 3, 4: rates 1 (t=1), 4 (t=3), 7.
    assert data["charts"][0]["series"][0]["mean"] == [None, 1.0, None, 4.0, 7.0]
