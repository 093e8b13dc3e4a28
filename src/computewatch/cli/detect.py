"""``computewatch detect``: classify jobs as training, inference or other from their GPU
telemetry alone (nvidia-smi logs, the long CSV/Parquet format, stored runs), with
``p_training``, the evidence and, for training, a hardware-based FLOP estimate.

The flags live here; the command is :mod:`computewatch.cli.detect_run`, loaded only when it
runs. docs/detection.md says how the model was trained and how well it does.
"""

from __future__ import annotations

from typing import Any

from computewatch.cli.traces import add_trace_input_arguments

__all__ = ["add_detect_parser"]


def add_detect_parser(sub: Any) -> None:
    """Add ``detect`` to the CLI's subcommands (``sub``: the ``add_subparsers`` object)."""
    p = sub.add_parser(
        "detect",
        help="classify jobs as training, inference, other or uncertain from GPU telemetry alone",
        description="Classify each job of the files (nvidia-smi logs, the long CSV/Parquet "
        "format) and of the stored runs given with --run: label (training, inference, other or "
        "uncertain), calibrated p_training, the features that moved this job's verdict, a "
        "hardware compute ceiling with a review flag (flagged jobs first), and for training a "
        "hardware-based FLOP estimate. Reports carry "
        "totals, features and labels only, never code or command lines. Model and "
        "evaluation: docs/detection.md.",
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="telemetry files")
    p.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="RUN",
        help="a stored run (id, unique id prefix, name, or 'last'); repeatable. FILE arguments "
        "of the form run:RUN mean the same",
    )
    add_trace_input_arguments(
        p, name_help="the job's name for a file without a job column (default: its stem)"
    )
    p.add_argument("--json", action="store_true", help="JSON output")
    p.add_argument(
        "--precision",
        choices=("fp64", "fp32", "tf32", "bf16", "fp16", "fp8"),
        help="precision of the peak for the FLOP estimate (default: bf16, fp16, fp32, the "
        "first the GPU has)",
    )
    p.add_argument("--model", metavar="FILE", help="a detector model file (default: shipped)")
    p.add_argument(
        "--config",
        metavar="FILE",
        help="configuration file ([governance] detect_review_flop: the compute ceiling that "
        "flags a job for review; default 1e23 FLOP)",
    )
    p.add_argument(
        "--db",
        metavar="PATH",
        help="database file for --run (default: $COMPUTEWATCH_HOME/computewatch.db, else "
        "~/.local/share/computewatch/computewatch.db)",
    )
