"""Fuzzing the other files a user can point computewatch at: GPU traces (``--gpu-backend
replay:FILE``), price tables (``[catalog] cloud_instances``) and model configurations
(``flops --config``), plus the package's own reference tables, read by the same code."""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from computewatch.accounting.formulas import read_hf_config
from computewatch.catalog import load_accelerators
from computewatch.catalog.reference import (
    _CPU_COLUMNS,
    _DEFAULT_COLUMNS,
    _GRID_COLUMNS,
    _INSTANCE_COLUMNS,
    _PUE_COLUMNS,
    parse_cpu_tdp,
    parse_defaults,
    parse_grid,
    parse_instances,
    parse_pue,
)
from computewatch.readings import Kind
from computewatch.sources.replay import FORMAT, VERSION, ReplaySource

BASE = settings.get_profile("computewatch-fuzz")  # tests/fuzz/conftest.py


def fuzz(n: int) -> settings:
    return settings(BASE, max_examples=n * BASE.max_examples)


# -- GPU traces ----------------------------------------------------------------------------

_rarely = st.integers(0, 4).map(lambda n: n == 0)


def _mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``good`` four times in five, else ``bad``: deep enough to pass the first checks."""
    return st.tuples(_rarely, good, bad).map(lambda t: t[2] if t[0] else t[1])


@st.composite
def devices(draw: st.DrawFn, fz: ModuleType) -> dict[str, Any]:
    good: dict[str, Any] = {
        "index": 0,
        "uuid": "GPU-1",
        "name": "NVIDIA H100 80GB HBM3",
        "model": "H100-SXM",
        "memory_total_bytes": 85520809984,
        "power_limit_watts": 700.0,
        "capabilities": {"energy_counter": True},
    }
    if draw(_rarely):
        for k in draw(st.lists(st.sampled_from([*good, "mig_index", "bogus"]), max_size=3)):
            good[k] = draw(fz.values)
    if draw(_rarely):
        for k in draw(st.lists(st.sampled_from(list(good)), max_size=2)):
            good.pop(k, None)
    return good


@st.composite
def traces(draw: st.DrawFn, fz: ModuleType) -> str:
    header: Any = {
        "format": FORMAT,
        "version": VERSION,
        "interval_seconds": draw(_mostly(st.just(1.0), st.one_of(fz.nasty_floats, fz.values))),
        "devices": draw(st.lists(devices(fz), max_size=2)),
    }
    if draw(st.integers(0, 9)) == 0:
        header = draw(fz.values)
    lines = [json.dumps(header)]
    t = 0.0
    for _ in range(draw(st.integers(0, 4))):
        t += draw(_mostly(st.sampled_from([0.0, 0.5, 1.0]), st.just(-1.0)))
        reading: Any = [
            draw(
                _mostly(st.sampled_from(["gpu_power_watts", "gpu_energy_joules_total"]), fz.values)
            ),
            draw(_mostly(st.just({"gpu": "0"}), fz.values)),
            draw(_mostly(st.floats(0, 1e6), st.one_of(fz.nasty_floats, fz.values))),
            draw(_mostly(st.sampled_from([int(k) for k in Kind]), fz.values)),
        ]
        frame: Any = {"t": draw(_mostly(st.just(t), fz.values)), "readings": [reading]}
        if draw(st.integers(0, 9)) == 0:
            frame = draw(fz.values)
        lines.append(json.dumps(frame))
    return "\n".join(lines) + "\n"


def _replay(data: bytes, own: tuple[type[BaseException], ...]) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "trace.jsonl"
        p.write_bytes(data)
        try:
            src = ReplaySource(p, clock=lambda: 12.5)
        except own:
            return
        for r in src.read():
            assert math.isfinite(r.value)
        for dev in src.devices:
            assert dev.simulated and isinstance(dev.uuid, str)
        src.close()


@fuzz(200)
@given(data=st.data())
def test_structured_traces(fz: ModuleType, data: st.DataObject) -> None:
    _replay(data.draw(traces(fz)).encode(), fz.OWN_ERRORS)


@fuzz(100)
@given(
    data=st.one_of(
        st.binary(max_size=200),
        st.integers(100, 5000).map(
            lambda n: (json.dumps({"format": FORMAT, "version": 1}) + "\n" + "[" * n).encode()
        ),
    )
)
def test_any_bytes_as_a_trace(fz: ModuleType, data: bytes) -> None:
    _replay(data, fz.OWN_ERRORS)


# -- reference tables ----------------------------------------------------------------------

_TABLES: list[tuple[tuple[str, ...], Callable[[str, str], object]]] = [
    (_INSTANCE_COLUMNS, parse_instances),
    (_GRID_COLUMNS, parse_grid),
    (_PUE_COLUMNS, parse_pue),
    (_CPU_COLUMNS, parse_cpu_tdp),
    (_DEFAULT_COLUMNS, parse_defaults),
]
_GOOD_CELLS: dict[str, list[str]] = {
    "provider": ["aws", "gcp", "azure", "AWS", "default"],
    "instance": ["p5.48xlarge", ""],
    "gpus": ["8", "0", "1.5", "1e400", "-1"],
    "gpu_model": [next(iter(load_accelerators())), "TPU9"],
    "usd_per_hour": ["98.32", "0", "inf", "nan", "-1", "1e400"],
    "price_region": ["us-east-1"],
    "as_of": ["2024-05", "2024-13", "24-05"],
    "source": ["https://example.com", ""],
    "year": ["2024", "1800", "२०२४", "²"],
    "code": ["FR", "WORLD", "US-CA", "aws:us-east-1", "fr", "aws:"],
    "name": ["France", "pue_default", "memory_watts_per_gib"],
    "kind": ["world", "country", "subnational", "cloud", "moon"],
    "g_per_kwh": ["56", "", "nan", "-3"],
    "grid": ["", "FR", "WORLD"],
    "zone": ["", "FR"],
    "pue": ["1.1", "0.9", "inf"],
    "pattern": ["EPYC 9654", "(", "a{99999999999}", ".*"],
    "tdp_watts": ["360", "0", "inf"],
    "cores": ["96", "0", "2.5"],
    "value": ["0.38", "inf", "x"],
    "unit": ["W/GiB", ""],
}


def _cell(column: str, fz: ModuleType) -> st.SearchStrategy[str]:
    return _mostly(st.sampled_from(_GOOD_CELLS.get(column, ["x"])), fz.nasty_text)


@st.composite
def tables(draw: st.DrawFn, fz: ModuleType) -> tuple[str, Callable[[str, str], object]]:
    columns, parse = draw(st.sampled_from(_TABLES))
    lines = ["# a comment", ",".join(columns)]
    for _ in range(draw(st.integers(0, 4))):
        cells = [draw(_cell(c, fz)) for c in columns]
        if draw(st.integers(0, 9)) == 0:
            cells = cells[:-1]
        lines.append(",".join(json.dumps(c) if draw(st.booleans()) else c for c in cells))
    if draw(st.integers(0, 9)) == 0:
        lines[1] = draw(fz.nasty_text)
    return "\n".join(lines) + "\n", parse


@fuzz(300)
@given(data=st.data())
def test_structured_reference_tables(fz: ModuleType, data: st.DataObject) -> None:
    text, parse = data.draw(tables(fz))
    try:
        parsed = parse(text, "fuzz.csv")
    except fz.OWN_ERRORS:
        return
    assert isinstance(parsed, dict | tuple)
    for row in parsed.values() if isinstance(parsed, dict) else parsed:
        for f in msgspec.structs.fields(row):
            v = getattr(row, f.name)
            assert not isinstance(v, float) or math.isfinite(v), (f.name, v)


@fuzz(100)
@given(text=st.text(max_size=200), which=st.sampled_from(_TABLES))
def test_any_text_as_a_reference_table(
    fz: ModuleType, text: str, which: tuple[tuple[str, ...], Callable[[str, str], object]]
) -> None:
    try:
        which[1](text, "fuzz.csv")
    except fz.OWN_ERRORS:
        pass


# -- model configurations (flops --config) -------------------------------------------------

_HF_KEYS = (
    "n_layer", "num_hidden_layers", "n_embd", "hidden_size", "n_head", "num_attention_heads",
    "n_positions", "max_position_embeddings", "vocab_size", "intermediate_size",
    "num_key_value_heads", "head_dim", "model_type", "hidden_act", "text_config", "num_experts",
)  # fmt: skip


@fuzz(200)
@given(data=st.data())
def test_model_configurations(fz: ModuleType, data: st.DataObject) -> None:
    good = st.sampled_from([1, 2, 8, 12, 64, 768, 4096, "llama", "silu"])
    cfg = data.draw(st.dictionaries(st.sampled_from(_HF_KEYS), _mostly(good, fz.values)))
    text = data.draw(
        st.one_of(
            st.just(json.dumps(cfg)),
            st.text(max_size=100),
            st.integers(100, 5000).map(lambda n: "[" * n),
        )
    )
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "config.json"
        p.write_text(text)
        try:
            shape = read_hf_config(p)
        except fz.OWN_ERRORS:
            return
    assert math.isfinite(shape.params) and shape.params > 0
