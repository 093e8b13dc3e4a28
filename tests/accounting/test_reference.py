"""The packaged reference tables load, validate, and hold the figures their sources give."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from computewatch.catalog import load_accelerators
from computewatch.catalog import reference as ref

DATA_FILES = (
    ref.GRID_FILE,
    ref.PUE_FILE,
    ref.INSTANCES_FILE,
    ref.CPU_TDP_FILE,
    ref.DEFAULTS_FILE,
)


def _text(name: str) -> str:
    return resources.files("computewatch").joinpath(name).read_text(encoding="utf-8")


# --- every table ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", DATA_FILES)
def test_every_file_documents_units_and_choice_in_its_header(name: str) -> None:
    comments = [line for line in _text(name).splitlines() if line.startswith("#")]
    assert comments, f"{name} has no header comment"
    joined = " ".join(comments).lower()
    assert "unit" in joined
    assert "rows" in joined or "row:" in joined


@pytest.mark.parametrize("name", DATA_FILES)
def test_every_file_has_source_and_year_columns(name: str) -> None:
    header = next(
        line for line in _text(name).splitlines() if line.strip() and not line.startswith("#")
    )
    columns = header.split(",")
    assert "source" in columns and "year" in columns


def test_every_row_has_a_source_and_a_plausible_year() -> None:
    rows: list[tuple[str, str, int]] = []
    rows += [(r.code, r.source, r.year) for r in ref.grid_rows().values()]
    rows += [(r.provider, r.source, r.year) for r in ref.pue_rows().values()]
    rows += [(r.key, r.source, r.year) for r in ref.instances().values()]
    rows += [(r.pattern, r.source, r.year) for r in ref.cpu_tdp_rows()]
    rows += [(r.name, r.source, r.year) for r in ref.defaults().values()]
    for key, source, year in rows:
        assert source.strip(), key
        assert 2015 <= year <= 2026, (key, year)


# --- grid intensity -------------------------------------------------------------------------


def test_grid_table_covers_every_kind_and_provider() -> None:
    rows = ref.grid_rows()
    kinds = {kind: [r for r in rows.values() if r.kind == kind] for kind in ref.GRID_KINDS}
    assert len(kinds["world"]) == 1
    assert len(kinds["country"]) >= 60
    assert len(kinds["subnational"]) >= 40
    providers = {r.provider for r in kinds["cloud"]}
    assert providers == set(ref.CLOUD_PROVIDERS)
    for prefix in ("US-", "CA-", "AU-", "IN-"):
        assert any(code.startswith(prefix) for code in rows), prefix


def test_cloud_rows_map_to_existing_country_or_subnational_grids() -> None:
    rows = ref.grid_rows()
    for row in rows.values():
        if row.kind != "cloud":
            assert row.grid is None
            continue
        assert row.grid in rows, row.code
        assert rows[row.grid].kind in ("country", "subnational"), row.code


def test_aws_and_azure_rows_take_their_grids_figure_and_gcp_rows_keep_googles() -> None:
    rows = ref.grid_rows()
    east = rows["aws:us-east-1"]
    assert east.grid == "US-VA"
    assert east.g_per_kwh == rows["US-VA"].g_per_kwh
    assert east.year == rows["US-VA"].year
    assert "US-VA" in east.source and "AWS" in east.source
    assert east.zone == "US-MIDA-PJM"
    assert rows["azure:westeurope"].g_per_kwh == rows["NL"].g_per_kwh
    iowa = rows["gcp:us-central1"]
    assert iowa.grid == "US-IA" and iowa.g_per_kwh == 432 and "Google" in iowa.source
    assert iowa.zone == rows["US-IA"].zone  # live lookups go to the grid's zone


def test_spot_checks_against_the_cited_sources() -> None:
    g = {code: row.g_per_kwh for code, row in ref.grid_rows().items()}
    assert g["FR"] == 44  # Ember 2024: nuclear and hydro
    assert g["PL"] == 615  # Ember 2024: coal
    assert g["SE"] < 50 and g["NO"] < 50
    assert g["IN"] > 650 and g["ZA"] > 650
    assert g["FR"] < g["GB"] < g["DE"] < g["PL"]
    assert g["CA-QC"] < 50 < g["CA-AB"]
    assert g["US-CA"] < g["US-VA"]
    assert g["gcp:europe-west9"] < 30  # Paris, Google's 2025 figure
    assert 400 < ref.world_average().g_per_kwh < 550


def test_world_average_row() -> None:
    world = ref.world_average()
    assert world.kind == "world" and world.code == "WORLD" and world.grid is None
    assert world.provider is None


@pytest.mark.parametrize(
    ("typed", "key"),
    [
        ("fr", "FR"),
        (" us-ca ", "US-CA"),
        ("AWS:US-East-1", "aws:us-east-1"),
        ("gcp:Europe-West4", "gcp:europe-west4"),
        ("azure:West Europe", "azure:westeurope"),
    ],
)
def test_normalize_code(typed: str, key: str) -> None:
    assert ref.normalize_code(typed) == key
    assert key in ref.grid_rows()


# --- PUE ------------------------------------------------------------------------------------


def test_pue_rows_per_provider_and_default() -> None:
    rows = ref.pue_rows()
    assert set(rows) == {"aws", "gcp", "azure", "default"}
    for row in rows.values():
        assert 1.0 <= row.pue < 2.0
    assert rows["gcp"].pue < rows["aws"].pue < rows["default"].pue
    assert ref.default_pue() == rows["default"]
    assert ref.default_pue().pue == ref.defaults()["pue_default"].value == 1.56


# --- instances ------------------------------------------------------------------------------


def test_instances_name_catalog_gpus_and_derive_per_gpu_rates() -> None:
    catalog = load_accelerators()
    table = ref.instances()
    assert {i.provider for i in table.values()} == set(ref.CLOUD_PROVIDERS)
    for key, item in table.items():
        assert key == f"{item.provider}:{item.instance}"
        assert item.gpu_model in catalog, key
        assert item.usd_per_gpu_hour == pytest.approx(item.usd_per_hour / item.gpus)
        assert re.fullmatch(r"\d{4}-\d{2}", item.as_of)
        assert int(item.as_of[:4]) == item.year
    p5 = table["aws:p5.48xlarge"]
    assert p5.gpus == 8 and p5.gpu_model == "H100-SXM"
    assert p5.usd_per_gpu_hour == pytest.approx(6.88)


def test_find_instance_ignores_case_and_azure_prefix() -> None:
    assert ref.find_instance("AWS", "P5.48XLARGE") is ref.instances()["aws:p5.48xlarge"]
    h100 = ref.instances()["azure:Standard_ND96isr_H100_v5"]
    assert ref.find_instance("azure", "nd96isr_h100_v5") is h100
    assert ref.find_instance("azure", "Standard_ND96isr_H100_v5") is h100
    assert ref.find_instance("aws", "m5.large") is None


# --- CPU TDP --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "tdp", "cores"),
    [
        ("Intel(R) Xeon(R) Platinum 8480+", 350, 56),
        ("Intel(R) Xeon(R) Platinum 8480C", 350, 56),
        ("AMD EPYC 9654 96-Core Processor", 360, 96),
        ("AMD EPYC 9654P 96-Core Processor", 360, 96),
        ("Intel(R) Xeon(R) Platinum 8275CL CPU @ 3.00GHz", 240, 24),
        ("Intel(R) Xeon(R) Gold 6248R CPU @ 3.00GHz", 205, 24),
        ("Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", 150, 20),
        ("AMD EPYC 7742 64-Core Processor", 225, 64),
        ("13th Gen Intel(R) Core(TM) i9-13900K", 125, 24),
        ("AMD Ryzen 9 7950X 16-Core Processor", 170, 16),
        ("intel(r) xeon(r)   platinum   8480+", 350, 56),
    ],
)
def test_cpu_tdp_matches_real_model_names(model: str, tdp: float, cores: int) -> None:
    row = ref.cpu_tdp(model)
    assert row is not None, model
    assert (row.tdp_watts, row.cores) == (tdp, cores)
    assert row.watts_per_core == pytest.approx(tdp / cores)


@pytest.mark.parametrize(
    "model",
    [
        "AMD EPYC 7R13 Processor",  # AWS custom part: no published TDP
        "AMD Ryzen 9 7950X3D 16-Core Processor",  # a different part, not in the table
        "13th Gen Intel(R) Core(TM) i9-13900KS",
        "Apple M2 Max",
        "",
    ],
)
def test_cpu_tdp_unknown_models_give_none(model: str) -> None:
    assert ref.cpu_tdp(model) is None


# --- defaults -------------------------------------------------------------------------------


def test_defaults_hold_the_documented_figures() -> None:
    d = ref.defaults()
    assert d["world_intensity_relative_uncertainty"].value >= 0.3  # wide on purpose
    assert d["memory_watts_per_gib"].unit == "W/GiB"
    assert 0.2 < d["memory_watts_per_gib"].value < 0.6
    assert d["unknown_cpu_watts_per_core"].unit == "W"
    assert d["embodied_kgco2e_per_gpu"].value == 150
    assert d["embodied_kgco2e_per_server"].value == 2500
    per_core = sorted(
        r.watts_per_core for r in ref.cpu_tdp_rows() if "Xeon" in r.pattern or "EPYC" in r.pattern
    )
    median = per_core[len(per_core) // 2]
    assert abs(d["unknown_cpu_watts_per_core"].value - median) < 1  # as its source says


# --- validation -----------------------------------------------------------------------------

GRID_HEADER = "# comment line\ncode,name,kind,g_per_kwh,grid,zone,source,year\n"
WORLD = "WORLD,World,world,470,,,src,2024\n"


def _fails(parse: object, text: str, *needles: str) -> None:
    assert callable(parse)
    with pytest.raises(ValueError) as info:
        parse(text, "x.csv")
    message = str(info.value)
    for needle in ("x.csv", *needles):
        assert needle in message, message


def test_grid_parser_accepts_a_minimal_table() -> None:
    cloud = "aws:eu-west-3,Paris,cloud,,FR,,loc,2025\n"
    rows = ref.parse_grid(GRID_HEADER + WORLD + "FR,France,country,44,,FR,src,2024\n" + cloud)
    assert rows["aws:eu-west-3"].g_per_kwh == 44 and rows["aws:eu-west-3"].zone == "FR"


@pytest.mark.parametrize(
    ("body", "needles"),
    [
        ("FR,France,country,-5,,,src,2024\n", ("line 4", "'g_per_kwh'", "at least 0")),
        ("FR,France,country,lots,,,src,2024\n", ("line 4", "'g_per_kwh'", "not a number")),
        ("FR,France,country,44,,,,2024\n", ("line 4", "'source'")),
        ("FR,France,country,44,,,src,20x4\n", ("line 4", "'year'")),
        ("FR,France,country,44,,,src\n", ("line 4", "expected 8 fields")),
        ("FR,France,planet,44,,,src,2024\n", ("line 4", "'kind'")),
        ("France,France,country,44,,,src,2024\n", ("line 4", "'code'")),
        ("fr,France,country,44,,,src,2024\n", ("line 4", "'code'")),
        ("FR,France,country,,,,src,2024\n", ("line 4", "'g_per_kwh'", "empty")),
        ("FR,France,country,44,DE,,src,2024\n", ("line 4", "'grid'")),
        ("aws:eu-west-3,Paris,cloud,,,,loc,2025\n", ("line 4", "'grid'")),
        ("aws:eu-west-3,Paris,cloud,,FR,,loc,2025\n", ("line 4", "'grid'", "'FR'")),
        ("ibm:eu-de,Frankfurt,cloud,,DE,,loc,2025\n", ("line 4", "'code'")),
        (
            "FR,France,country,44,,,src,2024\nFR,France,country,45,,,src,2024\n",
            ("line 5", "duplicate"),
        ),
    ],
)
def test_grid_parser_names_file_line_and_column(body: str, needles: tuple[str, ...]) -> None:
    _fails(ref.parse_grid, GRID_HEADER + WORLD + body, *needles)


def test_grid_parser_rejects_bad_header_and_missing_world() -> None:
    _fails(ref.parse_grid, "code,name,kind\n", "line 1", "header")
    _fails(ref.parse_grid, GRID_HEADER + "FR,France,country,44,,,src,2024\n", "WORLD")


def test_other_parsers_reject_malformed_rows() -> None:
    _fails(ref.parse_pue, "provider,pue,source,year\naws,0.9,src,2025\n", "line 2", "'pue'")
    _fails(ref.parse_pue, "provider,pue,source,year\ndefault,1.5,src,2025\n", "'provider'")
    head = "provider,instance,gpus,gpu_model,usd_per_hour,price_region,as_of,source,year\n"
    _fails(
        ref.parse_instances,
        head + "aws,x.large,1,NoSuchGPU,1.0,us-east-1,2025-01,src,2025\n",
        "line 2",
        "'gpu_model'",
    )
    _fails(
        ref.parse_instances,
        head + "aws,x.large,1,L4,1.0,us-east-1,2025-13,src,2025\n",
        "'as_of'",
    )
    _fails(
        ref.parse_instances,
        head + "aws,x.large,1,L4,1.0,us-east-1,2024-12,src,2025\n",
        "'year'",
    )
    _fails(
        ref.parse_instances,
        head + "aws,x.large,0,L4,1.0,us-east-1,2025-01,src,2025\n",
        "'gpus'",
    )
    _fails(
        ref.parse_instances,
        head + "aws,x.large,1,L4,-1.0,us-east-1,2025-01,src,2025\n",
        "'usd_per_hour'",
    )
    cpu_head = "pattern,tdp_watts,cores,source,year\n"
    _fails(ref.parse_cpu_tdp, cpu_head + "EPYC (9654,360,96,src,2022\n", "'pattern'")
    _fails(ref.parse_cpu_tdp, cpu_head + "EPYC 9654,-360,96,src,2022\n", "'tdp_watts'")
    _fails(ref.parse_cpu_tdp, cpu_head + "EPYC 9654,360,95.5,src,2022\n", "'cores'")
    defaults_head = "name,value,unit,source,year\n"
    _fails(ref.parse_defaults, defaults_head + "pue_default,-1,ratio,src,2024\n", "'value'")
    _fails(ref.parse_defaults, defaults_head + "pue_default,1.5,ratio,src,2024\n", "missing")


def test_packaged_tables_parse_without_the_cache() -> None:
    assert ref.parse_grid(_text(ref.GRID_FILE)) == ref.grid_rows()
    assert ref.parse_instances(_text(ref.INSTANCES_FILE)) == ref.instances()
    assert ref.parse_cpu_tdp(_text(ref.CPU_TDP_FILE)) == ref.cpu_tdp_rows()
