"""``card -o FILE`` on an existing model card: the ``co2_eq_emissions`` block merged into its
front matter, everything else kept (``--force`` replaces the file)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from computewatch.views.card import merge_card

CARD = """---
license: apache-2.0
tags:
  - text-classification
co2_eq_emissions:
  emissions: 999
  source: "a guess"
language: en
---

# My model

Trained with care. License and tags above.
"""


def _front(text: str) -> dict[str, Any]:
    _, front, _ = text.split("---\n", 2)
    doc = yaml.safe_load(front)
    assert isinstance(doc, dict)
    return doc


@pytest.mark.slow
def test_card_merges_into_an_existing_model_card(cw: Any, tmp_path: Path) -> None:
    cw.ok("run", "--quiet", "--name", "ft", "--", "sleep", "0.3")
    readme = tmp_path / "README.md"
    readme.write_text(CARD)
    r = cw.ok("card", "ft", "--training-type", "fine-tuning", "-o", readme)
    text = readme.read_text()
    front = _front(text)
    assert front["license"] == "apache-2.0" and front["tags"] == ["text-classification"]
    assert front["language"] == "en"
    block = front["co2_eq_emissions"]
    assert block["training_type"] == "fine-tuning" and block["source"] != "a guess"
    assert text.endswith(CARD.split("---\n", 2)[2])  # the prose as it was
    assert "training_type not given" not in r.stderr
    # a file without front matter gets one; the rest kept
    plain = tmp_path / "PLAIN.md"
    plain.write_text("# Just prose\n")
    r = cw.ok("card", "ft", "-o", plain)
    assert "training_type not given" in r.stderr  # the default is said, not silent
    assert plain.read_text().endswith("---\n# Just prose\n")
    assert _front(plain.read_text())["co2_eq_emissions"]["training_type"] == "pre-training"
    # --force replaces; another format never overwrites without it
    cw.ok("card", "ft", "-o", readme, "--force")
    assert "license" not in _front(readme.read_text())
    r = cw("card", "ft", "--format", "markdown", "-o", readme)
    assert r.returncode == 2 and "--force" in r.stderr


def test_merge_keeps_every_other_line() -> None:
    new = '---\nco2_eq_emissions:\n  emissions: 1.5\n  source: "x"\n---\n\nprose\n'
    merged = merge_card(CARD, new)
    assert merged.count("co2_eq_emissions:") == 1 and "999" not in merged
    assert merged.replace('  emissions: 1.5\n  source: "x"\n', "") == CARD.replace(
        '  emissions: 999\n  source: "a guess"\n', ""
    )
    appended = merge_card("---\ntitle: t\n---\nbody\n", new)
    assert (
        appended == '---\ntitle: t\nco2_eq_emissions:\n  emissions: 1.5\n  source: "x"\n---\nbody\n'
    )
