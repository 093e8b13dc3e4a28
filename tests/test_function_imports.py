"""Every import inside a function (or class) of the package says why it is not at the top.

Function-level imports are for an optional heavy dependency (an extra that may be absent, a
framework) or for a command's start-up time; each carries a one-line reason as a ``#`` comment
on its own line(s), on the comment lines just above it, or on the line of the block that opens
it (``try:  # the optional parquet extra``). Consecutive imports form one group that shares
one reason. A pragma alone (``# noqa: ...``, ``# type: ignore[...]``) is not a reason. Imports
under ``if TYPE_CHECKING:`` are never executed and need none.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "computewatch"

# tool directives that say nothing of why: removed before looking for a reason
_PRAGMAS = re.compile(
    r"noqa(:\s*[A-Z]+[0-9]+(\s*,\s*[A-Z]+[0-9]+)*)?|type:\s*ignore(\[[^\]]*\])?"
    r"|pragma:\s*no\s*cover|fmt:\s*(off|on|skip)",
    re.IGNORECASE,
)

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_IMPORTS = (ast.Import, ast.ImportFrom)


@dataclass(frozen=True)
class Offender:
    path: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


def _reasons(source: str) -> dict[int, str]:
    """The text of each line's comment, pragmas removed (line number → reason; may be empty)."""
    found: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        # "# type: ignore[x]  # the reason" is one COMMENT token: keep what is not a directive
        text = _PRAGMAS.sub(" ", token.string)
        words = [w for w in text.replace("#", " ").split() if any(c.isalnum() for c in w)]
        found[token.start[0]] = " ".join(words)
    return found


def _blocks(node: ast.AST) -> list[list[ast.stmt]]:
    """The statement lists directly under ``node`` (a TYPE_CHECKING block's body left out)."""
    out: list[list[ast.stmt]] = []
    fields = ("orelse",) if _is_type_checking(node) else ("body", "orelse", "finalbody")
    for field in fields:
        block = getattr(node, field, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            out.append(block)
    out.extend(handler.body for handler in getattr(node, "handlers", ()))
    out.extend(case.body for case in getattr(node, "cases", ()))
    return out


def _is_type_checking(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _header(block: list[ast.stmt], lines: list[str]) -> int | None:
    """The line that opens ``block`` when it is a ``try:``, ``if ...:``, ``else:`` ... line."""
    line = block[0].lineno - 1
    while line >= 1 and lines[line - 1].strip()[:1] in ("", "#"):
        line -= 1
    if line < 1 or lines[line - 1].lstrip().startswith(("def ", "async def ", "class ")):
        return None
    return line


def _has_reason(
    group: list[ast.stmt], header: int | None, reasons: dict[int, str], lines: list[str]
) -> bool:
    for statement in group:
        end = statement.end_lineno or statement.lineno
        if any(reasons.get(n) for n in range(statement.lineno, end + 1)):
            return True
    line = group[0].lineno - 1  # the comment lines just above the group
    while line >= 1 and lines[line - 1].strip().startswith("#"):
        if reasons.get(line):
            return True
        line -= 1
    return header is not None and bool(reasons.get(header))


def offenders_in(path: Path, shown: str) -> list[Offender]:
    """The function-level imports of one file that give no reason."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    lines = source.splitlines()
    reasons: dict[int, str] | None = None  # tokenized only for a file with such imports
    found: list[Offender] = []

    def visit(node: ast.AST, in_scope: bool) -> None:
        nonlocal reasons
        scoped = in_scope or isinstance(node, _SCOPES)
        for block in _blocks(node):
            if scoped:
                groups: list[list[ast.stmt]] = []
                previous_was_import = False
                for statement in block:
                    is_import = isinstance(statement, _IMPORTS)
                    if is_import and previous_was_import:
                        groups[-1].append(statement)
                    elif is_import:
                        groups.append([statement])
                    previous_was_import = is_import
                for group in groups:
                    opens = group[0] is block[0] and not isinstance(node, _SCOPES)
                    header = _header(block, lines) if opens else None
                    if reasons is None:
                        reasons = _reasons(source)
                    if not _has_reason(group, header, reasons, lines):
                        found.extend(
                            Offender(shown, s.lineno, lines[s.lineno - 1].strip()) for s in group
                        )
            for statement in block:
                visit(statement, scoped)

    visit(tree, False)
    return found


def all_offenders() -> list[Offender]:
    found: list[Offender] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found.extend(offenders_in(path, str(path.relative_to(PACKAGE.parent))))
    return found


def test_every_function_level_import_gives_a_reason() -> None:
    found = [str(o) for o in all_offenders()]
    assert not found, "function-level imports without a reason (a # comment saying why):\n" + (
        "\n".join(found)
    )


def _check(tmp_path: Path, source: str) -> list[int]:
    path = tmp_path / "m.py"
    path.write_text(source)
    return [o.line for o in offenders_in(path, "m.py")]


def test_the_check_finds_what_it_should(tmp_path: Path) -> None:
    """The rule itself, on small sources: where a reason counts and where it does not."""
    assert _check(tmp_path, "import os\n\ndef f():\n    import json\n") == [4]
    assert _check(tmp_path, "def f():\n    import json  # start-up time of `run`\n") == []
    assert _check(tmp_path, "def f():\n    # start-up time\n    import a\n    import b\n") == []
    # a pragma alone is no reason; a reason beside a pragma is
    assert _check(tmp_path, "def f():\n    import a  # noqa: F401\n") == [2]
    assert _check(tmp_path, "def f():\n    import a  # type: ignore[import]\n") == [2]
    assert _check(tmp_path, "def f():\n    import a  # noqa: F401  # the extra\n") == []
    # a statement between ends the group: the second import needs its own reason
    assert _check(tmp_path, "def f():\n    # heavy\n    import a\n    x = 1\n    import b\n") == [5]
    # the line that opens the block, but never the def itself
    assert (
        _check(
            tmp_path,
            "def f():\n    try:  # the extra\n        import a\n    except E:\n        pass\n",
        )
        == []
    )
    assert _check(tmp_path, "def f():  # heavy\n    import a\n") == [2]
    assert _check(tmp_path, "def f(\n    x: int,\n) -> None:  # heavy\n    import a\n") == [4]
    # a # inside a string is not a comment
    assert _check(tmp_path, 'def f():\n    x = "#"\n    import a\n') == [3]
    # type-checking imports and module-level ones need none; methods and nested code count
    assert _check(tmp_path, "def f():\n    if TYPE_CHECKING:\n        import a\n") == []
    assert _check(tmp_path, "try:\n    import a\nexcept ImportError:\n    a = None\n") == []
    assert _check(
        tmp_path, "class C:\n    def m(self):\n        if x:\n            import a\n"
    ) == [4]
