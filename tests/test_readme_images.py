"""The README's pictures are made by scripts/screenshots.py from real runs, and made again when
the pages they show change: the manifest's hash of the page sources must match theirs now."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from scripts.screenshots import IMAGES, MANIFEST, sources_hash

ROOT = Path(__file__).resolve().parents[1]


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def test_the_pictures_are_of_the_pages_as_they_are() -> None:
    manifest = json.loads(MANIFEST.read_text())
    assert manifest["sources_sha256"] == sources_hash(), (
        "the report's or the dashboard's pages changed since the README's pictures were made: "
        "run `python scripts/screenshots.py` and commit docs/images/"
    )
    for name in manifest["images"]:
        width, height = _png_size(IMAGES / name)
        assert width == manifest["width"] and height >= 600


def test_the_readme_shows_them_first() -> None:
    readme = (ROOT / "README.md").read_text()
    head = readme[: readme.index("## Set up")]
    assert "docs/images/report.png" in head and "docs/images/dashboard-runs.png" in head
