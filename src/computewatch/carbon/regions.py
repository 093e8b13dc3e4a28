"""The same job in several regions: emissions and cost from each region's grid intensity, its
provider's PUE and an electricity price, to choose the data centre.

Intensity is the yearly figure of ``data/grid_intensity.csv`` (or, when the caller passes one,
the mean of a provider's forecast over the job); PUE the provider's published fleet figure of
``data/pue.csv`` (the default with its range for a non-cloud code); the price per kWh from the
user (per region, or one for all) when given, else the dated figure of
``data/electricity_prices.csv`` for the region's grid (a cloud region takes its grid row's),
else none: the cost then says "no price", never a guess.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping, Sequence

from computewatch.carbon.records import UnknownProviderError
from computewatch.catalog.reference import (
    PRICES_FILE,
    ElectricityPrice,
    GridIntensity,
    default_pue,
    defaults,
    electricity_prices,
    grid_rows,
    normalize_code,
    pue_rows,
)

__all__ = ["RegionFigure", "compare_regions", "grid_row", "region_price"]


@dataclasses.dataclass(frozen=True, slots=True)
class RegionFigure:
    """One region's figures for the job (grams and dollars at the facility)."""

    region: str
    name: str
    g_per_kwh: float
    intensity_source: str
    pue: float
    pue_low: float
    pue_high: float
    pue_source: str
    facility_kwh: float
    g: float
    g_low: float
    g_high: float
    usd_per_kwh: float | None
    usd: float | None
    price_source: str
    price_year: int | None = None  # the year of the price's figure; None for the user's own


def grid_row(code: str) -> GridIntensity:
    """The table row for ``code``; UnknownProviderError with close matches otherwise."""
    rows = grid_rows()
    row = rows.get(normalize_code(code))
    if row is not None:
        return row
    folded = {c.casefold(): c for c in rows}
    for r in rows.values():
        folded.setdefault(r.name.casefold(), r.code)
    query = normalize_code(code).casefold()
    near = [c for c in rows if ":" not in query and c.casefold().endswith(":" + query)]
    for m in difflib.get_close_matches(query, list(folded), n=5, cutoff=0.6):
        if folded[m] not in near:
            near.append(folded[m])
    hint = f"close matches: {', '.join(near[:5])}" if near else "no close match"
    raise UnknownProviderError(f"unknown region {code.strip()!r}; {hint}")


def region_price(
    row: GridIntensity,
    *,
    prices: Mapping[str, float] | None = None,
    prices_source: str = "--prices",
    default_price: float | None = None,
    price_source: str = "configuration",
    table: Mapping[str, ElectricityPrice] | None = None,
) -> tuple[float | None, str, int | None]:
    """The price per kWh for a region, what it comes from and the year of its figure: the
    user's per-region price, else the user's one price, else the table's row for the region's
    grid (``table``: default the package's), else none with the reason."""
    if prices and row.code in prices:
        return prices[row.code], prices_source, None
    if default_price is not None:
        return default_price, price_source, None
    grid = row.grid if row.kind == "cloud" and row.grid else row.code
    found = (electricity_prices() if table is None else table).get(grid)
    if found is None:
        return (
            None,
            f"no price: {PRICES_FILE} has no row for {grid} (give --usd-per-kwh or --prices)",
            None,
        )
    where = f"grid {grid}: " if grid != row.code else ""
    return (
        found.usd_per_kwh,
        f"{where}{found.source} ({found.year})",
        found.year,
    )


def compare_regions(
    regions: Sequence[str],
    energy_kwh: float,
    *,
    prices: Mapping[str, float] | None = None,
    prices_source: str = "--prices",
    default_price: float | None = None,
    price_source: str = "configuration",
    table: Mapping[str, ElectricityPrice] | None = None,
    intensities: Mapping[str, tuple[float, str]] | None = None,
    relative_uncertainty: float = 0.15,
) -> list[RegionFigure]:
    """Each region's emissions and cost for ``energy_kwh`` of IT energy, lowest emissions
    first. ``intensities`` overrides a region's (g/kWh, source), e.g. a forecast mean; the
    price is :func:`region_price`'s."""
    out: list[RegionFigure] = []
    pues = pue_rows()
    rel_pue = defaults()["pue_default_relative_uncertainty"].value
    for code in regions:
        row = grid_row(code)
        g_per_kwh, src = row.g_per_kwh, f"{row.source} ({row.year}), yearly average"
        if intensities and row.code in intensities:
            g_per_kwh, src = intensities[row.code]
        prow = pues.get(row.provider) if row.provider else None
        if prow is not None:
            pue = lo = hi = prow.pue
            pue_src = f"{prow.provider} published PUE ({prow.year})"
        else:
            d = default_pue()
            pue, lo, hi = d.pue, max(1.0, d.pue * (1 - rel_pue)), d.pue * (1 + rel_pue)
            pue_src = f"default PUE, facility unknown ({d.year})"
        price, psrc, pyear = region_price(
            row,
            prices=prices,
            prices_source=prices_source,
            default_price=default_price,
            price_source=price_source,
            table=table,
        )
        kwh = energy_kwh * pue
        out.append(
            RegionFigure(
                region=row.code,
                name=row.name,
                g_per_kwh=g_per_kwh,
                intensity_source=src,
                pue=pue,
                pue_low=lo,
                pue_high=hi,
                pue_source=pue_src,
                facility_kwh=kwh,
                g=kwh * g_per_kwh,
                g_low=energy_kwh * lo * g_per_kwh * (1 - relative_uncertainty),
                g_high=energy_kwh * hi * g_per_kwh * (1 + relative_uncertainty),
                usd_per_kwh=price,
                usd=kwh * price if price is not None else None,
                price_source=psrc,
                price_year=pyear,
            )
        )
    out.sort(key=lambda r: (r.g, r.region))
    return out
