"""No two modules of the package import each other, directly or through a chain (function-level
imports included: grimp reads every import statement)."""

from __future__ import annotations

import pytest

grimp = pytest.importorskip("grimp")  # import-linter's graph library, a test dependency


def test_no_import_cycles() -> None:
    graph = grimp.build_graph("computewatch")
    cycles = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back:
                cycles.append(f"{module} -> {' -> '.join(back)}")
    assert not cycles, "import cycles:\n" + "\n".join(cycles)
