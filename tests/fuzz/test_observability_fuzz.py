"""Fuzzing what the observability code parses: py-spy's raw stacks (into a speedscope file and
an SVG flame graph), ``--profile-steps A:B``, ``--otlp URL``, and the EMF writer on any samples:
a valid result or the package's own error, never a traceback."""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from computewatch.cli.profile import step_range
from computewatch.errors import UsageError
from computewatch.exporters.emf import MAX_DIMENSIONS, MAX_METRICS, emf_documents
from computewatch.exporters.otlp import metrics_url
from computewatch.metrics.model import MetricSample
from computewatch.profiling.stacks import parse_raw, write_flamegraph_svg, write_speedscope

BASE = settings.get_profile("computewatch-fuzz")  # tests/fuzz/conftest.py


def fuzz(n: int) -> settings:
    return settings(BASE, max_examples=n * BASE.max_examples)


_frame = st.one_of(
    st.text(max_size=30),
    st.builds(
        lambda f, p, n: f"{f} ({p}:{n})",
        st.text(max_size=10),
        st.text(max_size=10),
        st.integers(0, 10**6),
    ),
    st.sampled_from(['process 12:"python x.py"', "<module> (a.py:1)", "f (<&>\"'.py:2)"]),
)
_line = st.one_of(
    st.builds(
        lambda fs, n: ";".join(fs) + f" {n}",
        st.lists(_frame, min_size=1, max_size=8),
        st.integers(0, 10**6),
    ),
    st.text(max_size=40),
)


@fuzz(60)
@given(st.lists(_line, max_size=20))
def test_raw_stacks_give_valid_speedscope_and_svg(lines: list[str]) -> None:
    stacks = parse_raw("\n".join(lines))
    assert all(isinstance(k, tuple) and v >= 0 for k, v in stacks.items())
    with tempfile.TemporaryDirectory() as d:
        ss, svg = Path(d) / "p.json", Path(d) / "p.svg"
        write_speedscope(stacks, ss, name="fuzz", rate=100)
        doc = json.loads(ss.read_text())
        (prof,) = doc["profiles"]
        assert len(prof["samples"]) == len(prof["weights"])
        n = len(doc["shared"]["frames"])
        assert all(0 <= i < n for s in prof["samples"] for i in s)
        write_flamegraph_svg(stacks, svg, title="fuzz <&>")
        ET.fromstring(svg.read_text())  # well-formed XML whatever the frame names


@fuzz(60)
@given(st.one_of(st.text(max_size=12), st.builds(lambda a, b: f"{a}:{b}", st.integers(-5, 10**9),
                                                  st.integers(-5, 10**9))))  # fmt: skip
def test_step_range(text: str) -> None:
    try:
        a, b = step_range(text)
    except argparse.ArgumentTypeError:
        return
    assert 1 <= a <= b


@fuzz(60)
@given(
    st.one_of(
        st.text(max_size=40),
        st.builds(lambda h, p: f"http://{h}:{p}/x", st.text(max_size=10), st.text(max_size=6)),
    )
)
def test_otlp_url(text: str) -> None:
    try:
        url = metrics_url(text)
    except UsageError:
        return
    assert url.endswith("/v1/metrics")


_labels = st.lists(st.tuples(st.text(min_size=1, max_size=8), st.text(max_size=12)), max_size=40)
_sample = st.builds(
    lambda n, lbl, v: MetricSample(n, tuple(sorted(dict(lbl).items())), v),
    st.sampled_from(["computewatch_gpu_power_watts", "computewatch_job_cpu_seconds_total",
                     "computewatch_job_info", "x_bytes", "y_total"]),
    _labels,
    st.floats(allow_nan=True, allow_infinity=True),
)  # fmt: skip


@fuzz(60)
@given(st.lists(_sample, max_size=150))
def test_emf_documents_keep_the_format(samples: list[MetricSample]) -> None:
    last: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for _ in range(2):
        for doc in emf_documents(samples, 1.7e9, last=last):
            text = json.dumps(doc)
            assert text.isascii()
            (d,) = doc["_aws"]["CloudWatchMetrics"]  # type: ignore[index]
            assert len(d["Metrics"]) <= MAX_METRICS and len(d["Dimensions"][0]) <= MAX_DIMENSIONS
            for m in d["Metrics"]:
                assert math.isfinite(doc[m["Name"]])  # type: ignore[arg-type]
            for k in d["Dimensions"][0]:
                assert isinstance(doc[k], str) and doc[k].strip()
