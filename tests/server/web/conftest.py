"""Fixtures for the dashboard's tests: a real ``computewatch server`` (tests/server/conftest.py's
ServerProcess) seeded through the API, and Debian's Chromium driven by Playwright with every
request to another host aborted.

``browser`` (module)
    One headless Chromium for the module.
``open_page(server_url, token=None)``
    A fresh browser context and page whose requests to anything but ``server_url`` are aborted
    (and recorded); console errors, page errors and failed requests are recorded too. With
    ``token`` it logs in through ``/login`` first. :meth:`Opened.check_clean` asserts nothing
    went wrong.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Page,
    Request,
    Route,
    sync_playwright,
)
from tests.server.conftest import synthetic_upload

from computewatch.upload.protocol import RunUpload

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
EVENTS_PATH = "/api/v1/events"
EVENTS_OPEN = (
    "window.computewatchEvents !== undefined"
    " && window.computewatchEvents.source.readyState === EventSource.OPEN"
)
"""A page's event stream is subscribed: the server subscribes before it sends the stream's
headers, and the browser's EventSource is OPEN once it has them. (The page's
``computewatchEvents`` exists from the moment the EventSource is made, before its request has
reached the server: a change stored in between is never sent to it.)"""


@dataclass
class Opened:
    page: Page
    base: str
    blocked: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def goto(self, path: str) -> None:
        response = self.page.goto(self.base + path, wait_until="load")
        assert response is not None and response.ok, (path, response and response.status)

    def check_clean(self) -> None:
        """No console error, page error, failed request, request to another host, nor dialog
        (an ``alert()`` a run name smuggled in would be one)."""
        assert self.blocked == [], self.blocked
        assert self.errors == [], self.errors
        assert self.failed == [], self.failed
        assert self.dialogs == [], self.dialogs


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def open_page(browser: Browser) -> Iterator[Callable[..., Opened]]:
    contexts: list[Any] = []

    def open_(base: str, token: str | None = None) -> Opened:
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        contexts.append(context)
        page = context.new_page()
        state = Opened(page, base)

        def route(r: Route) -> None:
            if r.request.url.startswith(base + "/") or r.request.url == base:
                r.continue_()
            else:
                state.blocked.append(r.request.url)
                r.abort()

        def console(m: ConsoleMessage) -> None:
            if m.type in ("error", "warning"):
                state.errors.append(f"console {m.type}: {m.text}")

        def failed(r: Request) -> None:
            # Leaving a page closes its event stream: Chromium reports that request as
            # aborted. Nothing else may fail.
            if r.url.startswith(base + EVENTS_PATH) and r.failure == "net::ERR_ABORTED":
                return
            state.failed.append(f"{r.url}: {r.failure}")

        context.route("**/*", route)
        page.on("console", console)
        page.on("pageerror", lambda e: state.errors.append(f"page error: {e}"))
        page.on("requestfailed", failed)
        page.on(
            "response",
            lambda r: state.errors.append(f"HTTP {r.status}: {r.url}") if r.status >= 500 else None,
        )

        def dialog(d: Any) -> None:
            state.dialogs.append(d.message)
            d.dismiss()

        page.on("dialog", dialog)
        if token is not None:
            login(state, token)
        return state

    yield open_
    for c in contexts:
        c.close()


def login(state: Opened, token: str, next_path: str = "/") -> None:
    state.goto(f"/login?next={next_path}")
    state.page.fill("#token", token)
    with state.page.expect_navigation():
        state.page.click("button[type=submit]")


@pytest.fixture(scope="module")
def profile_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="cw-chromium-") as d:
        yield Path(d)


def seeded_upload(
    run_id: str,
    *,
    name: str,
    user: str = "alice",
    project: str | None = "llm",
    status: str = "completed",
    started_at: float | None = None,
    duration: float = 7200.0,
    gpus: int = 2,
    utilization: float = 0.8,
    kwh: float | None = 4.0,
    cost: float | None = 20.0,
    steps: int | None = 1000,
    samples: float | None = 32_000.0,
    tokens: float | None = 16_384_000.0,
    tags: dict[str, str] | None = None,
) -> RunUpload:
    """A run as ``computewatch push`` uploads it: the summary's sections as ``build_summary``
    writes them (GPUs, energy, carbon, cost with methods, steps, phases, diagnosis) and the
    series downsampled to [t, min, mean, max] buckets under the sampler's names."""
    start = time.time() - duration - 60 if started_at is None else started_at
    running = status == "running"
    up = synthetic_upload(
        run_id,
        started_at=start,
        duration=duration,
        gpus=gpus,
        utilization=utilization,
        kwh=kwh,
        cost=cost,
        name=name,
        user=user,
        project=project,
        status=status,
        final=not running,
        exit_code=None if running else 0,
        tags=tags if tags is not None else {"env": "test"},
    )
    summary = up["summary"]
    assert summary is not None
    summary["status"] = status
    if steps is not None:
        summary["steps"] = {
            "count": steps,
            "processes": 1,
            "samples_total": samples,
            "tokens_total": tokens,
            "steps_per_second": steps / duration,
            "step_time_seconds": {"mean": 0.5, "p50": 0.5, "p90": 0.6, "p99": 0.7, "max": 0.9},
        }
    summary["phases"] = {
        "steps": steps or 0,
        "step_seconds": duration,
        "by_name": {
            "forward": {
                "seconds": duration * 0.4, "self_seconds": duration * 0.4, "share": 0.4,
                "steps": steps or 0, "per_step_seconds": {"mean": 0.2, "p50": 0.2, "p90": 0.25},
                "accel_seconds": None, "within": None,
            },
            "data": {
                "seconds": duration * 0.3, "self_seconds": duration * 0.3, "share": 0.3,
                "steps": steps or 0, "per_step_seconds": {"mean": 0.15, "p50": 0.15, "p90": 0.2},
                "accel_seconds": None, "within": None,
            },
        },
        "unaccounted": {"seconds": duration * 0.3, "share": 0.3},
        "outside_steps_seconds": 0.0,
    }  # fmt: skip
    summary["diagnosis"] = {
        "schema_version": 1,
        "checked": ["data_starvation", "low_gpu_utilization"],
        "failed": {},
        "not_applicable": {},
        "findings": [
            {
                "id": "data_starvation",
                "severity": "medium",
                "title": "Data loading takes 30% of each step",
                "at_stake": {"seconds": duration * 0.3, "usd": None},
                "evidence": {"lines": ["phase data: 30% of step time"], "numbers": {},
                             "time_ranges": []},
                "suggestion": "Raise the data loader's num_workers.",
            }
        ],
    }  # fmt: skip
    end = start + duration
    n = 40
    width = duration / n
    series = []
    for g in range(gpus):
        lb = {"gpu": f"GPU-{run_id[:8]}-{g}"}
        series.append(
            {
                "name": "gpu_utilization_ratio",
                "labels": lb,
                "bucket_seconds": width,
                "kind": "gauge",
                "points": [
                    [start + k * width, utilization - 0.1, utilization, min(utilization + 0.1, 1)]
                    for k in range(n)
                ],
            }
        )
        series.append(
            {
                "name": "gpu_power_watts",
                "labels": lb,
                "bucket_seconds": width,
                "kind": "gauge",
                "points": [[start + k * width, 300.0, 400.0 + g, 500.0] for k in range(n)],
            }
        )
    series.append(
        {
            "name": "tree_cpu_seconds_total",
            "labels": {},
            "bucket_seconds": width,
            "kind": "rate",
            "points": [[start + k * width, 1.0, 2.0, 3.0] for k in range(n)],
        }
    )
    up["series"] = series  # type: ignore[typeddict-item]
    up["ended_at"] = None if running else end
    return up
