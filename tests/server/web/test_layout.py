"""What a person sees of the dashboard in Debian's Chromium at 1,280 and 1,920 px wide: no page
scrolls sideways, the runs table fits its page (tags wrap as whole chips, short values never
break at a hyphen), a card never cuts its value's unit, charts and columns carry units and human
titles, the command reads as a shell would quote it, "running for" ticks in the browser, and a
run's page stops saying LIVE once the run's final upload is in.

Each test leaves full-page screenshots under its ``tmp_path`` (``PAGE-WIDTH.png``) for a person
to look at."""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.server.conftest import ServerProcess
from tests.server.web.conftest import EVENTS_OPEN, Opened, seeded_upload
from tests.server.web.test_pages import post

from computewatch.server.web import charts
from computewatch.upload.protocol import RunUpload

WIDTHS = (1280, 1920)
COMMAND = ["python", "train.py", "--run-name", "my run", "--lr=3e-4", "--note", "it's"]
TAGS = {
    "env": "prod",
    "model": "llama-3-70b",
    "dataset": "c4-en-2024-05",
    "owner": "ml-platform",
    "sweep": "lr-3e-4-bs-512",
    "cluster": "us-east-1-a100",
}
FITS = "document.documentElement.scrollWidth <= document.documentElement.clientWidth"
LINES = """el => {
  const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  const tops = new Set();
  for (let node = walk.nextNode(); node; node = walk.nextNode()) {
    const range = document.createRange();
    range.selectNodeContents(node);
    for (const r of range.getClientRects()) { if (r.width > 0) tops.add(Math.round(r.top)); }
  }
  return tops.size;
}"""
"""The number of lines the text of an element takes."""


@dataclass
class Laid:
    server: ServerProcess
    admin: str
    done: str
    running: str


def _upload(
    run_id: str,
    *,
    co2e_g: float | None = None,
    cpu_seconds: float | None = None,
    extra_series: bool = False,
    **kw: Any,
) -> RunUpload:
    up = seeded_upload(run_id, **kw)
    up["command"] = list(COMMAND)
    summary = up["summary"]
    assert summary is not None
    if co2e_g is not None:
        summary["carbon"] = {
            "total": {"value": co2e_g, "unit": "gCO2e", "method": "modeled", "low": co2e_g / 2,
                      "high": co2e_g * 1.5, "assumptions": [], "source": "test"},
        }  # fmt: skip
    if cpu_seconds is not None:
        summary["cpu"]["seconds_total"] = cpu_seconds
    if extra_series:
        start = up["started_at"]
        series = list(up["series"])
        for name in ("host_disk_read_bytes_total", "host_disk_reads_total", "gpu_sm_clock_hertz"):
            series.append(
                {"name": name, "labels": {}, "bucket_seconds": 60.0, "kind": "rate",
                 "points": [[start + 60 * k, 1e6, 2e6, 3e6] for k in range(40)]}
            )  # fmt: skip
        up["series"] = series  # type: ignore[typeddict-item]
    return up


@pytest.fixture(scope="module")
def laid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Laid]:
    """A server with runs as a team names them: hyphenated ids, names and tags, a tiny CO2e,
    a short CPU time, a command with spaces and quotes, one run still running."""
    d = tmp_path_factory.mktemp("layout")
    s = ServerProcess(f"sqlite:///{d / 'server.db'}", d / "home")
    try:
        admin = s.token("ops", "admin")
        ingest = s.token("ml-platform", "ingest")
        now = time.time()
        runs = [
            _upload(
                "run-45590", name="run-45590", user="alice-smith", project="llm-pretrain",
                started_at=now - 86400, tags=TAGS, co2e_g=0.00453, cpu_seconds=3.0,
                extra_series=True,
            ),
            _upload(
                "run-45591", name="llama-3-70b-sft-lr-3e-4", user="bob-jones",
                project="llm-finetune", status="running", started_at=now - 1800,
                duration=1800, tags=TAGS,
            ),
        ]  # fmt: skip
        for k in range(6):
            runs.append(
                _upload(
                    f"run-4560{k}", name=f"bert-base-uncased-{k}", user="carol-o-neil",
                    project="nlp-eval", started_at=now - 2 * 86400 - k * 3600,
                    tags=dict(list(TAGS.items())[: 2 + k % 5]), status="failed" if k == 3
                    else "completed",
                )
            )  # fmt: skip
        post(s, ingest, *runs)
        yield Laid(s, admin, "run-45590", "run-45591")
    finally:
        s.close()


def _shot(o: Opened, path: Path) -> None:
    o.page.screenshot(path=str(path), full_page=True)


def _wait_for_charts(o: Opened) -> None:
    o.page.wait_for_function(
        "window.computewatchCharts && window.computewatchCharts.length"
        " === document.querySelectorAll('figure.chart').length"
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_no_page_scrolls_sideways(
    laid: Laid, open_page: Callable[..., Opened], width: int, tmp_path: Path
) -> None:
    o = open_page(laid.server.url, laid.admin)
    o.page.set_viewport_size({"width": width, "height": 900})
    for name, path in [
        ("runs", "/runs"),
        ("run", f"/runs/{laid.done}"),
        ("live-run", f"/runs/{laid.running}"),
        ("now", "/"),
        ("usage", "/usage?by=user"),
        ("usage-daily", "/usage?by=project&bucket=day"),
        ("compare", f"/compare?ids={laid.done},run-45600"),
    ]:
        o.goto(path)
        if o.page.locator("figure.chart").count():
            _wait_for_charts(o)
        _shot(o, tmp_path / f"{name}-{width}.png")
        assert o.page.evaluate(FITS), (path, width)
        if name == "compare":
            continue  # its efficiency table (13 figures a run) scrolls within its frame
        for table in o.page.locator(".scroll > table.grid").all():  # no table scrolls either
            assert table.evaluate("t => t.scrollWidth <= t.parentElement.clientWidth"), (
                path,
                width,
                table.get_attribute("id"),
            )
    o.check_clean()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_runs_table_fits_and_keeps_words_whole(
    laid: Laid, open_page: Callable[..., Opened], width: int, tmp_path: Path
) -> None:
    o = open_page(laid.server.url, laid.admin)
    o.page.set_viewport_size({"width": width, "height": 900})
    o.goto("/runs")
    _shot(o, tmp_path / f"runs-{width}.png")
    table = o.page.locator("#runs")
    fits = table.evaluate("t => t.scrollWidth <= t.parentElement.clientWidth")
    assert fits, table.evaluate("t => [t.scrollWidth, t.parentElement.clientWidth]")
    assert o.page.evaluate(FITS)
    # run, team, user, project, status and GPU model: one line each, never cut at a hyphen
    for part in (
        "td.name",
        ".team",
        ".user",
        ".project",
        "td.status-completed",
        "td:nth-child(6) small",
    ):
        cells = o.page.locator(f"#runs tbody {part}").all()
        assert cells, part
        for cell in cells:
            assert cell.evaluate(LINES) == 1, (part, cell.inner_text())
    chips = o.page.locator("#runs tbody .tag").all()
    assert len(chips) >= 6
    for chip in chips:  # a chip wraps whole, never within
        assert chip.evaluate(LINES) == 1, chip.inner_text()
    o.check_clean()


def _check_cards(o: Opened) -> dict[str, str]:
    """Every card's value fits its card or says it in full on hover; returns label → value."""
    found = {}
    for card in o.page.locator(".cards .card").all():
        label = card.locator(".label").text_content() or ""
        value = card.locator(".value")
        text = " ".join((value.text_content() or "").split())
        cut = value.evaluate("v => v.scrollWidth > v.clientWidth")
        assert not cut, (label, text)
        assert value.get_attribute("title") == text, (label, text)
        found[label] = text
    return found


@pytest.mark.parametrize("width", WIDTHS)
def test_cards_keep_their_unit(
    laid: Laid, open_page: Callable[..., Opened], width: int, tmp_path: Path
) -> None:
    o = open_page(laid.server.url, laid.admin)
    o.page.set_viewport_size({"width": width, "height": 900})
    o.goto(f"/runs/{laid.done}")
    _shot(o, tmp_path / f"run-{width}.png")
    cards = _check_cards(o)
    assert cards["CO2e"] == "0.00453 g CO2e"
    co2e = o.page.locator(".card", has_text="CO2e").locator(".value")
    unit = co2e.locator(".unit")
    assert unit.text_content() == "g CO2e"
    box = unit.bounding_box()
    card = o.page.locator(".card", has_text="CO2e").bounding_box()
    assert box is not None and card is not None
    assert box["x"] + box["width"] <= card["x"] + card["width"]  # the unit is inside its card
    o.goto("/")
    _check_cards(o)
    o.check_clean()


def test_charts_and_columns_have_units_and_human_titles(
    laid: Laid, open_page: Callable[..., Opened]
) -> None:
    o = open_page(laid.server.url, laid.admin)
    o.goto(f"/runs/{laid.done}")
    _wait_for_charts(o)
    captions = [
        " ".join(t.split()) for t in o.page.locator("figure.chart figcaption").all_inner_texts()
    ]
    for caption in captions:
        assert "_" not in caption, caption
        assert re.search(r"\(.+\)$", caption), caption
    assert "CPU (process tree) (CPU cores busy)" in captions
    assert "Disk read (host) (bytes/s)" in captions
    assert "Disk reads (host) (reads/s)" in captions
    assert "GPU SM clock (Hz)" in captions
    cpu_row = o.page.locator("#section-run tr", has_text="CPU-hours").locator("td")
    assert cpu_row.inner_text() == "0.000833 CPU-h"
    o.goto("/usage?by=user")
    heads = o.page.locator("#usage thead th").all_inner_texts()
    cpu = heads.index("CPU-hours")
    rows = {
        r[0]: r
        for r in (t.split("\t") for t in o.page.locator("#usage tbody tr").all_inner_texts())
    }
    assert rows["alice-smith"][cpu] == "0.000833 CPU-h"
    for row in rows.values():  # every figure carries its unit
        for cell in row[2:]:
            assert re.search(r"[A-Za-z%$]", cell), (heads, row)
    o.check_clean()


def test_the_command_is_quoted_as_a_shell_would(
    laid: Laid, open_page: Callable[..., Opened]
) -> None:
    o = open_page(laid.server.url, laid.admin)
    o.goto(f"/runs/{laid.done}")
    quoted = shlex.join(COMMAND)
    assert o.page.locator("header .command code").text_content() == quoted
    assert shlex.split(quoted) == COMMAND
    o.goto("/")
    row = o.page.locator(f"#running tr[data-run='{laid.running}'] td").first
    assert row.locator("code").text_content() == quoted
    o.check_clean()


def _seconds(text: str) -> int:
    h, m, s = (int(x) for x in text.split(":"))
    return h * 3600 + m * 60 + s


def test_running_for_ticks_in_the_browser(laid: Laid, open_page: Callable[..., Opened]) -> None:
    """The browser's clock (Playwright's, paused and advanced by hand) drives the cell: five
    seconds later it says five seconds more. Without script the server's value is there."""
    r = httpx.get(laid.server.url + "/", headers={"Authorization": f"Bearer {laid.admin}"})
    served = re.search(r'data-since="([\d.]+)"[^>]*>(\d+:\d\d:\d\d)</time>', r.text)
    assert served is not None and 1700 <= _seconds(served[2]) < 86400
    o = open_page(laid.server.url, laid.admin)
    o.page.clock.install()
    o.goto("/")
    cell = o.page.locator(f"#running tr[data-run='{laid.running}'] time")
    o.page.clock.pause_at(time.time() + 2)  # the page polls every 30 s: stay short of it
    o.page.clock.run_for(1000)
    before = _seconds(cell.text_content() or "")
    o.page.clock.run_for(5000)
    after = _seconds(cell.text_content() or "")
    assert after - before == 5
    assert before >= 1800
    o.check_clean()


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_live_leaves_the_heading_when_the_run_ends(
    server: Callable[..., ServerProcess], open_page: Callable[..., Opened], tmp_path: Path
) -> None:
    s = server()
    admin = s.token("ops", "admin")
    ingest = s.token("ml", "ingest")
    up = seeded_upload("ends0001", name="ends-soon", status="running", duration=120)
    post(s, ingest, up)
    o = open_page(s.url, admin)
    o.goto("/runs/ends0001")
    eyebrow = o.page.locator("header .eyebrow")
    assert eyebrow.text_content() == "run ends0001 · live"
    o.page.wait_for_function(EVENTS_OPEN)
    done = {**up, "seq": 2, "final": True, "status": "completed", "ended_at": time.time()}
    post(s, ingest, done)  # type: ignore[arg-type]
    o.page.wait_for_function(
        "document.querySelector('.cards .card .value').textContent === 'completed'",
        timeout=30_000,
    )
    o.page.wait_for_function(
        "!document.querySelector('header .eyebrow').textContent.includes('live')",
        timeout=30_000,
    )
    assert eyebrow.text_content() == "run ends0001"
    assert o.page.locator("header .eyebrow").count() == 1
    _shot(o, tmp_path / "ended-1400.png")
    o.check_clean()


def test_chart_titles_name_no_metric() -> None:
    """Every series the sampler writes gets a human title and a unit."""
    names = [
        "gpu_utilization_ratio", "gpu_power_watts", "gpu_memory_used_bytes",
        "gpu_energy_joules_total", "gpu_sm_clock_hertz", "gpu_pcie_receive_bytes_per_second",
        "gpu_xid_errors_total", "host_cpu_seconds_total", "host_disk_read_bytes_total",
        "host_disk_reads_total", "host_network_transmit_bytes_total", "host_swap_used_bytes",
        "tree_cpu_seconds_total", "tree_read_bytes_total", "tree_resident_memory_bytes",
        "tree_processes", "gpu_temperature_celsius",
    ]  # fmt: skip
    for name in names:
        assert "_" not in charts.title_of(name) and charts.title_of(name)[0].isupper(), name
        assert charts.unit_text(name), name
    assert charts.title_of("host_disk_read_bytes_total") == "Disk read (host)"
    assert charts.title_of("gpu_pcie_receive_bytes_per_second") == "GPU PCIe receive"
    assert charts.unit_text("gpu_pcie_receive_bytes_per_second") == "bytes/s"
    assert charts.unit_text("tree_cpu_seconds_total") == "CPU cores busy"
    assert charts.unit_text("gpu_xid_errors_total") == "errors/s"
    assert charts.unit_text("tree_processes") == "processes"
    spec = charts.run_charts(
        [charts.SeriesData("tree_cpu_seconds_total", {}, 60.0, [[0.0, 1.0, 2.0, 3.0]])]
    )
    assert (spec[0]["title"], spec[0]["unit"], spec[0]["unit_text"]) == (
        "CPU (process tree)",
        "cores",
        "CPU cores busy",
    )
