"""Fuzzing two text transformers of the reproducibility record and the model card: the kept
``git diff`` (any bytes: redacted text within the cap, cut at a line end) and the merge of the
``co2_eq_emissions`` block into an existing card (any text: one block in the front matter, the
body after it kept)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from computewatch.sources.environment import diff_text
from computewatch.views.card import merge_card

BASE = settings.get_profile("computewatch-fuzz")  # tests/fuzz/conftest.py

NEW = '---\nco2_eq_emissions:\n  emissions: 1.5\n  source: "computewatch"\n---\n\nprose\n'


@settings(BASE, max_examples=200 * BASE.max_examples)
@given(st.binary(max_size=400), st.integers(min_value=1, max_value=500))
def test_kept_diff(raw: bytes, limit: int) -> None:
    text, cut = diff_text(raw, limit)
    assert cut == (len(raw) > limit) and isinstance(text, str)


_lines = st.lists(
    st.one_of(
        st.sampled_from(["---", "co2_eq_emissions:", "  emissions: 3", "license: mit", "", "..."]),
        st.text(max_size=20).filter(lambda t: "\n" not in t),
    ),
    max_size=12,
)


@settings(BASE, max_examples=200 * BASE.max_examples)
@given(_lines)
def test_card_merge(lines: list[str]) -> None:
    existing = "\n".join(lines)
    merged = merge_card(existing, NEW)
    assert merged.startswith("---\n")
    assert '  source: "computewatch"' in merged
    if not existing.startswith("---"):
        assert merged.endswith(existing)
