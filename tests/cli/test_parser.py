"""The parser's copies of the library's choices, and what ``computewatch --version`` imports."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from computewatch.cli import args as cli_args


def test_the_parser_constants_match_the_library() -> None:
    from computewatch.analysis.export import FORMATS
    from computewatch.catalog import PRECISIONS
    from computewatch.fleet import agent_config
    from computewatch.lineage.compute import STAGES
    from computewatch.metrics.model import DEFAULT_LISTEN, GROUPINGS
    from computewatch.sampling import supervisor
    from computewatch.sources.gpus import BACKEND_CHOICES

    assert cli_args.BACKEND_CHOICES == BACKEND_CHOICES
    assert cli_args.PRECISIONS == PRECISIONS
    assert cli_args.EXPORT_FORMATS == FORMATS
    assert cli_args.GROUPINGS == GROUPINGS
    assert cli_args.DEFAULT_LISTEN == DEFAULT_LISTEN
    assert cli_args.GOVERNANCE_STAGES == STAGES
    for mod in (supervisor, agent_config):
        assert (cli_args.MIN_INTERVAL, cli_args.MAX_INTERVAL) == (
            mod.MIN_INTERVAL,
            mod.MAX_INTERVAL,
        )


LOADED = """
import json, sys
from computewatch.cli import main
try:
    main(["--version"])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)))
"""


def test_version_loads_no_command_and_no_library() -> None:
    """``computewatch --version`` builds the whole parser but imports none of the library's
    modules (they cost ~0.2 s together): a measure of start-up that timing cannot flake on."""
    out = subprocess.run(
        [sys.executable, "-c", LOADED], capture_output=True, text=True, check=True
    ).stdout
    loaded = set(json.loads(out.splitlines()[-1]))
    ours = {m for m in loaded if m.startswith("computewatch")}
    foundation = {
        "computewatch",
        "computewatch._version",
        "computewatch.errors",
        "computewatch.units",
        "computewatch.escape",  # no imports: argv's names and run references are escaped
        "computewatch.jsonout",  # json and math only, which the CLI modules imported before
    }
    # The command line's own modules (parsers; a command's code imports the library only when
    # it runs) and the foundation: nothing of the library.
    parsers = {m for m in ours if m.startswith("computewatch.cli")}
    assert ours - parsers <= foundation, sorted(ours - parsers - foundation)
    assert not {"rich", "dataclasses", "computewatch.tracking"} & loaded


def test_every_command_resolves() -> None:
    from computewatch.cli.main import COMMANDS, _command, build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "cmd")
    assert set(COMMANDS) == set(sub.choices)  # type: ignore[arg-type]
    for name in COMMANDS:
        assert callable(_command(name))


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    sub = next(a for a in parser._actions if a.dest == "cmd")
    return sub.choices[name]  # type: ignore[index, no-any-return]


def _helps(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, str]:
    """Every parser's help under ``parser``, nested subcommands included, by command path."""
    out = {prefix: parser.format_help()}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                out.update(_helps(child, f"{prefix} {name}".strip()))
    return out


def test_the_parser_of_one_command_is_that_command_of_the_whole_parser() -> None:
    """main() builds only the command being run: its help (nested subcommands included) and
    the top level's are those of the whole parser."""
    from computewatch.cli.main import COMMANDS, build_parser

    whole = build_parser()
    assert build_parser("run").format_help() == whole.format_help()
    for name in COMMANDS:
        assert _helps(_subparser(build_parser(name), name)) == _helps(_subparser(whole, name))


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--interval", "0.5", "--tag", "a=b", "--name", "x", "--", "true"],
        ["show", "latest", "--json"],
        ["runs", "--limit", "3"],
        ["server", "token", "list", "--db", "sqlite:///x.db"],
        ["export", "abc", "--format", "csv"],
    ],
)
def test_one_command_parses_as_the_whole_parser_does(argv: list[str]) -> None:
    from computewatch.cli.main import build_parser

    assert build_parser(argv[0]).parse_args(argv) == build_parser().parse_args(argv)


def test_a_command_still_lists_the_others_and_refuses_their_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from computewatch.cli.main import build_parser

    with pytest.raises(SystemExit) as e:
        build_parser("run").parse_args(["show", "latest"])  # not main()'s way, but refused
    assert e.value.code == 2
    assert "unrecognized arguments: latest" in capsys.readouterr().err
