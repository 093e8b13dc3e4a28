"""Location from --region, configuration, environment and DMI; never a silent guess."""

from __future__ import annotations

from pathlib import Path

import pytest

from computewatch.accounting.region import (
    RegionError,
    close_matches,
    detect_cloud,
    lookup,
    resolve_location,
)
from computewatch.catalog.reference import grid_rows, world_average

FIXTURES = Path(__file__).parent / "fixtures"
NO_DMI = str(FIXTURES / "no_such_dmi_dir")


def dmi(name: str) -> str:
    return str(FIXTURES / f"dmi_{name}")


# --- order and how ----------------------------------------------------------------------------


def test_explicit_region_wins_and_is_case_insensitive() -> None:
    loc = resolve_location(
        "fr",
        config_region="DE",
        environ={"COMPUTEWATCH_REGION": "PL", "AWS_REGION": "us-east-1"},
        dmi_root=NO_DMI,
    )
    assert (loc.code, loc.how, loc.known) == ("FR", "--region", True)
    assert loc.row is grid_rows()["FR"]
    assert loc.note is None and loc.relative_uncertainty is None


def test_config_comes_before_the_environment() -> None:
    loc = resolve_location(
        None, config_region="us-ca", environ={"COMPUTEWATCH_REGION": "PL"}, dmi_root=NO_DMI
    )
    assert (loc.code, loc.how) == ("US-CA", "config")


def test_own_variable_comes_before_cloud_variables() -> None:
    env = {"COMPUTEWATCH_REGION": "gcp:europe-west4", "AWS_REGION": "us-east-1"}
    loc = resolve_location(environ=env, dmi_root=NO_DMI)
    assert (loc.code, loc.how, loc.provider) == (
        "gcp:europe-west4",
        "env:COMPUTEWATCH_REGION",
        "gcp",
    )


@pytest.mark.parametrize(
    ("variable", "value", "code"),
    [
        ("AWS_REGION", "us-east-1", "aws:us-east-1"),
        ("AWS_DEFAULT_REGION", "eu-north-1", "aws:eu-north-1"),
        ("CLOUDSDK_COMPUTE_REGION", "us-central1", "gcp:us-central1"),
        ("GOOGLE_CLOUD_REGION", "europe-west9", "gcp:europe-west9"),
        ("AZURE_DEFAULTS_LOCATION", "westus2", "azure:westus2"),
        ("REGION_NAME", "West Europe", "azure:westeurope"),
    ],
)
def test_cloud_tool_variables(variable: str, value: str, code: str) -> None:
    loc = resolve_location(environ={variable: value}, dmi_root=NO_DMI)
    assert (loc.code, loc.how) == (code, f"env:{variable}")
    assert loc.provider == code.split(":", maxsplit=1)[0]


def test_aws_region_comes_before_aws_default_region() -> None:
    env = {"AWS_DEFAULT_REGION": "eu-west-1", "AWS_REGION": "us-west-2"}
    assert resolve_location(environ=env, dmi_root=NO_DMI).code == "aws:us-west-2"


def test_unknown_cloud_variable_is_skipped_with_a_note() -> None:
    env = {"AWS_REGION": "xx-nowhere-1", "AWS_DEFAULT_REGION": "us-east-2"}
    loc = resolve_location(environ=env, dmi_root=NO_DMI)
    assert (loc.code, loc.how) == ("aws:us-east-2", "env:AWS_DEFAULT_REGION")
    assert loc.note is not None and "xx-nowhere-1" in loc.note


# --- unknown location ---------------------------------------------------------------------


def test_nothing_known_gives_the_world_average_said_out_loud() -> None:
    loc = resolve_location(environ={}, dmi_root=NO_DMI)
    assert loc.how == "unknown" and not loc.known
    assert loc.row == world_average() and loc.code == "WORLD"
    assert loc.provider is None
    assert loc.relative_uncertainty is not None and loc.relative_uncertainty >= 0.3
    assert loc.note is not None
    assert "world average" in loc.note and "unknown" in loc.note and "--region" in loc.note


def test_unknown_location_on_a_cloud_keeps_the_provider_and_says_so() -> None:
    loc = resolve_location(environ={"AWS_REGION": "xx-nowhere-1"}, dmi_root=dmi("aws"))
    assert loc.how == "unknown" and loc.provider == "aws"
    assert loc.note is not None and "xx-nowhere-1" in loc.note and "aws" in loc.note


@pytest.mark.parametrize("blank", ["", "   "])
def test_blank_settings_are_not_codes(blank: str) -> None:
    loc = resolve_location(
        blank, config_region=blank, environ={"COMPUTEWATCH_REGION": blank}, dmi_root=NO_DMI
    )
    assert loc.how == "unknown"


# --- unknown codes --------------------------------------------------------------------------


def test_unknown_code_names_it_and_suggests_close_matches() -> None:
    with pytest.raises(RegionError) as info:
        resolve_location("us-east-1", environ={}, dmi_root=NO_DMI)
    message = str(info.value)
    assert message.startswith("unknown region 'us-east-1'; close matches: ")
    assert "aws:us-east-1" in message
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("typed", "expected"),
    [("France", "FR"), ("US-CAL", "US-CA"), ("gcp:europe-west44", "gcp:europe-west4")],
)
def test_close_matches(typed: str, expected: str) -> None:
    assert expected in close_matches(typed)


def test_no_close_match_still_explains_the_codes() -> None:
    with pytest.raises(RegionError, match=r"unknown region 'qqqqqqqq'; no close match"):
        lookup("qqqqqqqq")


@pytest.mark.parametrize(
    ("kwargs", "origin"),
    [
        ({"config_region": "Atlantis"}, "config"),
        ({"environ": {"COMPUTEWATCH_REGION": "Atlantis"}}, "env:COMPUTEWATCH_REGION"),
    ],
)
def test_unknown_configured_code_is_an_error_too(kwargs: dict[str, object], origin: str) -> None:
    kwargs.setdefault("environ", {})
    with pytest.raises(RegionError, match=rf"unknown region 'Atlantis' \(from {origin}\)"):
        resolve_location(dmi_root=NO_DMI, **kwargs)  # type: ignore[arg-type]


# --- provider from DMI --------------------------------------------------------------------


def test_country_code_takes_the_provider_from_dmi() -> None:
    loc = resolve_location("FR", environ={}, dmi_root=dmi("gcp"))
    assert loc.provider == "gcp" and loc.note is None


def test_cloud_code_and_dmi_disagreeing_is_noted() -> None:
    loc = resolve_location("aws:us-east-1", environ={}, dmi_root=dmi("azure"))
    assert loc.provider == "aws"
    assert loc.note is not None and "azure" in loc.note


def test_detect_aws_nitro_reads_the_instance_type() -> None:
    host = detect_cloud(dmi("aws"))
    assert (host.provider, host.instance_type) == ("aws", "p5.48xlarge")
    assert "Amazon EC2" in host.evidence


def test_detect_aws_xen_generation() -> None:
    host = detect_cloud(dmi("aws_xen"))
    assert (host.provider, host.instance_type) == ("aws", None)


def test_detect_gcp() -> None:
    host = detect_cloud(dmi("gcp"))
    assert (host.provider, host.instance_type) == ("gcp", None)
    assert "Google Compute Engine" in host.evidence


def test_detect_azure_by_its_asset_tag() -> None:
    assert detect_cloud(dmi("azure")).provider == "azure"


def test_plain_hyper_v_is_not_azure() -> None:
    host = detect_cloud(dmi("hyperv"))
    assert host.provider is None and "Hyper-V" in host.evidence


def test_bare_metal_server_is_no_cloud() -> None:
    host = detect_cloud(dmi("none"))
    assert (host.provider, host.instance_type) == (None, None)
    assert "Dell" in host.evidence


def test_unreadable_dmi_is_no_cloud(tmp_path: Path) -> None:
    host = detect_cloud(str(tmp_path))
    assert host.provider is None and "not readable" in host.evidence
    assert detect_cloud(NO_DMI).provider is None
