"""The accelerator catalog: one row per model in ``data/accelerators.csv``.

Peaks are dense TFLOP/s (without the 2:4 sparsity factor of vendor headlines), memory in bytes
(vendors' "GB" of HBM are GiB: NVML reports an "80GB" H100 as 81,559 MiB usable), board power in
watts. Every row carries its source and the year of that source (docs/methodology.md).
"""

from __future__ import annotations

import csv
import functools
import io
import os

import msgspec

__all__ = [
    "CATALOG_FILE",
    "PRECISIONS",
    "Accelerator",
    "find_by_nvml_name",
    "load_accelerators",
    "parse_accelerators",
    "read_data",
]

CATALOG_FILE = "data/accelerators.csv"
"""Path of the catalog inside the ``computewatch`` package."""

PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")
"""The precisions with a dense-peak column, widest first."""

_COLUMNS = (
    "model",
    "vendor",
    "nvml_name",
    "architecture",
    "memory_bytes",
    "tdp_watts",
    *PRECISIONS,
    "memory_bandwidth_gbps",
    "source",
    "year",
)
_REQUIRED = ("model", "vendor", "architecture", "memory_bytes", "memory_bandwidth_gbps")


class Accelerator(msgspec.Struct, frozen=True):
    """One accelerator model. ``None`` where the source gives no figure (no FP8 on Ampere)."""

    model: str
    vendor: str
    nvml_names: tuple[str, ...]  # every name NVML reports for it; () for non-NVIDIA parts
    architecture: str
    memory_bytes: int
    tdp_watts: float | None
    fp64: float | None  # dense peak TFLOP/s, as are the five below
    fp32: float | None
    tf32: float | None
    bf16: float | None
    fp16: float | None
    fp8: float | None
    memory_bandwidth_gbps: float  # GB/s, 10^9 bytes per second
    source: str
    year: int

    @property
    def nvml_name(self) -> str | None:
        """The main name NVML reports for this model, or None for non-NVIDIA parts."""
        return self.nvml_names[0] if self.nvml_names else None

    def peak_tflops(self, precision: str) -> float | None:
        """Dense peak TFLOP/s at ``precision`` (one of :data:`PRECISIONS`), or None if none."""
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}; expected one of {PRECISIONS}")
        value: float | None = getattr(self, precision)
        return value


def _normalize(name: str) -> str:
    return " ".join(name.split()).casefold()


def _optional_float(text: str) -> float | None:
    return float(text) if text else None


def parse_accelerators(text: str, filename: str = CATALOG_FILE) -> dict[str, Accelerator]:
    """Parse catalog CSV text; a malformed row raises ValueError naming file, line and column."""
    reader = csv.DictReader(io.StringIO(text))
    header = tuple(reader.fieldnames or ())
    if header != _COLUMNS:
        missing = [c for c in _COLUMNS if c not in header]
        extra = [c for c in header if c not in _COLUMNS]
        raise ValueError(
            f"{filename}, line 1: header must be {','.join(_COLUMNS)}"
            f" (missing: {missing or 'none'}; unexpected: {extra or 'none'})"
        )
    out: dict[str, Accelerator] = {}
    for row in reader:
        line = reader.line_num

        def fail(column: str, why: str, line: int = line) -> ValueError:
            return ValueError(f"{filename}, line {line}, column {column!r}: {why}")

        if None in row or any(v is None for v in row.values()):
            raise fail("*", f"expected {len(_COLUMNS)} fields")
        cells = {k: v.strip() for k, v in row.items()}
        for column in _REQUIRED:
            if not cells[column]:
                raise fail(column, "must not be empty")
        numbers: dict[str, float | None] = {}
        for column in ("memory_bytes", "tdp_watts", *PRECISIONS, "memory_bandwidth_gbps", "year"):
            try:
                value = _optional_float(cells[column])
            except ValueError:
                raise fail(column, f"{cells[column]!r} is not a number") from None
            if value is not None and not value > 0:
                raise fail(column, f"{cells[column]!r} must be positive")
            numbers[column] = value
        memory = numbers["memory_bytes"]
        if memory is None or memory != int(memory):
            raise fail("memory_bytes", "must be a whole number of bytes")
        year = numbers["year"]
        if year is None or year != int(year) or not 1990 <= year <= 2100:
            raise fail("year", f"{cells['year']!r} is not a year")
        if not cells["source"]:
            raise fail("source", "every row needs its source")
        model = cells["model"]
        if model in out:
            raise fail("model", f"duplicate model {model!r}")
        bandwidth = numbers["memory_bandwidth_gbps"]
        assert bandwidth is not None  # required above
        out[model] = Accelerator(
            model=model,
            vendor=cells["vendor"],
            nvml_names=tuple(n.strip() for n in cells["nvml_name"].split("|") if n.strip()),
            architecture=cells["architecture"],
            memory_bytes=int(memory),
            tdp_watts=numbers["tdp_watts"],
            fp64=numbers["fp64"],
            fp32=numbers["fp32"],
            tf32=numbers["tf32"],
            bf16=numbers["bf16"],
            fp16=numbers["fp16"],
            fp8=numbers["fp8"],
            memory_bandwidth_gbps=bandwidth,
            source=cells["source"],
            year=int(year),
        )
    return out


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_data(filename: str) -> str:
    """A data file of the package (``data/...``), read where an install puts it, beside the
    modules; through importlib.resources where the package is not a directory (a zip). Not
    importlib.resources first: its readers load zipfile and more on every run's start."""
    try:
        with open(os.path.join(_PACKAGE_DIR, filename), encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        from importlib import resources  # a package that is not a directory (zipimport)

        return resources.files("computewatch").joinpath(filename).read_text(encoding="utf-8")


@functools.cache
def load_accelerators() -> dict[str, Accelerator]:
    """Every accelerator of the packaged catalog, by model key (read once, then cached).

    The dict is shared between callers: treat it as read-only.
    """
    return parse_accelerators(read_data(CATALOG_FILE))


@functools.cache
def _by_nvml_name() -> dict[str, Accelerator]:
    return {_normalize(n): a for a in load_accelerators().values() for n in a.nvml_names}


def find_by_nvml_name(name: str) -> Accelerator | None:
    """The catalog row for the name NVML reports (case and spacing ignored), or None."""
    return _by_nvml_name().get(_normalize(name))
