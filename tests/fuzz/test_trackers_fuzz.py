"""Fuzzing what the trackers and the reproducibility record read: the spool's config files
(any bytes), hyperparameters of any shape, and ticks of any readings."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from computewatch.readings import Kind, Reading
from computewatch.records import StepRecord
from computewatch.sampling.repro import read_configs
from computewatch.sources.environment import redact_config
from computewatch.trackers.naming import PointMaker

BASE = settings.get_profile("computewatch-fuzz")  # tests/fuzz/conftest.py
FUZZ = settings(BASE, max_examples=100 * BASE.max_examples)

_json = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@FUZZ
@given(files=st.dictionaries(st.text(max_size=12), st.binary(max_size=200), max_size=5))
def test_read_configs_takes_any_files(files: dict[str, bytes]) -> None:
    with tempfile.TemporaryDirectory() as d:
        for name, data in files.items():
            safe = "".join(c for c in name if c.isalnum() or c in "-_.")[:40] or "x"
            (Path(d) / f"config-{safe}.json").write_bytes(data)
        got = read_configs(d)
        assert isinstance(got, dict)
        json.dumps(got)


@FUZZ
@given(values=st.dictionaries(st.text(max_size=12), _json, max_size=6))
def test_redact_config_always_gives_json(values: dict[str, object]) -> None:
    got = redact_config(values)
    text = json.dumps(got, allow_nan=False)  # strict JSON: NaN and inf became text
    assert json.loads(text) == got


_reading = st.builds(
    Reading,
    st.sampled_from(
        [
            "tree_cpu_seconds_total",
            "cgroup_cpu_seconds_total",
            "gpu_power_watts",
            "gpu_utilization_ratio",
            "gpu_memory_used_bytes",
            "gpu_memory_total_bytes",
            "host_memory_used_bytes",
            "host_memory_total_bytes",
            "other",
        ]
    ),
    st.lists(st.tuples(st.sampled_from(["gpu", "pid"]), st.text(max_size=4)), max_size=2).map(
        tuple
    ),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([Kind.GAUGE, Kind.COUNTER]),
)
_step = st.builds(
    StepRecord, st.integers(1, 3), st.floats(0, 1e6), st.none() | st.floats(0, 1e9),
    st.none() | st.floats(0, 1e9), st.none() | st.floats(0, 1e18),
)  # fmt: skip


@FUZZ
@given(
    ticks=st.lists(
        st.tuples(st.floats(0, 1e6), st.lists(_reading, max_size=8), st.lists(_step, max_size=4)),
        max_size=5,
    ),
    cores=st.floats(0.5, 256),
)
def test_point_maker_takes_any_ticks(
    ticks: list[tuple[float, list[Reading], list[StepRecord]]], cores: float
) -> None:
    maker = PointMaker(allowed_cores=cores, peak_flops=1e15)
    for seq, (mono, readings, steps) in enumerate(ticks):
        for p in maker.points(seq, mono, 1.8e9 + seq, readings, steps):
            assert isinstance(p.name, str) and p.step == seq
            assert math.isfinite(p.value)  # a tracker never gets NaN or inf
