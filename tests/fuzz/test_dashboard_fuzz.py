"""Fuzzing what the dashboard reads from uploads (a run's summary document and its series, any
shape the protocol lets through) and from its forms (budget thresholds): a page part or the
package's own error, never a traceback, and chart data that stays JSON inside a script."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from computewatch.errors import ComputewatchError
from computewatch.server.web.charts import SeriesData, compare_charts, run_charts
from computewatch.server.web.figures import counts_of
from computewatch.server.web.pages import parse_thresholds, summary_sections
from computewatch.views.html.page import json_for_script

BASE = settings.get_profile("computewatch-fuzz")  # tests/fuzz/conftest.py


def fuzz(n: int) -> settings:
    return settings(BASE, max_examples=n * BASE.max_examples)


_SECTIONS = ["gpus", "phases", "energy", "cost", "carbon", "flops", "forecast", "diagnosis",
             "notes", "steps", "duration_seconds"]  # fmt: skip


@st.composite
def summaries(draw: st.DrawFn, fz: ModuleType) -> dict[str, Any]:
    keys = draw(st.lists(st.sampled_from(_SECTIONS), max_size=6, unique=True))
    return {k: draw(fz.values) for k in keys}


def test_summary_sections_never_raise(fz: ModuleType) -> None:
    @fuzz(100)
    @given(summaries(fz))
    def check(s: dict[str, Any]) -> None:
        parts = summary_sections(s)
        assert set(parts) == {"gpus", "phases", "accounting", "diagnosis", "notes"}
        for block in parts["accounting"]:
            assert "<script" not in str(block).lower()
        counts_of(s)

    check()


_points = st.lists(
    st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=0, max_size=5),
    max_size=8,
)


def test_charts_from_any_series(fz: ModuleType) -> None:
    @fuzz(100)
    @given(
        st.lists(
            st.tuples(
                st.sampled_from(["gpu_utilization_ratio", "gpu_power_watts", "x_total", "</s>"]),
                st.dictionaries(fz.nasty_text, fz.nasty_text, max_size=2),
                _points,
            ),
            max_size=5,
        )
    )
    def check(raw: list[tuple[str, dict[str, str], list[list[float]]]]) -> None:
        series = [SeriesData(n, lb, 60.0, pts) for n, lb, pts in raw]
        for charts in (run_charts(series), compare_charts([("a", 0.0, series), ("b", 9.0, [])])):
            text = json_for_script(charts)
            assert "</" not in text
            back = json.loads(text)
            for c in back:
                assert all(len(s["mean"]) == len(c["x"]) for s in c["series"])

    check()


def test_thresholds_text(fz: ModuleType) -> None:
    @fuzz(100)
    @given(st.one_of(fz.nasty_text, st.text(alphabet="0123456789.,;% -einfa", max_size=20)))
    def check(text: str) -> None:
        try:
            out = parse_thresholds(text)
        except ComputewatchError:
            return
        assert all(isinstance(x, float) for x in out)

    check()
