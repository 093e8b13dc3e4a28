"""The report in a real headless Chromium (Debian's ``chromium``, driven by Playwright) with
the network blocked: it renders, every chart is drawn, hover shows values, a drag zooms, and
the console stays clean.

Needs ``apt-get install chromium`` and ``pip install playwright`` (never ``playwright install``:
the browser is Debian's, at /usr/bin/chromium).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
if not Path(CHROMIUM).exists():  # skip before importing Playwright, which may be missing too
    pytest.skip(
        f"no Chromium at {CHROMIUM} (apt-get install chromium); CI installs it",
        allow_module_level=True,
    )

from playwright.sync_api import (  # noqa: E402
    ConsoleMessage,
    Page,
    Request,
    Route,
    sync_playwright,
)

from computewatch.readings import Kind, Labels, labels  # noqa: E402
from computewatch.store import COMPLETED, Store  # noqa: E402
from computewatch.views import html as html_package  # noqa: E402
from computewatch.views.html import write_report  # noqa: E402
from computewatch.views.html.run import cards_section  # noqa: E402

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
T0 = 1_700_000_000.0
MONO0 = 5000.0
N = 5000  # ticks: more than the 2,000 buckets, so series are drawn as bands
GPUS = ("GPU-11111111-2222-3333-4444-555555555555", "GPU-66666666-7777-8888-9999-000000000000")


def write_run(path: Path) -> Path:
    """A finished 5,000-second run with CPU, memory, disk, network, two GPUs and steps, its
    report written to ``path``; its name tries to break out of the page."""
    with Store.open(path.parent / "cw.db") as store:
        rk = store.create_run(
            run_id="0b0b0b0b0b0b",
            name="</script><b>x",
            tags={"team": "ml"},
            command=["python", "train.py"],
            cwd="/work",
            mode="run",
            started_at=T0,
            interval_seconds=1.0,
            host={
                "allowed_cores": 2.0,
                "logical_cpus": 8,
                "gpus": [
                    {"uuid": u, "index": i, "name": "NVIDIA H100", "simulated": True}
                    for i, u in enumerate(GPUS)
                ],
                "gpus_used": list(GPUS),
            },
        )
        wave = [0.5 + 0.4 * ((i // 300) % 2) for i in range(N)]
        defs: list[tuple[str, Labels, Kind, list[float]]] = [
            ("tree_cpu_seconds_total", (), Kind.COUNTER, list(accumulate(wave))),
            ("tree_resident_memory_bytes", (), Kind.GAUGE,
             [1e8 + 1e5 * (i % 97) for i in range(N)]),
            ("host_memory_used_bytes", (), Kind.GAUGE, [4e9 + 1e6 * (i % 13) for i in range(N)]),
            ("host_disk_read_bytes_total", labels(device="sda"), Kind.COUNTER,
             [1000.0 * i for i in range(N)]),
            ("host_network_receive_bytes_total", labels(interface="eth0"), Kind.COUNTER,
             [500.0 * i + (1e6 if i > 2500 else 0) for i in range(N)]),
        ]  # fmt: skip
        for g, uuid in enumerate(GPUS):
            lb = labels(gpu=uuid)
            defs += [
                ("gpu_utilization_ratio", lb, Kind.GAUGE, [w - 0.1 * g for w in wave]),
                ("gpu_memory_used_bytes", lb, Kind.GAUGE, [(10 + g) * 2.0**30] * N),
                ("gpu_power_watts", lb, Kind.GAUGE, [300 * w + 20 * g for w in wave]),
            ]
        store.write_batch(
            rk,
            series=[(i, nm, lb, k) for i, (nm, lb, k, _) in enumerate(defs)],
            ticks=[(i, MONO0 + i, T0 + i) for i in range(N)],
            samples=[(rk, seq, i, v) for i, d in enumerate(defs) for seq, v in enumerate(d[3])],
            steps=[(7, MONO0 + 0.5 * i, T0 + 0.5 * i, 8.0, 4096.0) for i in range(1, 2 * N)],
            writers=[(7, MONO0, {"pid": 7})],
            data_until=T0 + N - 1,
        )
        store.update_run(rk, status=COMPLETED, exit_code=0, ended_at=T0 + N)
        return write_report(store, store.run_by_key(rk), path)


@dataclass
class Opened:
    page: Page
    data: dict[str, Any]
    blocked: list[str] = field(default_factory=list)  # requests the route aborted
    requests: list[str] = field(default_factory=list)  # every request the page made
    errors: list[str] = field(default_factory=list)  # console errors and page errors


@pytest.fixture(scope="module")
def opened(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Opened]:
    report = write_run(tmp_path_factory.mktemp("report") / "report.html")
    with sync_playwright() as pw, tempfile.TemporaryDirectory(prefix="cw-chromium-") as profile:
        context = pw.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 900},
        )
        try:
            page = context.new_page()
            state = Opened(page, {})

            def route(r: Route) -> None:
                if r.request.url.startswith("file:"):
                    r.continue_()
                else:
                    state.blocked.append(r.request.url)
                    r.abort()

            def console(m: ConsoleMessage) -> None:
                if m.type in ("error", "warning"):
                    state.errors.append(f"console {m.type}: {m.text}")

            def request(r: Request) -> None:
                state.requests.append(r.url)

            context.route("**/*", route)
            page.on("console", console)
            page.on("pageerror", lambda e: state.errors.append(f"page error: {e}"))
            page.on("request", request)
            page.goto(report.as_uri(), wait_until="load")
            page.wait_for_function(
                "window.computewatchCharts && window.computewatchCharts.length > 0"
            )
            state.data = page.evaluate("JSON.parse(document.getElementById('cw-data').textContent)")
            yield state
        finally:
            context.close()


def test_page_renders_offline(opened: Opened) -> None:
    page = opened.page
    assert page.title() == "computewatch · run 0b0b0b0b0b0b · </script><b>x"
    assert page.locator("h1").inner_text() == "</script><b>x"
    assert page.locator("b").count() == 0
    assert page.locator("#section-gpus table tbody tr").count() == 2
    assert opened.blocked == []
    assert [u for u in opened.requests if not u.startswith("file:")] == []


def test_every_chart_is_drawn(opened: Opened) -> None:
    page = opened.page
    charts = opened.data["charts"]
    assert [c["id"] for c in charts] == [
        "cpu", "memory", "gpu_util", "gpu_memory", "gpu_power", "throughput_steps",
        "throughput_samples", "throughput_tokens", "step_time", "disk", "network",
    ]  # fmt: skip
    assert page.evaluate("window.computewatchCharts.length") == len(charts)
    for c in charts:
        canvas = page.locator(f"#chart-{c['id']} canvas")
        assert canvas.count() == 1, c["id"]
        box = canvas.bounding_box()
        assert box is not None and box["width"] > 100 and box["height"] > 100, c["id"]
        inked = page.evaluate(
            """(id) => {
                const cv = document.querySelector('#chart-' + id + ' canvas');
                const px = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;
                let n = 0;
                for (let i = 3; i < px.length; i += 4) { if (px[i] > 0) { n++; } }
                return n;
            }""",
            c["id"],
        )
        assert inked > 1000, c["id"]  # axes, grid and lines were drawn


def test_embedded_series_are_not_empty(opened: Opened) -> None:
    data = opened.data
    for c in data["charts"]:
        grid = data["grids"][c["grid"]]
        assert len(grid) > 1
        for s in c["series"]:
            assert len(s["mean"]) == len(grid)
            assert sum(v is not None for v in s["mean"]) > len(grid) // 2, (c["id"], s["label"])
            if c["per_bucket"] > 1:  # downsampled: drawn as bands
                assert len(s["lo"]) == len(s["hi"]) == len(grid)
    assert {c["id"] for c in data["charts"] if c["per_bucket"] > 1} >= {"cpu", "step_time"}
    assert data["run"]["name"] == "</script><b>x"


def test_hover_shows_a_legend_value(opened: Opened) -> None:
    page = opened.page
    fig = page.locator("#chart-gpu_util")
    fig.scroll_into_view_if_needed()
    over = fig.locator(".u-over")
    box = over.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
    values = fig.locator(".u-legend .u-series:not(.cw-band) .u-value")
    page.wait_for_function(
        "() => document.querySelector('#chart-gpu_util .u-legend .u-series:nth-child(2) "
        ".u-value').textContent.includes('%')"
    )
    gpu0 = values.nth(1).inner_text()
    assert gpu0.endswith("%") or "%" in gpu0, gpu0
    assert values.nth(0).inner_text() not in ("", "–", "--")  # the time
    # The cursor is synced: the CPU chart's legend follows the same time.
    cpu = page.locator("#chart-cpu .u-legend .u-series:not(.cw-band) .u-value").nth(1)
    assert "%" in cpu.inner_text()


def test_drag_zooms_every_chart(opened: Opened) -> None:
    page = opened.page

    def x_scales() -> list[list[float]]:
        result: list[list[float]] = page.evaluate(
            "window.computewatchCharts.map(c => [c.plot.scales.x.min, c.plot.scales.x.max])"
        )
        return result

    before = x_scales()
    fig = page.locator("#chart-cpu")
    fig.scroll_into_view_if_needed()
    box = fig.locator(".u-over").bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.3, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.45, y, steps=8)
    page.mouse.move(box["x"] + box["width"] * 0.6, y, steps=8)
    page.mouse.up()
    after = x_scales()
    lo0, hi0 = before[0]
    lo1, hi1 = after[0]
    assert lo1 > lo0 and hi1 < hi0
    assert (hi1 - lo1) == pytest.approx(0.3 * (hi0 - lo0), rel=0.1)
    assert all(s == pytest.approx(after[0]) for s in after)  # every chart followed
    page.mouse.dblclick(box["x"] + box["width"] / 2, y)  # zoom back out
    page.wait_for_function(
        f"window.computewatchCharts[0].plot.scales.x.max - "
        f"window.computewatchCharts[0].plot.scales.x.min > {0.9 * (hi0 - lo0)}"
    )


def test_no_console_or_page_errors(opened: Opened) -> None:
    assert opened.errors == []
    assert opened.blocked == []


CARDS = [
    ("status", "completed", "2023-11-14T22:13:20Z"),
    ("duration", "1:23:20", ""),
    ("CPU mean", "45.0%", "max 90.0% of 2 cores"),
    ("peak RSS", "1.5 GiB", "host peak 3.2 GiB of 15.5 GiB"),
    ("GPU util (simulated)", "62.5%", "mean over 2 GPUs"),
    ("energy", "0.0008282 kWh", "facility, measured"),
    ("carbon", "0.00669 g CO2e", "total, modeled"),
    ("cost", "$0.0001234", "total, estimated"),
    ("flops", "5.5e+14 FLOP", "modeled"),
]


@pytest.mark.parametrize("width", [1280, 1920])
def test_cards_keep_their_unit(opened: Opened, width: int, tmp_path: Path) -> None:
    """A card's value is never cut: it fits its card (a long unit goes below the number) and
    its title holds it in full; the unit stays inside the card."""
    css = (Path(html_package.__file__).parent / "assets" / "report.css").read_text()
    page = opened.page.context.new_page()
    try:
        page.set_viewport_size({"width": width, "height": 900})
        page.set_content(f"<style>{css}</style><main>{cards_section(CARDS)}</main>")
        page.screenshot(path=str(tmp_path / f"report-cards-{width}.png"), full_page=True)
        assert page.evaluate(
            "document.documentElement.scrollWidth <= document.documentElement.clientWidth"
        )
        for card in page.locator(".cards .card").all():
            label = card.locator(".label").text_content() or ""
            value = card.locator(".value")
            text = " ".join((value.text_content() or "").split())
            assert not value.evaluate("v => v.scrollWidth > v.clientWidth"), (label, text)
            assert value.get_attribute("title") == text, (label, text)
            unit = value.locator(".unit")
            if unit.count():
                box, outer = unit.bounding_box(), card.bounding_box()
                assert box is not None and outer is not None
                assert box["x"] + box["width"] <= outer["x"] + outer["width"], (label, text)
        carbon = page.locator(".card", has_text="carbon").locator(".value .unit")
        assert carbon.text_content() == "g CO2e"
    finally:
        page.close()
