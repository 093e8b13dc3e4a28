"""``where``'s prices when the input is bad: an unreadable, non-UTF-8 or malformed ``--prices``
file, an unknown region in it, a bad ``[cost] usd_per_kwh`` is one clear line and exit 2; a
region the price table lacks is "no price", never an error and never a guess."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ARGS = ("where", "--duration", "1h", "--energy", "10", "--regions", "aws:us-east-1,FR")


def _one_line(r: Any) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return str(lines[0])


def test_bad_prices_files(cw: Any, tmp_path: Path) -> None:
    assert "cannot read" in _one_line(cw(*ARGS, "--prices", tmp_path / "absent.csv"))
    assert "cannot read" in _one_line(cw(*ARGS, "--prices", tmp_path))  # a directory
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b"region,usd_per_kwh\nFR,0.1\n# caf\xe9\n")
    assert "cannot read" in _one_line(cw(*ARGS, "--prices", latin))
    for body, why in (
        ("region,usd_per_kwh\nFR,cheap\n", "expected region,usd_per_kwh"),
        ("region,usd_per_kwh\nFR\n", "expected region,usd_per_kwh"),
        ("region,usd_per_kwh\nFR,-0.1\n", "is not a price per kWh"),
        ("region,usd_per_kwh\nFR,nan\n", "is not a price per kWh"),
        ("region,usd_per_kwh\nFrnace,0.1\n", "close matches: FR"),
    ):
        p = tmp_path / "p.csv"
        p.write_text(body)
        assert why in _one_line(cw(*ARGS, "--prices", p)), body


def test_bad_configured_price(cw: Any, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[cost]\nusd_per_kwh = "cheap"\n')
    assert "usd_per_kwh" in _one_line(cw(*ARGS, "--config", cfg))


def test_a_region_without_a_price_row_is_no_price(cw: Any) -> None:
    out = cw.json(*ARGS[:-1], "aws:eu-west-2,FR")  # London: GB has no row in the table
    gb = next(r for r in out["regions"] if r["region"] == "aws:eu-west-2")
    assert gb["usd"] is None and gb["usd_per_kwh"] is None and gb["price_year"] is None
    assert gb["price_source"].startswith("no price") and "no row for GB" in gb["price_source"]
