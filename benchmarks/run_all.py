"""Run every benchmark and write ``benchmarks/RESULTS.md``.

python benchmarks/run_all.py           # about 30 minutes on 2 cores
python benchmarks/run_all.py --only server,ledger   # some of them
python benchmarks/run_all.py --quick   # about 2 minutes: fewer repetitions, smaller data
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import bench_agent
import bench_agent_detection
import bench_carbon
import bench_codecarbon
import bench_dashboard
import bench_detect
import bench_diagnosis
import bench_end
import bench_gpu
import bench_integrations
import bench_ledger
import bench_loadgen
import bench_observability
import bench_overhead
import bench_prices
import bench_report
import bench_reverse_proxy
import bench_sampler
import bench_server
import bench_server_load
import bench_signing
import bench_step
import bench_store
import bench_systemd_scope
import bench_trackers
import bench_upload
from common import HERE, OthersMeter, Section, machine_markdown, table

BENCHMARKS: tuple[tuple[str, Callable[[bool], Section]], ...] = (
    ("overhead", bench_overhead.run),
    ("sampler", bench_sampler.run),
    ("step", bench_step.run),
    ("store", bench_store.run),
    ("gpu", bench_gpu.run),
    ("integrations", bench_integrations.run),
    ("agent", bench_agent.run),
    ("report", bench_report.run),
    ("codecarbon", bench_codecarbon.run),
    ("end", bench_end.run),
    ("server", bench_server.run),
    ("server-load", bench_server_load.run),
    ("dashboard", bench_dashboard.run),
    ("upload", bench_upload.run),
    ("reverse-proxy", bench_reverse_proxy.run),
    ("ledger", bench_ledger.run),
    ("signing", bench_signing.run),
    ("trackers", bench_trackers.run),
    ("loadgen", bench_loadgen.run),
    ("carbon", bench_carbon.run),
    ("observability", bench_observability.run),
    ("detect", bench_detect.run),
    ("agent-detection", bench_agent_detection.run),
    ("diagnosis", bench_diagnosis.run),
    ("prices", bench_prices.run),
    ("systemd-scope", bench_systemd_scope.run),
)


def main() -> int:
    ap = argparse.ArgumentParser(description="Run every benchmark; write benchmarks/RESULTS.md.")
    ap.add_argument("--quick", action="store_true", help="about 2 minutes instead of ~8")
    ap.add_argument("-o", "--output", help="Markdown file (default RESULTS.md; with --only, "
                    "out/RESULTS-partial.md)")  # fmt: skip
    ap.add_argument("--only", metavar="NAMES", help="comma-separated benchmarks to run: "
                    + ",".join(n for n, _ in BENCHMARKS))  # fmt: skip
    a = ap.parse_args()
    chosen = BENCHMARKS
    if a.only:
        wanted = [n.strip() for n in a.only.split(",") if n.strip()]
        unknown = sorted(set(wanted) - {n for n, _ in BENCHMARKS})
        if unknown:
            ap.error(f"unknown benchmarks: {', '.join(unknown)}")
        chosen = tuple(b for b in BENCHMARKS if b[0] in wanted)
    if a.output is None:
        a.output = str(HERE / ("out/RESULTS-partial.md" if a.only else "RESULTS.md"))
        Path(a.output).parent.mkdir(parents=True, exist_ok=True)
    machine = machine_markdown()  # before the load we add ourselves
    t0 = time.monotonic()
    sections: list[Section] = []
    for name, fn in chosen:
        print(f"[{time.monotonic() - t0:6.1f} s] {name} ...", file=sys.stderr, flush=True)
        s0 = time.monotonic()
        meter = OthersMeter()
        section = fn(a.quick)
        os.chdir(HERE)  # a benchmark that changed directory (into a removed temp dir) ends here
        section.seconds = time.monotonic() - s0
        section.others_share = meter.share()
        sections.append(section)
    total = time.monotonic() - t0
    mode = "`--quick`" if a.quick else "full"
    targets = [
        [s.title.split(". ", 1)[-1], what, measured, v]
        for s in sections
        for what, measured, v in s.targets
    ]
    lines = [
        "# computewatch benchmarks",
        "",
        f"Written by `python benchmarks/run_all.py{' --quick' if a.quick else ''}` ({mode} "
        f"run, {total:.0f} s). See `benchmarks/README.md` for what each benchmark does; "
        "rerun on your machine before comparing figures.",
        "",
        *machine,
        "",
        "## Targets",
        "",
        *table(("benchmark", "target", "measured", "verdict"), targets),
        "",
    ]
    text = "\n".join(lines) + "\n" + "\n".join(s.markdown() for s in sections)
    text += "\n".join(
        [
            "",
            "## Run time and noise",
            "",
            "*others' CPU*: CPU time used by processes other than the benchmarks (host busy "
            "time from /proc/stat minus ours), as a share of all cores, while each ran. Above "
            "a few percent, wall-clock figures are disturbed; CPU-time figures much less.",
            "",
            *table(
                ("benchmark", "seconds", "others' CPU"),
                [[s.title, f"{s.seconds:.0f}", f"{s.others_share:.0%}"] for s in sections],
            ),
        ]
    )
    with open(a.output, "w") as f:
        f.write(text + "\n")
    print(f"[{total:6.1f} s] wrote {a.output}", file=sys.stderr)
    for row in targets:
        print(f"  {row[1]}: {row[2]} — {row[3]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
