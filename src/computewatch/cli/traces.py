"""``computewatch import``: store a GPU log written by another tool (nvidia-smi's CSV, dmon and
pmon logs, the long CSV/Parquet format) as a run, so ``show``, ``report`` and the accounting
read it.

The flags live here; the command is :mod:`computewatch.cli.traces_run`, loaded only when it
runs. A file that cannot be read gets one line naming the file and the line, exit 1.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_traces_parser"]

TRACE_FORMATS = ("nvidia-smi", "csv", "parquet")


def _columns(text: str) -> list[str]:
    cols = [c.strip() for c in text.split(",") if c.strip()]
    if not cols:
        raise argparse.ArgumentTypeError("expected the --query-gpu fields, comma-separated")
    return cols


def add_trace_input_arguments(p: argparse.ArgumentParser, *, name_help: str) -> None:
    """The flags that say how to read a trace file, shared by ``import`` and ``detect``."""
    p.add_argument(
        "--format",
        choices=TRACE_FORMATS,
        help="nvidia-smi: a log of nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits], "
        "or of nvidia-smi dmon -o DT or pmon -o DT (UTF-8 or UTF-16 with its byte-order mark); "
        "csv/parquet: the long format (job, timestamp, gpu, metric columns; docs/import.md). "
        "Default: parquet for .parquet files, csv when the header has a 'gpu' column, else "
        "nvidia-smi",
    )
    p.add_argument("--name", metavar="N", help=name_help)
    p.add_argument(
        "--columns",
        type=_columns,
        metavar="FIELDS",
        help="for an nvidia-smi log without a header (noheader): the --query-gpu fields, e.g. "
        "timestamp,index,utilization.gpu,memory.used,power.draw",
    )
    p.add_argument(
        "--utc",
        action="store_true",
        help="nvidia-smi timestamps are UTC (default: local time of this machine, as "
        "nvidia-smi writes them)",
    )
    p.add_argument(
        "--allow-gaps",
        action="store_true",
        help="accept gaps in the samples (longer than ten times the median interval, at least "
        "60 s): nothing is integrated across them (default: a gap is an error naming its line)",
    )


def add_traces_parser(sub: Any) -> None:
    """Add ``import`` to the CLI's subcommands (``sub``: the ``add_subparsers`` object)."""
    p = sub.add_parser(
        "import",
        help="store a GPU log written by nvidia-smi (or the long CSV/Parquet format) as a run",
        description="Read a GPU log and store each job in it as a run (mode 'import'): its "
        "series, summary, accounting (GPU energy integrated from the polled power, said so) "
        "and report, as for a monitored run. Formats: docs/import.md.",
    )
    p.add_argument("file", metavar="FILE", help="the log file")
    add_trace_input_arguments(
        p,
        name_help="the run's name (several jobs in the file: N/JOB); default: the job's name, "
        "else the file's stem",
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="import a log imported before (the same bytes, under any name) again, in place of "
        "the runs it made (default: refused, naming them)",
    )
    p.add_argument("--json", action="store_true", help="JSON output: the runs written")
    p.add_argument(
        "--db",
        metavar="PATH",
        help="database file (default: $COMPUTEWATCH_HOME/computewatch.db, else "
        "~/.local/share/computewatch/computewatch.db)",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="configuration file for the accounting (default: $COMPUTEWATCH_CONFIG or "
        "~/.config/computewatch/config.toml)",
    )
    p.add_argument("--region", metavar="CODE", help="where the electricity came from (carbon)")
