"""``computewatch agent``: the node agent's flags (the command is
:mod:`computewatch.cli.agent_run`; the library side is computewatch.fleet.node, .agent, .server).

Flags win over the configuration file's ``[agent]`` section. Every problem found before the
agent starts (a malformed configuration, an unusable listen address, token or TLS file) is one
line on standard error and exit status 2; SIGTERM and SIGINT stop it cleanly (status 0).
"""

from __future__ import annotations

import argparse
from typing import Any

from computewatch.cli import args as cli_args
from computewatch.cli.alerts import add_alert_arguments
from computewatch.cli.args import BACKEND_CHOICES, DEFAULT_LISTEN, MAX_INTERVAL, MIN_INTERVAL
from computewatch.cli.exporters import add_export_arguments

__all__ = ["add_agent_parser"]


def _interval(text: str) -> float:
    return cli_args.interval(text, MIN_INTERVAL, MAX_INTERVAL)


def _nonneg(text: str) -> float:
    v = cli_args.number(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, not {text}")
    return v


def add_agent_parser(sub: Any) -> None:
    """Add ``agent`` to the CLI's subcommands (``sub``: argparse's subparsers action)."""
    a = sub.add_parser(
        "agent",
        help="node agent: sample the whole node and export Prometheus metrics per GPU and job",
        description="Sample the host, every GPU and every process of this node, attribute "
        "usage to jobs (Slurm, Kubernetes, computewatch runs, COMPUTEWATCH_TAGS), users and "
        "teams, and serve it on /metrics. Stops on SIGTERM or SIGINT.",
    )
    a.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help=f"address of /metrics and /healthz (default {DEFAULT_LISTEN}; a non-loopback "
        "address without --token-file is warned about)",
    )
    a.add_argument(
        "--config",
        metavar="FILE",
        help="configuration file with [agent] and [teams] sections (default: "
        "$COMPUTEWATCH_CONFIG or ~/.config/computewatch/config.toml when it exists)",
    )
    a.add_argument(
        "--gpu-backend",
        "--accelerator-backend",
        dest="gpu_backend",
        type=cli_args.gpu_backend,
        metavar="BACKEND",
        help=f"{BACKEND_CHOICES} (default auto; fake devices are labelled simulated)",
    )
    a.add_argument(
        "--interval", type=_interval, metavar="S", help="seconds between samples (default 5)"
    )
    a.add_argument("--token-file", metavar="FILE", help="require this bearer token from scrapers")
    a.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this certificate (PEM)")
    a.add_argument("--tls-key", metavar="FILE", help="... and this private key (PEM)")
    a.add_argument("--node", metavar="NAME", help="the node label (default: the host name)")
    a.add_argument(
        "--job-expiry",
        type=_nonneg,
        metavar="S",
        help="seconds an ended job's counters stay exported (default 300)",
    )
    a.add_argument(
        "--per-process",
        action="store_true",
        default=None,
        help="also export per-PID series of noticeable processes (high cardinality)",
    )
    a.add_argument(
        "--detect",
        action="store_true",
        default=None,
        help="classify each job as training/inference/other from its GPU series and flag "
        "undeclared training (the [agent] detect key; needs the governance extra)",
    )
    a.add_argument(
        "--once",
        action="store_true",
        help="sample twice one interval apart, print the exposition and exit (no server)",
    )
    a.add_argument(
        "--fake-gpu-pid",
        type=int,
        action="append",
        default=[],
        metavar="PID",
        help="with a fake:PRESET backend: show process PID on every simulated GPU (demos, "
        "tests; repeatable)",
    )
    add_alert_arguments(a)
    add_export_arguments(a)
