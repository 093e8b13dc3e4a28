"""The public ``COUNTxMODEL`` preset parser (computewatch.testing.presets) against the catalog."""

from __future__ import annotations

import pytest

import computewatch.testing
from computewatch.catalog import load_accelerators
from computewatch.testing.presets import parse_preset


def test_count_model_any_case_and_a_bare_model_is_one() -> None:
    catalog = load_accelerators()
    count, acc = parse_preset(" 8 x h100-sxm ", catalog)
    assert (count, acc) == (8, catalog["H100-SXM"])
    assert parse_preset("A100-80GB", catalog) == (1, catalog["A100-80GB"])
    assert parse_preset("2×A100-80GB", catalog)[0] == 2
    assert computewatch.testing.parse_preset is parse_preset


@pytest.mark.parametrize(
    ("preset", "message"),
    [
        ("8xNOPE", "unknown TPU model 'NOPE' in preset '8xNOPE'; models: A"),
        ("0xA", "preset '0xA': count must be 1 to 64"),
        ("65xA", "preset '65xA': count must be 1 to 64"),
        ("2x A B", "preset '2x A B' is not COUNTxMODEL; TPU models: A"),
    ],
)
def test_a_bad_preset_names_the_valid_models(preset: str, message: str) -> None:
    catalog = {"A": load_accelerators()["H100-SXM"]}
    with pytest.raises(ValueError) as e:
        parse_preset(preset, catalog, "TPU ")
    assert str(e.value) == message
