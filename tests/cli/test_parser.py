"""The parser's copies of the library's choices, and what ``computewatch --version`` imports."""

from __future__ import annotations

import json
import subprocess
import sys

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
