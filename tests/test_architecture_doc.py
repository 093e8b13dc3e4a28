"""docs/architecture.md matches the tree: every package and top-level module of
``src/computewatch/`` is named in the layers table, in the order of the import-linter contract
(pyproject's ``[tool.importlinter]``), and every file or folder the document names exists."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "computewatch"
DOC = ROOT / "docs" / "architecture.md"

# a file or folder as the document writes it: `sampling/`, `grid.py`, `views/html/page.py`
_NAME = re.compile(
    r"(?<![\w/.<>-])((?:[A-Za-z_]\w*/)*(?:[A-Za-z_]\w*\.py|[A-Za-z_]\w*/))(?![\w<>])"
)


@dataclass(frozen=True)
class Row:
    """One line of the layers table: its layer (the last label above), package and text."""

    line: int
    layer: str
    package: str
    text: str


def _blocks(doc: str) -> dict[str, list[tuple[int, str]]]:
    """The fenced blocks of ``doc`` by the heading above them, each line with its number."""
    blocks: dict[str, list[tuple[int, str]]] = {}
    heading = ""
    inside: list[tuple[int, str]] | None = None
    for number, line in enumerate(doc.splitlines(), 1):
        if line.startswith("```"):
            inside = blocks.setdefault(heading, []) if inside is None else None
        elif inside is not None:
            inside.append((number, line))
        elif line.startswith("## "):
            heading = line[3:].strip()
    return blocks


def _table(doc: str) -> list[Row]:
    lines = _blocks(doc)["Layers"]
    header = lines[0][1]
    package_at = header.index("package")
    text_at = header.index("what it holds")
    rows: list[Row] = []
    layer = ""
    for number, line in lines[2:]:  # past the header and its rule
        layer = line[:package_at].strip() or layer
        rows.append(Row(number, layer, line[package_at:text_at], line[text_at:]))
    return rows


def _names(text: str) -> list[str]:
    return _NAME.findall(text)


def _top_level() -> set[str]:
    """The packages (``name/``) and modules (``name.py``) at the top of src/computewatch."""
    found = {p.name for p in PACKAGE.glob("*.py")}
    found |= {f"{p.parent.name}/" for p in PACKAGE.glob("*/__init__.py")}
    return found


def _exists_in_tree(name: str, under: Path = PACKAGE) -> bool:
    """Some file or folder below ``under`` whose path ends with ``name``'s parts."""
    parts = tuple(name.rstrip("/").split("/"))
    want_dir = name.endswith("/")
    for path in under.rglob(parts[-1]):
        if "__pycache__" in path.parts or path.is_dir() != want_dir:
            continue
        if path.relative_to(PACKAGE).parts[-len(parts) :] == parts:
            return True
    return False


def _contract_layers() -> list[list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    out = []
    for layer in contract["layers"]:
        members = [m.strip().removeprefix("computewatch.") for m in layer.split("|")]
        out.append([f"{m}/" if (PACKAGE / m).is_dir() else f"{m}.py" for m in members])
    return out


def test_every_package_and_top_level_module_is_in_the_table() -> None:
    named = {n for row in _table(DOC.read_text()) for n in _names(row.package)}
    missing = sorted(_top_level() - named)
    assert not missing, f"not named in docs/architecture.md's layers table: {missing}"


def test_the_table_names_only_what_exists() -> None:
    """The package column names what is at the top of the package; the text beside it names
    files and folders of that layer's own packages (`grid.py` is in views/)."""
    rows = _table(DOC.read_text())
    top = _top_level() | {f"{p.name}/" for p in PACKAGE.iterdir() if p.is_dir()}
    packages = sorted({n for row in rows for n in _names(row.package)} - top)
    assert not packages, f"the table's package column names what is not in the tree: {packages}"
    layers: dict[str, list[Row]] = {}
    for row in rows:
        layers.setdefault(row.layer, []).append(row)
    wrong = []
    for layer, members in layers.items():
        own = {n for row in members for n in _names(row.package)}
        dirs = [PACKAGE / n for n in own if n.endswith("/")]
        for row in members:
            for name in _names(row.text):
                if name not in own and not any(_exists_in_tree(name, d) for d in dirs):
                    wrong.append(f"line {row.line} ({layer}): {name} is not in {sorted(own)}")
    assert not wrong, "the table names files or folders its packages do not hold:\n" + (
        "\n".join(wrong)
    )


def test_every_path_the_document_names_exists() -> None:
    doc = DOC.read_text()
    flow = " ".join(line for _, line in _blocks(doc)["Data flow"])
    missing = sorted({n for n in _names(flow) if not _exists_in_tree(n)})
    # the prose: a backticked file of the package (`analysis/aggregates.py`) or of the repository
    quoted = re.findall(r"`([\w/.-]+\.py)`", doc)
    missing += sorted(q for q in set(quoted) if not (ROOT / q).exists() and not _exists_in_tree(q))
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_the_layers_follow_the_import_contract() -> None:
    """Top to bottom as pyproject's contract lists them; siblings (``a | b``) in one layer."""
    rows = _table(DOC.read_text())
    where: dict[str, Row] = {}
    for row in rows:
        for name in _names(row.package):
            where.setdefault(name, row)
    problems = []
    previous: tuple[str, int] | None = None
    for members in _contract_layers():
        absent = [m for m in members if m not in where]
        if absent:
            problems.append(f"{absent}: not in the table")
            continue
        lines = [where[m].line for m in members]
        if len({where[m].layer for m in members}) > 1:
            problems.append(f"{members}: siblings in different layers of the table")
        if previous is not None and min(lines) < previous[1]:
            problems.append(
                f"{members} are above {previous[0]} in the table, below in the contract"
            )
        previous = (" | ".join(members), max(lines))
    assert not problems, "\n".join(problems)


def test_the_checks_themselves() -> None:
    """The parsing the checks rely on: names in text, paths in the tree, the table's columns."""
    assert _names("summary_rows.py (x), html/ (page.py; run.py)") == [
        "summary_rows.py",
        "html/",
        "page.py",
        "run.py",
    ]
    assert _names("cli/<group>_run.py, /api/v1, `run --prometheus`") == []
    assert _exists_in_tree("views/html/page.py") and _exists_in_tree("grid.py")
    assert _exists_in_tree("html/") and not _exists_in_tree("html.py")
    assert _exists_in_tree("grid.py", PACKAGE / "views")
    assert not _exists_in_tree("grid.py", PACKAGE / "sampling")
    assert not _exists_in_tree("nothing_here.py") and not _exists_in_tree("views/nothing/")
    first = _table(DOC.read_text())[0]
    assert (first.layer, _names(first.package)) == ("interfaces", ["cli/"])
