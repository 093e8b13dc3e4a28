"""What ``computewatch run --quiet -- true`` loads and starts: the fixed cost of every run is
mostly the modules it imports and the processes it starts (benchmarks/bench_end.py measures it
from outside), so a run of a command that does nothing must not load or start what it does not
use. A structural check, not a timed one: the modules and processes are listed, and timing
cannot flake on a list."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

from computewatch.sources.environment import _platform_text
from computewatch.store import Store

# Run in a child: main() as the console script calls it, then the command line of each process
# it started (the audit events of subprocess and os), one a line, and last its status and the
# loaded modules (written without json, which is on the list of one test).
RUN = """
import sys
spawned = []
def spawns(event, args):
    if event in ("subprocess.Popen", "os.posix_spawn", "os.exec"):
        argv = args[1]
        spawned.append([argv] if isinstance(argv, (str, bytes)) else list(argv))
    elif event == "os.system":
        spawned.append([args[0]])
sys.addaudithook(spawns)
from computewatch.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as e:  # argparse's own exit
    code = e.code
for argv in spawned:
    print("SPAWNED", *(a.decode() if isinstance(a, bytes) else str(a) for a in argv))
print("MODULES", code, *sorted(sys.modules))
"""

NOT_FOR_A_QUIET_RUN = {
    # other commands' code
    "computewatch.cli.commands",
    "computewatch.analysis.compare",
    "computewatch.analysis.export",
    "computewatch.analysis.retention",
    "computewatch.sampling.top",
    "computewatch.tracking",
    # the views: --quiet draws nothing and prints no summary
    "computewatch.views.live",
    "computewatch.views.summary_text",
    "computewatch.views.summary_rows",
    "computewatch.views.grid",
    # what only a flag or a configuration asks for
    "computewatch.lineage.compute",  # --model, [governance]
    "computewatch.accounting.forecast",  # --total-steps
    "computewatch.carbon.providers",  # [carbon] provider: hourly intensity
    "computewatch.carbon.cache",
    "computewatch.carbon.http",
    "computewatch.carbon.timed",
    "computewatch.profiling.wrap",  # --cprofile, --nsys
    "computewatch.metrics",  # --prometheus, alerts
    "computewatch.exporters",  # --otlp, --emf
    "computewatch.upload",  # a server configured
    "computewatch.fleet",
    "computewatch.server",
    "computewatch.serverdb",
    "computewatch.ledger",
    "computewatch.governance",
    "difflib",  # a region's suggestions, on a typo only
    "tomllib",  # a configuration file (there is none here)
    "importlib.resources",  # the package's data files are read as files
    "zipfile",
    # optional extras and heavy libraries, installed or not
    "numpy",
    "pydantic",
    "sqlalchemy",
    "orjson",
    "torch",
    "rich",
    "yaml",
    "pyarrow",
    "fastapi",
    "prometheus_client",
    "opentelemetry",
    # the standard library's costly ones, for what a run has no use for
    "hashlib",  # OpenSSL (~10 ms): the hash of a git diff only, and there is no tree here
    "_hashlib",
    "socket",  # the host's name is os.uname()'s
    "uuid",  # a run's id is 6 random bytes; uuid loads platform (~4 ms)
    "platform",
}

GIT_CALLS = [  # the tree's state, started side by side with the command (GitProbe)
    ["git", "rev-parse", "--show-toplevel", "HEAD", "--abbrev-ref", "HEAD"],
    ["git", "diff", "HEAD", "--no-color", "--no-ext-diff"],
    ["git", "status", "--porcelain", "--untracked-files=normal"],
]


class Child(NamedTuple):
    """What the child said: main()'s status, the modules loaded, the processes started."""

    code: int
    modules: set[str]
    spawned: list[list[str]]


def _loaded(cw: Any, tmp_path: Path, *argv: str) -> Child:
    env = cw.env(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"))
    for k in ("COMPUTEWATCH_CONFIG", "COMPUTEWATCH_SERVER"):  # no configuration, no server
        env.pop(k, None)
    r = subprocess.run(
        [sys.executable, "-c", RUN, *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    _, code, *modules = lines[-1].split()
    spawned = [ln.split()[1:] for ln in lines if ln.startswith("SPAWNED ")]
    return Child(int(code), set(modules), spawned)


def _loaded_by_msgspec() -> set[str]:
    """What ``import msgspec`` loads by itself (its C core keeps ``uuid.UUID`` and
    ``decimal.Decimal`` at hand, and uuid loads platform): the price of the record classes'
    base, not something a run asks for, so not held against the run."""
    r = subprocess.run(
        [sys.executable, "-c", "import sys, msgspec; print(*sys.modules)"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return set(r.stdout.split())


def _under(loaded: set[str], names: set[str]) -> list[str]:
    """The modules of ``loaded`` that are one of ``names`` or inside one of them."""
    return sorted(m for m in loaded if m in names or any(m.startswith(n + ".") for n in names))


def test_a_quiet_run_of_true_loads_only_what_a_run_needs(cw: Any, tmp_path: Path) -> None:
    code, loaded, spawned = _loaded(cw, tmp_path, "run", "--quiet", "--", "true")
    assert code == 0
    assert _under(loaded - _loaded_by_msgspec(), NOT_FOR_A_QUIET_RUN) == []
    # the command and git's three calls, nothing else: no `uname -p` for the platform's text,
    # no second `git rev-parse` after the command outside a work tree (tmp_path is not one)
    assert sorted(spawned) == sorted([["true"], *GIT_CALLS]), spawned
    # what it does need is still done: the run is stored, accounted and diagnosed
    assert {"computewatch.accounting.engine", "computewatch.diagnosis.engine"} <= loaded
    summary = cw.show()
    assert summary["status"] == "completed" and summary["exit_code"] == 0
    assert "energy" in summary and "carbon" in summary and "diagnosis" in summary


def test_a_run_that_prints_its_summary_loads_the_view(cw: Any, tmp_path: Path) -> None:
    """The other side of the list: what is left out of a quiet run loads when it is used."""
    code, loaded, _ = _loaded(cw, tmp_path, "run", "--model", "m", "--", "true")
    assert code == 0
    assert {"computewatch.views.summary_text", "computewatch.lineage.compute"} <= loaded
    with Store.open(cw.db) as store:
        assert store.meta(store.find_run("last").key)["governance"]["model"] == "m"


def test_version_builds_no_parser(cw: Any, tmp_path: Path) -> None:
    """``computewatch --version`` prints what argparse would, loading no command's parser."""
    code, loaded, _ = _loaded(cw, tmp_path, "--version")
    assert code == 0
    ours = {m for m in loaded if m.startswith("computewatch")}
    assert ours <= {
        "computewatch",
        "computewatch._version",
        "computewatch.cli",
        "computewatch.cli.main",
        "computewatch.cli.args",
        "computewatch.errors",
        "computewatch.escape",
    }, sorted(ours)
    assert not {"sqlite3", "pathlib", "json", "dataclasses"} & loaded


def test_checking_an_export_file_loads_no_server_database(cw: Any, tmp_path: Path) -> None:
    """``ledger verify FILE`` checks the file alone: the server database's side of the ledger
    (SQLAlchemy and the server's tables, ~0.3 s of the command's start) is not loaded."""
    from tests.ledger.test_transparency_log import _export_file, _head, _lines  # its exports

    lines = _lines(20)
    path = _export_file(tmp_path / "log.jsonl", lines, [_head(lines, 20)])
    code, loaded, _ = _loaded(cw, tmp_path, "ledger", "verify", str(path))
    assert code == 0
    assert _under(loaded, {"sqlalchemy", "computewatch.serverdb"}) == []
    assert "computewatch.ledger.audit" in loaded


def test_the_recorded_platform_is_pythons_without_a_process() -> None:
    """The record's platform reads as ``platform.platform()`` (which runs ``uname -p`` on
    Linux), but where ``uname -p`` names a processor other than the machine."""
    processor = platform.processor()  # `uname -p` on Linux: "unknown" (blank here) or more
    if sys.platform != "linux" or processor in ("", platform.machine()):
        assert _platform_text() == platform.platform()
    else:  # a patched uname (Gentoo) names the CPU: left out
        assert _platform_text().startswith(f"Linux-{os.uname().release}-{platform.machine()}-")


FREEZE = """
import gc, sys
from computewatch.cli import main
main(["--version"])
after_a_list = gc.get_freeze_count()
sys.argv = ["computewatch", "--version"]
main()
print("FROZEN", after_a_list, gc.get_freeze_count())
"""


def test_the_process_command_line_leaves_its_objects_to_the_exit() -> None:
    """main() run on the process's own command line (the console script, ``python -m``)
    freezes the collector's objects as it returns, so that the interpreter's shutdown does not
    collect them one by one; called with a list (a program, a test) it leaves them alone."""
    out = subprocess.run(
        [sys.executable, "-c", FREEZE], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    _, with_list, with_argv = out.splitlines()[-1].split()
    assert int(with_list) == 0
    assert int(with_argv) > 0
