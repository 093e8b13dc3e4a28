"""Fuzzing the one reader of a process's environment (computewatch.sources.procfs): any bytes
give the asked variables as text, each the first entry of its name, and nothing else."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from computewatch.escape import decode_text
from computewatch.sources.procfs import environ_values

BASE = settings.get_profile("computewatch-fuzz")  # tests/fuzz/conftest.py

_names = st.sampled_from(["COMPUTEWATCH_RUN_ID", "A", "AB", "SLURM_JOB_ID", "é"])
_value = st.binary(max_size=24).map(lambda b: b.replace(b"\0", b""))
_name_bytes = st.one_of(_names.map(str.encode), st.binary(max_size=6))


@settings(BASE, max_examples=300 * BASE.max_examples)
@given(st.lists(st.tuples(_name_bytes, _value), max_size=8), st.binary(max_size=40))
def test_any_environment_gives_each_asked_name_its_first_entry(
    pairs: list[tuple[bytes, bytes]], junk: bytes
) -> None:
    raw = b"\0".join(k + b"=" + v for k, v in pairs) + b"\0" + junk
    asked = ("COMPUTEWATCH_RUN_ID", "A", "AB", "SLURM_JOB_ID", "é")
    got = environ_values(raw, asked)
    assert set(got) <= set(asked)
    # What getenv(3) would return, worked out entry by entry.
    first: dict[str, str] = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        for name in asked:
            if sep and key == name.encode() and name not in first:
                first[name] = decode_text(value)
    assert got == first
    assert all(isinstance(v, str) for v in got.values())


@settings(BASE, max_examples=300 * BASE.max_examples)
@given(st.binary(max_size=200))
def test_any_bytes_give_text_or_nothing(raw: bytes) -> None:
    got = environ_values(raw, ("A", "COMPUTEWATCH_RUN_ID"))
    assert all(isinstance(v, str) and "\0" not in v for v in got.values())
