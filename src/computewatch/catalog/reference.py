"""Reference data for accounting: grid intensities, PUE, GPU instance prices, CPU TDPs, defaults.

Each table is a CSV file under ``computewatch/data/`` whose ``#`` lines document units and how
rows were chosen; every row carries its source and year (docs/methodology.md). Tables are
parsed and validated once, then cached: a malformed row raises CatalogError naming the file, the
line and the column, so a bad edit fails loudly instead of skewing numbers. The returned dicts
are shared between callers: treat them as read-only.
"""

from __future__ import annotations

import csv
import functools
import math
import re
from collections.abc import Iterator, Mapping

import msgspec

from computewatch.catalog import load_accelerators, read_data
from computewatch.errors import ComputewatchError

__all__ = [
    "CLOUD_PROVIDERS",
    "GRID_KINDS",
    "MAX_USD_PER_KWH",
    "PRICE_SECTORS",
    "CatalogError",
    "CloudInstance",
    "CpuTdp",
    "DefaultFigure",
    "ElectricityPrice",
    "GridIntensity",
    "PueRow",
    "cpu_tdp",
    "cpu_tdp_rows",
    "default_pue",
    "defaults",
    "electricity_prices",
    "find_instance",
    "grid_rows",
    "instances",
    "normalize_code",
    "parse_cpu_tdp",
    "parse_defaults",
    "parse_electricity_prices",
    "parse_grid",
    "parse_instances",
    "parse_pue",
    "pue_rows",
    "world_average",
]

GRID_FILE = "data/grid_intensity.csv"
PUE_FILE = "data/pue.csv"
INSTANCES_FILE = "data/cloud_instances.csv"
CPU_TDP_FILE = "data/cpu_tdp.csv"
DEFAULTS_FILE = "data/defaults.csv"
PRICES_FILE = "data/electricity_prices.csv"

CLOUD_PROVIDERS = ("aws", "gcp", "azure")
"""Providers whose regions appear as ``provider:region`` codes."""

GRID_KINDS = ("world", "country", "subnational", "cloud")

WORLD_CODE = "WORLD"

_COUNTRY = re.compile(r"[A-Z]{2}")
_SUBNATIONAL = re.compile(r"[A-Z]{2}-[A-Z0-9]{1,4}")
_CLOUD_REGION = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
_AS_OF = re.compile(r"(\d{4})-(0[1-9]|1[0-2])")
_PERIOD = re.compile(r"(\d{4})(-S[12]|-(0[1-9]|1[0-2]))?")
_MARKS = re.compile(r"\((R|TM)\)", re.IGNORECASE)


class GridIntensity(msgspec.Struct, frozen=True):
    """Average carbon intensity of the electricity at one location.

    For a cloud row, ``grid`` is the code of the grid row it draws from; when the provider
    publishes no figure of its own, ``g_per_kwh``, ``source`` and ``year`` are that grid's.
    """

    code: str  # "FR", "US-CA", "aws:us-east-1", "WORLD"
    name: str
    kind: str  # one of GRID_KINDS
    g_per_kwh: float  # gCO2e per kWh, annual average
    grid: str | None  # cloud rows only
    source: str
    year: int
    zone: str | None = None  # Electricity Maps zone for live data, when one is known

    @property
    def provider(self) -> str | None:
        """The cloud provider of a cloud row ("aws", "gcp", "azure"), else None."""
        return self.code.split(":", 1)[0] if self.kind == "cloud" else None


class PueRow(msgspec.Struct, frozen=True):
    """A facility PUE (total facility energy / IT energy) for a provider, or the default."""

    provider: str
    pue: float
    source: str
    year: int


class CloudInstance(msgspec.Struct, frozen=True):
    """On-demand list price of one GPU instance type."""

    provider: str
    instance: str
    gpus: int
    gpu_model: str  # a key of computewatch.catalog.load_accelerators()
    usd_per_hour: float
    price_region: str
    as_of: str  # YYYY-MM
    source: str
    year: int

    @property
    def key(self) -> str:
        return f"{self.provider}:{self.instance}"

    @property
    def usd_per_gpu_hour(self) -> float:
        """The instance price shared evenly between its GPUs."""
        return self.usd_per_hour / self.gpus


class CpuTdp(msgspec.Struct, frozen=True):
    """TDP of a CPU model, matched against /proc/cpuinfo model names by ``pattern``."""

    pattern: str  # regular expression, case-insensitive
    tdp_watts: float  # per socket
    cores: int  # physical cores per socket
    source: str
    year: int

    @property
    def watts_per_core(self) -> float:
        return self.tdp_watts / self.cores


class DefaultFigure(msgspec.Struct, frozen=True):
    """A documented default used when a measurement or a table row is missing."""

    name: str
    value: float
    unit: str
    source: str
    year: int


class ElectricityPrice(msgspec.Struct, frozen=True):
    """The average price of a kWh at one location of the grid table, as its source gives it."""

    code: str  # a country or sub-national code of grid_intensity.csv
    usd_per_kwh: float
    sector: str  # one of PRICE_SECTORS
    period: str  # "2023", "2024-S2", "2025-03"
    source: str
    year: int


PRICE_SECTORS = ("commercial", "industrial", "non-household")
"""End-use sectors a price row may be for (the source's own classification)."""

MAX_USD_PER_KWH = 5.0
"""A price above this is a unit mistake (cents or MWh), not a price."""


# --- CSV plumbing -------------------------------------------------------------------------


class CatalogError(ComputewatchError, ValueError):
    """A reference table (the package's or a user's price file) that cannot be used: the
    message names the file, the line and the column."""


class _Row:
    """One data row: its cells by column, and a way to fail naming file, line and column."""

    def __init__(self, filename: str, line: int, cells: dict[str, str]) -> None:
        self.filename = filename
        self.line = line
        self.cells = cells

    def fail(self, column: str, why: str) -> CatalogError:
        return CatalogError(f"{self.filename}, line {self.line}, column {column!r}: {why}")

    def text(self, column: str, *, required: bool = True) -> str:
        value = self.cells[column]
        if required and not value:
            raise self.fail(column, "must not be empty")
        return value

    def number(self, column: str, *, minimum: float = 0.0) -> float:
        raw = self.text(column)
        try:
            value = float(raw)
        except ValueError:
            raise self.fail(column, f"{raw!r} is not a number") from None
        if not math.isfinite(value):
            raise self.fail(column, f"{raw!r} is not a finite number")
        if value < minimum:
            raise self.fail(column, f"{raw!r} must be at least {minimum:g}")
        return value

    def integer(self, column: str, *, minimum: int = 1) -> int:
        value = self.number(column, minimum=minimum)
        if value != int(value):
            raise self.fail(column, f"{self.cells[column]!r} must be a whole number")
        return int(value)

    def year(self) -> int:
        raw = self.text("year")
        if not (raw.isascii() and raw.isdigit()) or not 1990 <= int(raw) <= 2100:
            raise self.fail("year", f"{raw!r} is not a year")
        return int(raw)

    def dated(self, column: str, pattern: re.Pattern[str], forms: str) -> tuple[str, int]:
        """A date-like cell (``pattern``'s first group is its year) and the row's ``year``,
        which must be that year."""
        value = self.text(column)
        match = pattern.fullmatch(value)
        if match is None:
            raise self.fail(column, f"{value!r} is not {forms}")
        year = self.year()
        if int(match.group(1)) != year:
            raise self.fail("year", f"{year} is not the year of {column} {value}")
        return value, year

    def source(self) -> str:
        value = self.cells["source"]
        if not value:
            raise self.fail("source", "every row needs its source")
        return value


def _rows(text: str, filename: str, columns: tuple[str, ...]) -> Iterator[_Row]:
    """The data rows of a table, skipping ``#`` comment lines and blank lines.

    Line numbers are those of the file, comments included. A quoted field may not span lines.
    """
    header: tuple[str, ...] | None = None
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            fields = next(csv.reader([line]))
        except csv.Error as e:  # a NUL byte, a field over csv.field_size_limit()
            raise CatalogError(f"{filename}, line {line_no}: not a CSV line: {e}") from None
        if header is None:
            header = tuple(f.strip() for f in fields)
            if header != columns:
                raise CatalogError(
                    f"{filename}, line {line_no}: header must be {','.join(columns)}"
                    f" (got {','.join(header)})"
                )
            continue
        if len(fields) != len(columns):
            raise CatalogError(
                f"{filename}, line {line_no}, column '*': expected {len(columns)} fields,"
                f" found {len(fields)}"
            )
        yield _Row(filename, line_no, {c: f.strip() for c, f in zip(columns, fields, strict=True)})
    if header is None:
        raise CatalogError(f"{filename}: no header line")


def _read(filename: str) -> str:
    return read_data(filename)


def normalize_code(code: str) -> str:
    """The table key for a location code as a user may type it.

    Country and sub-national codes are upper-cased ("fr" -> "FR", "us-ca" -> "US-CA"); cloud
    codes are lower-cased ("AWS:US-East-1" -> "aws:us-east-1"), and an Azure display name loses
    its spaces ("azure:West Europe" -> "azure:westeurope").
    """
    code = code.strip()
    if ":" in code:
        provider, region = (part.strip().lower() for part in code.split(":", 1))
        if provider == "azure":
            region = region.replace(" ", "")
        return f"{provider}:{region}"
    return code.upper()


# --- grid intensity -----------------------------------------------------------------------

_GRID_COLUMNS = ("code", "name", "kind", "g_per_kwh", "grid", "zone", "source", "year")


def _check_grid_code(row: _Row, code: str, kind: str) -> None:
    if kind == "world":
        ok = code == WORLD_CODE
    elif kind == "country":
        ok = _COUNTRY.fullmatch(code) is not None
    elif kind == "subnational":
        ok = _SUBNATIONAL.fullmatch(code) is not None
    else:
        provider, _, region = code.partition(":")
        ok = provider in CLOUD_PROVIDERS and _CLOUD_REGION.fullmatch(region) is not None
    if not ok or normalize_code(code) != code:
        raise row.fail("code", f"{code!r} is not a valid {kind} code")


def parse_grid(text: str, filename: str = GRID_FILE) -> dict[str, GridIntensity]:
    """Parse the grid table; cloud rows without a figure take their grid row's figure."""
    out: dict[str, GridIntensity] = {}
    pending: list[tuple[_Row, GridIntensity]] = []
    seen: set[str] = set()  # every code so far, cloud rows' included (a list was quadratic)
    for row in _rows(text, filename, _GRID_COLUMNS):
        code = row.text("code")
        kind = row.text("kind")
        if kind not in GRID_KINDS:
            raise row.fail("kind", f"{kind!r} is not one of {', '.join(GRID_KINDS)}")
        _check_grid_code(row, code, kind)
        if code in seen:
            raise row.fail("code", f"duplicate code {code!r}")
        seen.add(code)
        grid = row.text("grid", required=False) or None
        if kind == "cloud" and grid is None:
            raise row.fail("grid", "a cloud row must name the grid it draws from")
        if kind != "cloud" and grid is not None:
            raise row.fail("grid", "only cloud rows map to a grid")
        own_figure = bool(row.cells["g_per_kwh"])
        if kind != "cloud" and not own_figure:
            raise row.fail("g_per_kwh", "must not be empty")
        item = GridIntensity(
            code=code,
            name=row.text("name"),
            kind=kind,
            g_per_kwh=row.number("g_per_kwh") if own_figure else 0.0,
            grid=grid,
            source=row.source(),
            year=row.year(),
            zone=row.text("zone", required=False) or None,
        )
        if kind == "cloud":
            pending.append((row, item))
        else:
            out[code] = item
    if WORLD_CODE not in out:
        raise CatalogError(f"{filename}: no {WORLD_CODE} row (the world average)")
    for row, cloud in pending:
        base = out.get(cloud.grid or "")
        if base is None or base.kind == "world":
            raise row.fail("grid", f"{cloud.grid!r} is not a country or sub-national row")
        if row.cells["g_per_kwh"]:
            resolved = msgspec.structs.replace(cloud, zone=cloud.zone or base.zone)
        else:
            resolved = msgspec.structs.replace(
                cloud,
                g_per_kwh=base.g_per_kwh,
                source=f"{base.source}, for grid {base.code}; location: {cloud.source}",
                year=base.year,
                zone=cloud.zone or base.zone,
            )
        out[resolved.code] = resolved
    return out


@functools.cache
def grid_rows() -> dict[str, GridIntensity]:
    """Every location of the grid table, by normalized code (see :func:`normalize_code`)."""
    return parse_grid(_read(GRID_FILE))


def world_average() -> GridIntensity:
    """The world-average row, used (and reported as such) when the location is unknown."""
    return grid_rows()[WORLD_CODE]


# --- electricity prices --------------------------------------------------------------------

_PRICE_COLUMNS = ("code", "usd_per_kwh", "sector", "period", "source", "year")


def parse_electricity_prices(
    text: str,
    filename: str = PRICES_FILE,
    grid: Mapping[str, GridIntensity] | None = None,
) -> dict[str, ElectricityPrice]:
    """Parse the price table: one row per country or sub-national code of ``grid`` (default:
    the package's grid table), a positive price below MAX_USD_PER_KWH, a known sector, and a
    period whose year is the row's year."""
    table = grid_rows() if grid is None else grid
    out: dict[str, ElectricityPrice] = {}
    for row in _rows(text, filename, _PRICE_COLUMNS):
        code = row.text("code")
        known = table.get(code)
        if known is None or normalize_code(code) != code:
            raise row.fail("code", f"{code!r} is not a code of {GRID_FILE}")
        if known.kind not in ("country", "subnational"):
            raise row.fail(
                "code", f"{code!r} is a {known.kind} row: price its grid (country or state)"
            )
        if code in out:
            raise row.fail("code", f"duplicate code {code!r}")
        price = row.number("usd_per_kwh")
        if not 0 < price < MAX_USD_PER_KWH:
            raise row.fail(
                "usd_per_kwh", f"{price:g} is not a price in dollars per kWh (0 < p < 5)"
            )
        sector = row.text("sector")
        if sector not in PRICE_SECTORS:
            raise row.fail("sector", f"{sector!r} is not one of {', '.join(PRICE_SECTORS)}")
        period, year = row.dated("period", _PERIOD, "YYYY, YYYY-S1, YYYY-S2 or YYYY-MM")
        out[code] = ElectricityPrice(code, price, sector, period, row.source(), year)
    return out


@functools.cache
def electricity_prices() -> dict[str, ElectricityPrice]:
    """Electricity prices by grid code ("US-VA"); a cloud region takes its grid row's."""
    return parse_electricity_prices(_read(PRICES_FILE))


# --- PUE ----------------------------------------------------------------------------------

_PUE_COLUMNS = ("provider", "pue", "source", "year")


def parse_pue(text: str, filename: str = PUE_FILE) -> dict[str, PueRow]:
    out: dict[str, PueRow] = {}
    for row in _rows(text, filename, _PUE_COLUMNS):
        provider = row.text("provider")
        if provider != provider.lower() or provider == "default":
            raise row.fail(
                "provider",
                f"{provider!r}: use a lower-case provider name"
                " (the default lives in defaults.csv as pue_default)",
            )
        if provider in out:
            raise row.fail("provider", f"duplicate provider {provider!r}")
        out[provider] = PueRow(provider, row.number("pue", minimum=1.0), row.source(), row.year())
    return out


def default_pue() -> PueRow:
    """The PUE assumed for an unknown or on-premises facility (defaults.csv, pue_default)."""
    figure = defaults()["pue_default"]
    if figure.value < 1.0:
        raise CatalogError(f"{DEFAULTS_FILE}: pue_default must be at least 1")
    return PueRow("default", figure.value, figure.source, figure.year)


@functools.cache
def pue_rows() -> dict[str, PueRow]:
    """PUE by provider ("aws", "gcp", "azure", ...) plus "default"."""
    rows = parse_pue(_read(PUE_FILE))
    rows["default"] = default_pue()
    return rows


# --- instance prices ----------------------------------------------------------------------

_INSTANCE_COLUMNS = (
    "provider",
    "instance",
    "gpus",
    "gpu_model",
    "usd_per_hour",
    "price_region",
    "as_of",
    "source",
    "year",
)


def parse_instances(text: str, filename: str = INSTANCES_FILE) -> dict[str, CloudInstance]:
    """Parse the price table; every GPU model must exist in the accelerator catalog."""
    catalog = load_accelerators()
    out: dict[str, CloudInstance] = {}
    for row in _rows(text, filename, _INSTANCE_COLUMNS):
        provider = row.text("provider")
        if provider not in CLOUD_PROVIDERS:
            raise row.fail("provider", f"{provider!r} is not one of {', '.join(CLOUD_PROVIDERS)}")
        gpu_model = row.text("gpu_model")
        if gpu_model not in catalog:
            raise row.fail("gpu_model", f"{gpu_model!r} is not in the accelerator catalog")
        as_of, year = row.dated("as_of", _AS_OF, "YYYY-MM")
        price = row.number("usd_per_hour")
        if price <= 0:
            raise row.fail("usd_per_hour", "a price must be positive")
        item = CloudInstance(
            provider=provider,
            instance=row.text("instance"),
            gpus=row.integer("gpus"),
            gpu_model=gpu_model,
            usd_per_hour=price,
            price_region=row.text("price_region"),
            as_of=as_of,
            source=row.source(),
            year=year,
        )
        if item.key in out:
            raise row.fail("instance", f"duplicate instance {item.key!r}")
        out[item.key] = item
    return out


@functools.cache
def instances() -> dict[str, CloudInstance]:
    """GPU instance prices by "provider:instance" ("aws:p5.48xlarge")."""
    return parse_instances(_read(INSTANCES_FILE))


@functools.cache
def _instances_folded() -> dict[str, CloudInstance]:
    return {key.casefold(): item for key, item in instances().items()}


def find_instance(
    provider: str, instance: str, extra: Mapping[str, CloudInstance] | None = None
) -> CloudInstance | None:
    """The price row of an instance type, ignoring case; Azure's "Standard_" prefix is optional.
    Rows of ``extra`` (the user's own price file) win over the package's."""
    table = _instances_folded()
    if extra:
        table = {**table, **{k.casefold(): v for k, v in extra.items()}}
    provider = provider.strip().casefold()
    instance = instance.strip().casefold()
    found = table.get(f"{provider}:{instance}")
    if found is None and provider == "azure" and not instance.startswith("standard_"):
        found = table.get(f"azure:standard_{instance}")
    return found


# --- CPU TDP ------------------------------------------------------------------------------

_CPU_COLUMNS = ("pattern", "tdp_watts", "cores", "source", "year")


def parse_cpu_tdp(text: str, filename: str = CPU_TDP_FILE) -> tuple[CpuTdp, ...]:
    out: list[CpuTdp] = []
    for row in _rows(text, filename, _CPU_COLUMNS):
        pattern = row.text("pattern")
        try:
            re.compile(pattern, re.IGNORECASE)
        except (re.error, OverflowError, RecursionError) as exc:  # a{99999999999}: OverflowError
            raise row.fail(
                "pattern", f"{pattern!r} is not a valid regular expression: {exc}"
            ) from None
        if any(p.pattern == pattern for p in out):
            raise row.fail("pattern", f"duplicate pattern {pattern!r}")
        tdp = row.number("tdp_watts")
        if tdp <= 0:
            raise row.fail("tdp_watts", "a TDP must be positive")
        out.append(CpuTdp(pattern, tdp, row.integer("cores"), row.source(), row.year()))
    return tuple(out)


@functools.cache
def cpu_tdp_rows() -> tuple[CpuTdp, ...]:
    """The CPU table, in file order (first match wins)."""
    return parse_cpu_tdp(_read(CPU_TDP_FILE))


@functools.cache
def _compiled_cpu_patterns() -> tuple[tuple[re.Pattern[str], CpuTdp], ...]:
    return tuple((re.compile(r.pattern, re.IGNORECASE), r) for r in cpu_tdp_rows())


def cpu_tdp(cpu_model: str) -> CpuTdp | None:
    """The TDP row for a /proc/cpuinfo model name, or None when the CPU is not in the table."""
    name = " ".join(_MARKS.sub("", cpu_model).split())
    for pattern, row in _compiled_cpu_patterns():
        if pattern.search(name):
            return row
    return None


# --- defaults -----------------------------------------------------------------------------

_DEFAULT_COLUMNS = ("name", "value", "unit", "source", "year")
_DEFAULT_NAMES = (
    "world_intensity_relative_uncertainty",
    "pue_default",
    "memory_watts_per_gib",
    "unknown_cpu_watts_per_core",
    "unknown_cpu_relative_uncertainty",
    "embodied_kgco2e_per_gpu",
    "embodied_kgco2e_per_server",
)
"""Figures the accounting relies on; the file may hold more."""


def parse_defaults(text: str, filename: str = DEFAULTS_FILE) -> dict[str, DefaultFigure]:
    out: dict[str, DefaultFigure] = {}
    for row in _rows(text, filename, _DEFAULT_COLUMNS):
        name = row.text("name")
        if name in out:
            raise row.fail("name", f"duplicate name {name!r}")
        out[name] = DefaultFigure(
            name, row.number("value"), row.text("unit"), row.source(), row.year()
        )
    missing = [n for n in _DEFAULT_NAMES if n not in out]
    if missing:
        raise CatalogError(f"{filename}: missing default figures: {', '.join(missing)}")
    return out


@functools.cache
def defaults() -> dict[str, DefaultFigure]:
    """Documented default figures by name (value, unit, source, year)."""
    return parse_defaults(_read(DEFAULTS_FILE))
