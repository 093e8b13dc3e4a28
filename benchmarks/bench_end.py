"""The end of a run and the fixed cost of a run, before and after.

1. Fixed cost, as a user measures it: ``true``, ``computewatch --version``, ``computewatch run
   --quiet -- true`` and ``computewatch run -- true`` as whole processes, timed from outside
   (wall clock around each child; its CPU from ``RUSAGE_CHILDREN``). The installed
   ``computewatch`` console script (pip's wrapper) of this interpreter, bytecode compiled as
   ``pip install`` leaves it, ``HOME`` and the XDG directories in a temporary directory (no
   configuration, a new store), the current directory a small git repository (a project, as
   a user runs in one). Each repetition runs ``true`` then every command, for each tree in
   alternating order; a command's cost above ``true`` is the median of its differences with
   the ``true`` of its own repetition. *Before* is the tree at :data:`FIXED_COST_BEFORE`. With
   the figures: the load average, the CPU time other processes took meanwhile, a CPU
   calibration (``sum(range(10**6))``, best of 5, in a child, before and after) and which
   optional extras this interpreter has installed.
2. The end of a 24-hour, 8-GPU run at 1 s (the report benchmark's run: 86,400 ticks × 150
   series, a step a second): written through ``Store.write_batch`` while ``RunAggregates`` is
   fed one tick at a time as the sampler's 1 s flushes feed it (that cost is reported per
   tick); then ``finish_run`` (last flush, final row, summary, accounting, diagnosis, stored
   summary) in a fresh child process for each tree, the run reset in between. *Before* is the
   package at ``common.BASELINE_REF`` (``git archive`` into ``benchmarks/out/``).
3. The sampler's CPU per tick with 10 processes (``bench_sampler.measure_tick``) in a child
   process for each tree.

``--quick`` uses a 2-hour run and fewer repetitions; ``--fixed-cost-only`` measures part 1
alone.

    python benchmarks/bench_end.py [--quick] [--fixed-cost-only]
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from bench_report import GPUS, build_run
from common import (
    BASELINE_REF,
    HERE,
    OthersMeter,
    Section,
    baseline_src,
    child_env,
    cli_main,
    compile_tree,
    computewatch_cli,
    median,
    spread,
)

from computewatch.store import RUNNING, Store

TARGET_END_SECONDS = 1.0
TARGET_RUN_TRUE_SECONDS = 0.15  # `run --quiet -- true` above bare `true`
TARGET_VERSION_SECONDS = 0.1

FIXED_COST_BEFORE = "b00ec19"
"""The tree before a run stopped loading what it does not use (issue 28, item 13): the
*before* of the fixed cost."""

# Runs finish_run on a stored run in a fresh interpreter, with the package the environment
# gives (before or after): argv = db path, run id, ended_at, aggregates pickle or "-".
_FINISH = r"""
import json, pickle, sys, time
from computewatch.store import Store
import computewatch.sampling.lifecycle as lc
from computewatch.sampling.sampler import Sampler
from computewatch.accounting.engine import AccountingOptions
import computewatch.diagnosis.engine  # loaded before the clock starts, in both trees

path, rid, ended, agg_path = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
parts = {}

def timed(name, label):
    fn = getattr(lc, name, None)
    if fn is None:
        return
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            parts[label] = parts.get(label, 0.0) + time.perf_counter() - t
    setattr(lc, name, wrapper)

timed("build_summary", "summary")
timed("summary_of", "summary")
timed("accounted", "accounting")
timed("diagnosed", "diagnosis")
store = Store.open(path)
run = store.find_run(rid)
sampler = Sampler(store, run.key, [], interval=1.0)
if agg_path != "-":
    with open(agg_path, "rb") as f:
        sampler.aggregates = pickle.load(f)
t0 = time.perf_counter()
out = lc.finish_run(store, sampler, run.key, "completed", 0, [], None, ended_at=ended,
                    accounting=AccountingOptions())
parts["total"] = time.perf_counter() - t0
d = out.summary["diagnosis"]
parts["findings"] = sorted(f["id"] for f in d.get("findings", []))
parts["error"] = d.get("error")
if agg_path != "-":  # the same summary from the samples: show of a run without a stored one
    from msgspec.structs import replace
    from computewatch.analysis.summary import build_summary
    t0 = time.perf_counter()
    rebuilt = build_summary(store, replace(store.run_by_key(run.key), summary=None))
    parts["rebuild"] = time.perf_counter() - t0
    keys = ("cpu", "memory", "disk", "network", "gpus", "steps", "samples")
    parts["same"] = all(rebuilt[k] == out.summary[k] for k in keys)
print("FINISH " + json.dumps(parts))
"""

_TICK = r"""
import json, sys, tempfile
from pathlib import Path
import bench_sampler
with tempfile.TemporaryDirectory() as tmp:
    n, rounds, paced = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    r = bench_sampler.measure_tick(10, n, rounds, Path(tmp), paced)
print("TICK " + json.dumps(r))
"""


def _last_json(stdout: str, tag: str) -> dict[str, Any]:
    for line in reversed(stdout.splitlines()):
        if line.startswith(tag + " "):
            parsed: dict[str, Any] = json.loads(line[len(tag) + 1 :])
            return parsed
    raise RuntimeError(f"no {tag} line in the child's output: {stdout[-400:]!r}")


# -- 1. fixed cost ---------------------------------------------------------------------------


def _time_child(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, the child and its own children)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
    )
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


NO_CACHE = "run -- true, compiling every module"
FIXED_COMMANDS = ("--version", "run --quiet -- true", "run -- true", NO_CACHE)

# The extras' modules (pyproject.toml's optional dependencies but the ML frameworks'
# callbacks), and the heavy libraries a machine with them usually has.
EXTRA_MODULES = {
    "parquet": "pyarrow", "nvidia": "pynvml", "amd": "amdsmi", "agent": "prometheus_client",
    "server": "fastapi", "governance": "sklearn", "trackers": "mlflow", "bench": "mlperf_loadgen",
    "tpu": "tpu_info", "otel": "opentelemetry.sdk", "profile": "py-spy",
}  # fmt: skip
HEAVY_MODULES = ("numpy", "torch", "pydantic", "sqlalchemy", "orjson")


def installed_extras() -> tuple[list[str], list[str]]:
    """The extras whose module this interpreter finds (``py-spy``: its program), and those
    it does not."""
    found, missing = [], []
    for extra, module in EXTRA_MODULES.items():
        if module == "py-spy":
            ok = (Path(sys.executable).parent / "py-spy").exists() or shutil.which("py-spy")
        else:
            try:
                ok = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):
                ok = False
        (found if ok else missing).append(extra)
    return found, missing


def calibration_ms() -> float:
    """Milliseconds for ``sum(range(10**6))`` (best of 5, a fresh child): how fast this
    machine runs Python now, to read the start-up figures against."""
    out = subprocess.run(
        [sys.executable, "-c",
         "import timeit; print(min(timeit.repeat('sum(range(10**6))', number=1, repeat=5)))"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return float(out.strip()) * 1000.0


def user_env(home: Path, pythonpath: Path | None = None) -> dict[str, str]:
    """The environment of a user's shell with a new home: ``HOME`` and the XDG directories
    under ``home`` (no configuration file, a store created by the first run), none of our
    variables, bytecode caches read and written."""
    env = child_env(pythonpath)
    for k in list(env):
        if k.startswith("COMPUTEWATCH_"):
            del env[k]
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
    )
    return env


def _project(root: Path) -> tuple[Path, str]:
    """The directory the commands run in: a git repository with one commit, as a user's
    project is (the run records the tree's state); a plain directory where git is missing."""
    project = root / "project"
    project.mkdir()
    (project / "train.py").write_text("print('hello')\n")
    git = shutil.which("git")
    if git is None:
        return project, "a plain directory (git is not installed)"
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.org",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.org"}  # fmt: skip
    for args in (["init", "-q"], ["add", "train.py"], ["commit", "-q", "-m", "x"]):
        subprocess.run([git, *args], cwd=project, env=env, check=True, capture_output=True)
    return project, "a git repository of one commit"


def fixed_cost(
    trees: dict[str, dict[str, str]], pairs: int, empty: Path, cwd: Path
) -> dict[tuple[str, str], Any]:
    """Per (tree, command): wall and CPU seconds of each repetition, and the wall seconds of
    the ``true`` run just before it. ``NO_CACHE``: ``run -- true`` without bytecode caches
    (looked for under ``empty``, none written), as a child of an environment with
    ``PYTHONDONTWRITEBYTECODE`` set and no ``__pycache__`` in its tree starts."""
    cw = computewatch_cli()
    commands = {
        "--version": [*cw, "--version"],
        "run --quiet -- true": [*cw, "run", "--quiet", "--", "true"],
        "run -- true": [*cw, "run", "--", "true"],
        NO_CACHE: [*cw, "run", "--", "true"],
    }
    envs = {
        (tree, name): (
            {**env, "PYTHONPYCACHEPREFIX": str(empty), "PYTHONDONTWRITEBYTECODE": "1"}
            if name == NO_CACHE
            else env
        )
        for tree, env in trees.items()
        for name in commands
    }
    out: dict[tuple[str, str], Any] = {}
    for tree, env in trees.items():  # warm-up: the page cache, the store's first creation
        _time_child(["true"], env, cwd)
        out[(tree, "true")] = ([], [], [])
        for name, cmd in commands.items():
            _time_child(cmd, envs[(tree, name)], cwd)
            out[(tree, name)] = ([], [], [])
    for i in range(pairs):
        order = list(trees) if i % 2 == 0 else list(reversed(trees))
        for tree in order:
            for name, cmd in commands.items():
                bare, bare_cpu = _time_child(["true"], trees[tree], cwd)
                wall, cpu = _time_child(cmd, envs[(tree, name)], cwd)
                out[(tree, "true")][0].append(bare)
                out[(tree, "true")][1].append(bare_cpu)
                out[(tree, "true")][2].append(bare)
                out[(tree, name)][0].append(wall)
                out[(tree, name)][1].append(cpu)
                out[(tree, name)][2].append(bare)
    return out


def _above_true(fixed: dict[tuple[str, str], Any], tree: str, name: str) -> float | None:
    """The median of ``name``'s wall seconds above the ``true`` run just before each."""
    if (tree, name) not in fixed:
        return None
    walls, _, bares = fixed[(tree, name)]
    return median([w - b for w, b in zip(walls, bares, strict=True)])


def measure_fixed_cost(quick: bool, root: Path) -> dict[str, Any]:
    """Part 1 in ``root``: the trees, the project, the machine's state around the timing."""
    pairs = 5 if quick else 15
    base = baseline_src(FIXED_COST_BEFORE)
    trees: dict[str, dict[str, str]] = {}
    if isinstance(base, Path):
        trees["before"] = user_env(root / "home-before", base)
    trees["after"] = user_env(root / "home-after")
    (root / "no-pycache").mkdir()
    project, project_kind = _project(root)
    found, missing = installed_extras()
    heavy = [m for m in HEAVY_MODULES if importlib.util.find_spec(m) is not None]
    load0, cal0, meter = os.getloadavg(), calibration_ms(), OthersMeter()
    fixed = fixed_cost(trees, pairs, root / "no-pycache", project)
    others, load1, cal1 = meter.share(), os.getloadavg(), calibration_ms()
    return {
        "fixed": fixed, "trees": list(trees), "base": base, "pairs": pairs,
        "project": project_kind, "extras": (found, missing), "heavy": heavy,
        "load": (load0, load1), "calibration": (cal0, cal1), "others": others,
    }  # fmt: skip


def fixed_cost_section(s: Section, m: dict[str, Any]) -> None:
    """Part 1's text, table and targets."""
    fixed, trees, base = m["fixed"], m["trees"], m["base"]
    found, missing = m["extras"]
    (l0, _, _), (l1, _, _) = m["load"]
    cal0, cal1 = m["calibration"]
    s.add(
        f"**Fixed cost of a run, as a user measures it.** Whole processes timed from outside: "
        f"the installed `computewatch` console script, bytecode compiled, `HOME` and the XDG "
        f"directories new (no configuration), run in {m['project']}. {m['pairs']} repetitions "
        "after a warm-up, each running `true` and then the command, the trees alternating; "
        "*above `true`* is the median of the differences within a repetition. Wall seconds "
        "(median, min–max) and CPU seconds of the process and its children (median). "
        f"*Before*: the package at `{FIXED_COST_BEFORE}`; *after*: this tree. `run -- true` "
        "prints the summary, `--quiet` does not. The last rows start without bytecode "
        "caches, compiling every module they import (`PYTHONDONTWRITEBYTECODE` set and a "
        "tree never compiled).",
        "",
        f"Installed extras: {', '.join(found) or 'none'}"
        + (f" (not: {', '.join(missing)})" if missing else " (all of them)")
        + (f"; also {', '.join(m['heavy'])}" if m["heavy"] else "")
        + f". Load average {l0:.2f} before, {l1:.2f} after; other processes used "
        f"{m['others']:.0%} of the machine's CPU meanwhile; `sum(range(10**6))` took "
        f"{cal0:.1f} ms before and {cal1:.1f} ms after (best of 5): the same figures on "
        "another day, or another machine, scale with it.",
        "",
    )
    if isinstance(base, str):
        s.add(f"**{base}: only *after* is measured.**", "")
    rows = []
    for name in ("true", *FIXED_COMMANDS):
        for tree in trees:
            walls, cpus, _ = fixed[(tree, name)]
            above = _above_true(fixed, tree, name)
            rows.append(
                [_label(name), tree, median(walls), spread(walls),
                 "–" if name == "true" else above, median(cpus)]
            )  # fmt: skip
    s.table(("command", "tree", "wall s", "min–max", "above `true` s", "CPU s"), rows)
    quiet = _above_true(fixed, "after", "run --quiet -- true")
    assert quiet is not None
    s.target(
        f"`computewatch run --quiet -- true` ≤ {TARGET_RUN_TRUE_SECONDS} s above bare `true`",
        _against(quiet, TARGET_RUN_TRUE_SECONDS, "before",
                 _above_true(fixed, "before", "run --quiet -- true")),
        quiet <= TARGET_RUN_TRUE_SECONDS,
    )  # fmt: skip
    version = _above_true(fixed, "after", "--version")
    assert version is not None
    s.target(
        f"`computewatch --version` ≤ {TARGET_VERSION_SECONDS} s",
        _against(version, TARGET_VERSION_SECONDS, "before",
                 _above_true(fixed, "before", "--version")),
        version <= TARGET_VERSION_SECONDS,
    )  # fmt: skip


# -- 2. the end of a long run ----------------------------------------------------------------


def _reset(path: Path, rid: str) -> None:
    """The run as the supervisor leaves it just before ``finish_run``."""
    with Store.open(path) as store:
        key = store.find_run(rid).key
        store.update_run(key, status=RUNNING, exit_code=None, ended_at=None, summary=None)


def _as_schema_2(path: Path) -> None:
    """The store as the baseline's schema (2) has it: migration 3 only added ``run_meta`` and
    ``uploads``, which the end of a run does not read, so the baseline can finish the same
    run."""
    with closing(sqlite3.connect(path)) as c:
        c.executescript("DROP TABLE IF EXISTS run_meta; DROP TABLE IF EXISTS uploads;")
        c.execute("PRAGMA user_version=2")


def finish_in_child(
    path: Path,
    day: dict[str, Any],
    env: dict[str, str],
    agg_file: Path | None,
    *,
    baseline: bool = False,
) -> dict[str, Any]:
    _reset(path, day["id"])
    if baseline:
        _as_schema_2(path)
    proc = subprocess.run(
        [sys.executable, "-c", _FINISH, str(path), day["id"], repr(day["ended"]),
         str(agg_file) if agg_file else "-"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"finish_run failed: {proc.stderr[-800:]}")
    return _last_json(proc.stdout, "FINISH")


# -- 3. tick cost ----------------------------------------------------------------------------


def tick_in_child(env: dict[str, str], ticks: int, rounds: int, paced: float) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", _TICK, str(ticks), str(rounds), str(paced)],
        env=env, cwd=HERE, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"tick measurement failed: {proc.stderr[-800:]}")
    return _last_json(proc.stdout, "TICK")


# -- the section -----------------------------------------------------------------------------


def _label(name: str) -> str:
    if name == "true":
        return "`true`"
    if name == NO_CACHE:
        return "`computewatch run -- true`, compiling every module (no bytecode cache)"
    return f"`computewatch {name}`"


def _against(value: float, target: float, label: str, other: float | None) -> str:
    """A measured cell: the value, by how much it misses the target, the other tree's value."""
    out = f"{value:.3f} s"
    if value > target:
        out += f", {value - target:.3f} s over"
    if other is not None:
        out += f" ({label}: {other:.3f} s)"
    return out


def run(quick: bool, *, fixed_only: bool = False) -> Section:
    s = Section("8. The end of a run and the fixed cost of a run: before and after")
    hours = 2 if quick else 24
    base = baseline_src()
    compile_tree(HERE.parent / "src")
    with tempfile.TemporaryDirectory(prefix="cw-bench-end-") as tmp:
        root = Path(tmp)
        fixed = measure_fixed_cost(quick, root)
        fixed_cost_section(s, fixed)  # 1. fixed cost
        if fixed_only:
            return s
        after_env = child_env(COMPUTEWATCH_HOME=str(root / "home-after"))
        trees: dict[str, dict[str, str]] = {"after": after_env}
        if isinstance(base, Path):
            trees = {
                "before": child_env(base, COMPUTEWATCH_HOME=str(root / "home-before")),
                "after": after_env,
            }
        db = root / "day.db"
        day = build_run(db, hours * 3600, finish=False)
        agg_file = root / "aggregates.pickle"
        with open(agg_file, "wb") as f:
            pickle.dump(day.pop("aggregates"), f)
        ends: dict[str, dict[str, Any]] = {}
        if "before" in trees:
            ends["before"] = finish_in_child(db, day, trees["before"], None, baseline=True)
        ends["after"] = finish_in_child(db, day, after_env, agg_file)
        tick_runs = 1 if quick else 2
        ticks: dict[str, list[dict[str, Any]]] = {t: [] for t in trees}
        for _ in range(tick_runs):
            for tree, env in trees.items():
                ticks[tree].append(tick_in_child(env, 100 if quick else 300, 3, 2.0))

    s.add(
        f"For the end of a run and the sampler's tick, *before* is the package at commit "
        f"`{BASELINE_REF}` and *after* this tree, both compiled to bytecode, measured in this "
        "same run, alternating.",
        "",
    )
    if isinstance(base, str):
        s.add(f"**{base}: only *after* is measured.**", "")

    # 2. the end of a long run
    pts = day["points"]
    s.add(
        f"**The end of a {hours}-hour, {GPUS}-GPU run at 1 s** ({hours * 3600:,} ticks × "
        f"{day['series']} series = {pts:,} points, a step a second, written in "
        f"{day['write_s']:.0f} s). `finish_run` in a fresh process per tree (modules loaded "
        "before the clock starts); its parts timed inside it. *after* reads none of the "
        "samples: the sampler's aggregates, kept as the run went, are handed to it. Keeping "
        f"them cost {day['agg_us_per_tick']:.0f} µs of CPU per tick of {day['series']} "
        "readings (fed a tick at a time).",
        "",
    )
    if quick:
        s.add(f"*Quick mode: a {hours}-hour run, not 24 hours.*", "")
    s.table(
        ("tree", "summary s", "accounting s", "diagnosis s", "end of run s", "findings"),
        [
            [
                t,
                e.get("summary"),
                e.get("accounting"),
                e.get("diagnosis"),
                e["total"],
                ", ".join(e["findings"]) or "–",
            ]
            for t, e in ends.items()
        ],
    )
    after = ends["after"]
    s.add(
        f"The same summary rebuilt from the stored samples (what `show` does for a run without "
        f"a stored summary, or after a crash) takes {after['rebuild']:.1f} s and "
        + ("equals" if after["same"] else "**differs from**")
        + " the one kept while sampling.",
        "",
    )
    label = f"end of a {hours}-hour {GPUS}-GPU run"
    s.target(
        f"{label} ≤ {TARGET_END_SECONDS:g} s",
        _against(after["total"], TARGET_END_SECONDS, "before", ends.get("before", {}).get("total")),
        after["total"] <= TARGET_END_SECONDS,
    )

    # 3. tick cost
    s.add(
        "**Sampler CPU per tick**, 10 processes in the tree (`bench_sampler.measure_tick` in a "
        f"child per tree, {tick_runs} alternating runs, median): back to back with one flush "
        "per 10 ticks, and paced by the sampler's own loop at 0.1 s.",
        "",
    )
    trows = []
    for tree, runs in ticks.items():
        trows.append(
            [tree, median([r["total"] for r in runs]), median([r["flush"] for r in runs]),
             median([r["flush_one"] for r in runs]), median([r["paced_total"] for r in runs])]
        )  # fmt: skip
    s.table(
        ("tree", "tick + flush µs", "flush amortised µs", "one-tick flush µs", "paced µs"), trows
    )
    if "before" in ticks:
        b = median([r["total"] for r in ticks["before"]])
        a = median([r["total"] for r in ticks["after"]])
        s.target(
            "sampler tick + flush at 10 processes no worse than before (within 10 %)",
            f"{a:.0f} µs (before {b:.0f} µs, {a / b - 1:+.0%})",
            a <= b * 1.10,
        )
    return s


if __name__ == "__main__":
    if "--fixed-cost-only" in sys.argv:  # part 1 alone: a few minutes instead of ~10
        sys.argv.remove("--fixed-cost-only")
        cli_main(lambda quick: run(quick, fixed_only=True), __doc__)
    else:
        cli_main(run, __doc__)
