"""The accelerator catalog: packaged data, dense figures, lookups by NVML name, validation; and
the electricity price table, which joins the grid table by code."""

from __future__ import annotations

from importlib import resources

import pytest

from computewatch.catalog import (
    CATALOG_FILE,
    PRECISIONS,
    find_by_nvml_name,
    load_accelerators,
    parse_accelerators,
)
from computewatch.catalog.reference import (
    MAX_USD_PER_KWH,
    CatalogError,
    ElectricityPrice,
    electricity_prices,
    grid_rows,
    parse_electricity_prices,
)

MODELS = {
    "H100-SXM", "H100-PCIe", "H100-NVL", "H200-SXM", "A100-40GB", "A100-80GB", "A100-80GB-PCIe",
    "V100-SXM2", "B200", "L4", "L40S", "A10", "T4", "MI250X", "MI300X", "TPU-v4", "TPU-v5e",
    "TPU-v5p",
    "TPU-v6e",
    "TPU-v7x",
}  # fmt: skip

HEADER = (
    "model,vendor,nvml_name,architecture,memory_bytes,tdp_watts,fp64,fp32,tf32,bf16,fp16,fp8,"
    "memory_bandwidth_gbps,source,year\n"
)
GOOD = "X1,NVIDIA,NVIDIA X1,Hopper,1024,300,1,2,3,4,4,8,1000,a datasheet,2024\n"


def test_every_row_parses_with_source_and_year() -> None:
    catalog = load_accelerators()
    assert set(catalog) == MODELS
    for key, acc in catalog.items():
        assert acc.model == key
        assert acc.source and 2015 <= acc.year <= 2030
        assert acc.memory_bytes > 0 and acc.memory_bandwidth_gbps > 0
        assert any(acc.peak_tflops(p) for p in PRECISIONS), key
        assert acc.architecture in {
            "Volta", "Turing", "Ampere", "Ada", "Hopper", "Blackwell", "CDNA2", "CDNA3", "TPU",
        }  # fmt: skip
        if acc.vendor == "NVIDIA":
            assert acc.nvml_name, key
        else:
            assert acc.nvml_name is None


def test_figures_are_dense_not_sparse() -> None:
    c = load_accelerators()
    h100 = c["H100-SXM"]
    assert h100.bf16 == 989.4  # not the 1,979 sparse headline
    assert h100.fp16 == 989.4
    assert h100.tf32 == 494.7
    assert h100.fp8 == 1979
    assert h100.fp32 == 67
    assert h100.tdp_watts == 700
    assert h100.memory_bandwidth_gbps == 3350
    assert h100.memory_bytes == 80 * 2**30
    a100 = c["A100-80GB"]
    assert (a100.bf16, a100.tf32, a100.fp8) == (312, 156, None)
    assert c["V100-SXM2"].bf16 is None  # Volta has no bf16
    assert c["T4"].fp16 == 65
    assert c["MI300X"].bf16 == 1307.4
    assert c["TPU-v5p"].bf16 == 459
    assert c["TPU-v4"].tdp_watts is None  # no published TDP
    # Dense tensor figures: bf16 is twice tf32 wherever both exist on NVIDIA parts.
    for acc in c.values():
        if acc.vendor == "NVIDIA" and acc.tf32 and acc.bf16:
            assert acc.bf16 == pytest.approx(2 * acc.tf32, rel=0.02), acc.model


def test_peak_tflops() -> None:
    h200 = load_accelerators()["H200-SXM"]
    assert h200.peak_tflops("bf16") == 989.4
    assert h200.peak_tflops("fp64") == 34
    with pytest.raises(ValueError, match="unknown precision"):
        h200.peak_tflops("int8")


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA A100 80GB PCIe", "A100-80GB-PCIe"),
        ("NVIDIA L4", "L4"),
        ("Tesla T4", "T4"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA H200", "H200-SXM"),
        ("Tesla V100-SXM2-16GB", "V100-SXM2"),
        ("  nvidia   h100 80gb hbm3 ", "H100-SXM"),
    ],
)
def test_find_by_nvml_name(name: str, model: str) -> None:
    acc = find_by_nvml_name(name)
    assert acc is not None and acc.model == model


def test_find_by_nvml_name_unknown() -> None:
    assert find_by_nvml_name("NVIDIA GeForce RTX 4090") is None
    assert find_by_nvml_name("") is None


def test_loaded_once_from_package_data() -> None:
    assert load_accelerators() is load_accelerators()
    assert resources.files("computewatch").joinpath(CATALOG_FILE).is_file()


def test_parse_good_row() -> None:
    acc = parse_accelerators(HEADER + GOOD, "x.csv")["X1"]
    assert acc.fp8 == 8 and acc.nvml_names == ("NVIDIA X1",)


@pytest.mark.parametrize(
    ("row", "column", "why"),
    [
        ("X1,NVIDIA,,Hopper,1024,300,1,2,3,4,4,eight,1000,src,2024", "fp8", "not a number"),
        ("X1,NVIDIA,,Hopper,1024,300,1,2,3,4,4,8,1000,src,20x4", "year", "not a number"),
        ("X1,NVIDIA,,Hopper,1024,300,1,2,3,4,4,8,1000,src,1800", "year", "not a year"),
        (",NVIDIA,,Hopper,1024,300,1,2,3,4,4,8,1000,src,2024", "model", "must not be empty"),
        ("X1,NVIDIA,,Hopper,10.5,300,1,2,3,4,4,8,1000,src,2024", "memory_bytes", "whole number"),
        ("X1,NVIDIA,,Hopper,1024,-3,1,2,3,4,4,8,1000,src,2024", "tdp_watts", "positive"),
        ("X1,NVIDIA,,Hopper,1024,300,1,2,3,4,4,8,1000,,2024", "source", "its source"),
        ("X1,NVIDIA,,Hopper,1024,300,1,2,3,4,4,8,1000,src", "*", "expected 15 fields"),
        ("X1,NVIDIA,,Hopper,1024,300,1,2,3,4,4,8,1000,src,2024,extra", "*", "expected 15"),
    ],
)
def test_malformed_row_names_file_line_and_column(row: str, column: str, why: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_accelerators(HEADER + GOOD + row + "\n", "acc.csv")
    message = str(info.value)
    assert message.startswith(f"acc.csv, line 3, column {column!r}"), message
    assert why in message


def test_duplicate_model_and_bad_header() -> None:
    with pytest.raises(ValueError, match=r"line 3, column 'model': duplicate model 'X1'"):
        parse_accelerators(HEADER + GOOD + GOOD, "acc.csv")
    with pytest.raises(ValueError, match=r"acc.csv, line 1: header .*missing: \['year'\]"):
        parse_accelerators(HEADER.replace(",year", "") + GOOD, "acc.csv")


# -- electricity prices (data/electricity_prices.csv) ----------------------------------------

PRICE_HEADER = "code,usd_per_kwh,sector,period,source,year\n"


def test_price_table_joins_the_grid_table_with_source_and_year() -> None:
    prices = electricity_prices()
    grid = grid_rows()
    assert prices, "the package's price table is empty"
    assert prices is electricity_prices()  # parsed once
    for code, row in prices.items():
        assert grid[code].kind in ("country", "subnational"), code
        assert row.source and 1990 <= row.year <= 2100
        assert 0 < row.usd_per_kwh < MAX_USD_PER_KWH
    # every cloud region of AWS's US East maps through its grid row to a priced state
    assert grid["aws:us-east-1"].grid in prices
    assert prices["US-VA"].usd_per_kwh == pytest.approx(0.0895)  # EIA EPA 2023, commercial
    assert prices["US-VA"].sector == "commercial" and prices["US-VA"].period == "2023"
    se = prices["SE"]  # Eurostat nrg_pc_205 2024-S2, band IC, 0.0853 EUR at 1.0389 USD/EUR
    assert se.usd_per_kwh == pytest.approx(round(0.0853 * 1.0389, 4))
    assert (se.sector, se.period, se.year) == ("non-household", "2024-S2", 2024)
    assert "0.0853 EUR/kWh" in se.source and "1.0389" in se.source


def test_price_row_parses() -> None:
    row = "FR,0.1234,non-household,2024-S2,Eurostat nrg_pc_205,2024\n"
    got = parse_electricity_prices(PRICE_HEADER + row, "p.csv")["FR"]
    want = ElectricityPrice("FR", 0.1234, "non-household", "2024-S2", "Eurostat nrg_pc_205", 2024)
    assert got == want


@pytest.mark.parametrize(
    ("row", "column", "why"),
    [
        ("XX,0.1,commercial,2023,src,2023", "code", "is not a code of"),
        ("us-va,0.1,commercial,2023,src,2023", "code", "is not a code of"),
        ("aws:us-east-1,0.1,commercial,2023,src,2023", "code", "price its grid"),
        ("WORLD,0.1,commercial,2023,src,2023", "code", "price its grid"),
        ("US-VA,8.95,commercial,2023,src,2023", "usd_per_kwh", "not a price in dollars"),
        ("US-VA,0,commercial,2023,src,2023", "usd_per_kwh", "not a price in dollars"),
        ("US-VA,nan,commercial,2023,src,2023", "usd_per_kwh", "not a finite number"),
        ("US-VA,0.1,residential,2023,src,2023", "sector", "is not one of"),
        ("US-VA,0.1,commercial,2023-S3,src,2023", "period", "is not YYYY"),
        ("US-VA,0.1,commercial,2024-S2,src,2023", "year", "not the year of period"),
        ("US-VA,0.1,commercial,2023,,2023", "source", "its source"),
        ("US-VA,0.1,commercial,2023,src", "*", "expected 6 fields"),
    ],
)
def test_malformed_price_row_names_file_line_and_column(row: str, column: str, why: str) -> None:
    with pytest.raises(CatalogError) as info:
        parse_electricity_prices(PRICE_HEADER + row + "\n", "p.csv")
    message = str(info.value)
    assert message.startswith(f"p.csv, line 2, column {column!r}"), message
    assert why in message


def test_duplicate_price_code() -> None:
    row = "US-VA,0.1,commercial,2023,src,2023\n"
    with pytest.raises(CatalogError, match=r"line 3, column 'code': duplicate code 'US-VA'"):
        parse_electricity_prices(PRICE_HEADER + row + row, "p.csv")
