"""The copies of the carbon package's names in lower layers and in the parsers match it."""

from __future__ import annotations

from computewatch.carbon.providers import PROVIDERS
from computewatch.carbon.sci import SCI_UNITS, canonical_unit
from computewatch.cli import carbon as cli_carbon
from computewatch.config import _CHOICES, Config, parse_config


def test_copies_match() -> None:
    assert _CHOICES["carbon_provider"] == PROVIDERS
    assert _CHOICES["sci_unit"] == tuple(u.lower() for u in SCI_UNITS)
    assert cli_carbon._PROVIDERS == PROVIDERS
    assert cli_carbon.SCI_UNITS == SCI_UNITS
    assert canonical_unit("1m-TOKENS") == "1M-tokens"


def test_carbon_config_keys() -> None:
    cfg = parse_config(
        {
            "carbon": {
                "provider": "WattTime",
                "provider_region": "CAISO_NORTH",
                "watttime_username": "me",
                "watttime_url": "http://127.0.0.1:1",
                "sci_unit": "1M-tokens",
            }
        }
    )
    assert cfg.carbon_provider == "watttime" and cfg.sci_unit == "1m-tokens"
    assert Config().sci_unit == "run"
