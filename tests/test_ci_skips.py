"""Under ``CI=true`` every kind of skip fails, with its reason; without it, skips stay skips.

Each test runs pytest (in process, with ``pytester``) on small test files whose conftest is
the suite's own ``tests/conftest.py``, so what is checked is the hook CI runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

CONFTEST = Path(__file__).parent / "conftest.py"

KINDS = {
    "test_importorskip.py": """
        import pytest
        pytest.importorskip("computewatch_no_such_module")

        def test_never_collected():
            pass
    """,
    "test_module_level.py": """
        import pytest
        pytest.skip("whole module skipped", allow_module_level=True)

        def test_never_collected():
            pass
    """,
    "test_markers.py": """
        import pytest

        @pytest.mark.skipif(True, reason="skipif marker")
        def test_skipif():
            pass

        @pytest.mark.skip(reason="skip marker")
        def test_skip():
            pass
    """,
    "test_runtime.py": """
        import pytest

        def test_runtime_skip():
            pytest.skip("skipped at run time")

        @pytest.fixture
        def missing_tool():
            pytest.skip("skipped by a fixture")

        def test_fixture_skip(missing_tool):
            pass

        def test_passes():
            pass

        @pytest.mark.xfail(reason="an expected failure is no skip", strict=True)
        def test_xfail():
            raise AssertionError
    """,
}

REASONS = (
    "computewatch_no_such_module",
    "whole module skipped",
    "skipif marker",
    "skip marker",
    "skipped at run time",
    "skipped by a fixture",
)


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST.read_text())
    for name, source in KINDS.items():
        pytester.makepyfile(**{name[:-3]: source})
    return pytester


def test_under_ci_every_kind_of_skip_fails_with_its_reason(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    result = suite.runpytest("--continue-on-collection-errors", "-rA")
    outcomes = result.parseoutcomes()
    # Two modules fail to collect and three tests fail in setup (markers, the fixture): errors;
    # the skip in a test's body fails it; one passes; the xfail stays an xfail.
    assert outcomes.get("skipped", 0) == 0, result.stdout.str()
    assert outcomes["errors"] == 5
    assert outcomes["failed"] == 1
    assert outcomes["passed"] == 1
    assert outcomes["xfailed"] == 1
    out = result.stdout.str()
    summary = [line for line in result.outlines if line.startswith(("ERROR ", "FAILED "))]
    assert len(summary) == 6
    assert all("skipped under CI=true, where no test may skip" in line for line in summary)
    for reason in REASONS:
        assert reason in out, reason
    assert result.ret != 0


def test_a_module_level_skip_under_ci_stops_the_run_as_a_collection_error(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    result = suite.runpytest()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*2 errors during collection*"])


@pytest.mark.parametrize("ci", [None, "", "false"])
def test_without_ci_skips_are_skips(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str | None
) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    result = suite.runpytest("-rs")
    outcomes = result.parseoutcomes()
    assert outcomes["skipped"] == 6
    assert outcomes["passed"] == 1
    assert outcomes["xfailed"] == 1
    assert "failed" not in outcomes and "errors" not in outcomes
    assert "under CI=true" not in result.stdout.str()
    assert result.ret == pytest.ExitCode.OK
