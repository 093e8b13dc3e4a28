"""Command-line pieces for alerts: the flags of ``run`` and ``agent``, and ``computewatch alerts``.

``add_alert_arguments`` adds ``--alerts FILE``, ``--notify TARGET`` (repeatable),
``--budget-usd`` and ``--budget-kwh``; each is checked by argparse, so a bad rules file or
target stops the command before it starts, with the file, line and reason. ``alerts check FILE``
and ``alerts list [FILE]`` let users validate and review rules.
"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, Any, TextIO

from computewatch import jsonout
from computewatch.units import format_promql_duration

if TYPE_CHECKING:  # the rules engine loads when a command uses it: `computewatch` starts fast
    from computewatch.alerts.rules import Rule
    from computewatch.config import Config
    from computewatch.metrics.model import MetricsSink

__all__ = ["add_alert_arguments", "add_alerts_parser", "cmd_alerts"]


def _rules_file(text: str) -> str:
    try:
        from computewatch.alerts.rules import load_rules  # only when --alerts is given: start-up

        load_rules(text)
    except ValueError as e:  # AlertsError
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _target(text: str) -> str:
    try:
        from computewatch.alerts.notify import parse_target  # only with --notify: start-up time

        return str(parse_target(text))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _amount(unit: str) -> Any:
    def check(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of {unit}: {text!r}") from None
        if not (math.isfinite(v) and v > 0):
            raise argparse.ArgumentTypeError(f"must be a positive number of {unit}, not {text}")
        return v

    return check


def add_alert_arguments(parser: argparse.ArgumentParser) -> None:
    """``--alerts``, ``--notify``, ``--budget-usd``, ``--budget-kwh`` (for ``run`` and ``agent``).

    The command then builds its sink with ``sink_from_args(args.alerts, notify=args.notify,
    budget_usd=args.budget_usd, budget_kwh=args.budget_kwh, out=...)`` when ``alerts_enabled``.
    """
    g = parser.add_argument_group("alerts (docs/alerts.md)")
    g.add_argument(
        "--alerts",
        type=_rules_file,
        metavar="FILE",
        help="evaluate the rules in FILE (YAML) with the built-in pack; see `computewatch alerts "
        "list`",
    )
    g.add_argument(
        "--notify",
        type=_target,
        action="append",
        default=[],
        metavar="TARGET",
        help="where alerts go: terminal, webhook:URL, slack:URL, alertmanager:URL (repeatable; "
        "with --alerts or a budget, default terminal)",
    )
    g.add_argument(
        "--budget-usd",
        type=_amount("dollars"),
        metavar="USD",
        help="alert when a job's cost reaches USD (prices from the configuration)",
    )
    g.add_argument(
        "--budget-kwh",
        type=_amount("kWh"),
        metavar="KWH",
        help="alert when a job's energy reaches KWH",
    )


def alerts_enabled(args: argparse.Namespace) -> bool:
    """Whether the flags ask for alert evaluation at all."""
    return bool(
        getattr(args, "alerts", None)
        or getattr(args, "notify", None)
        or getattr(args, "budget_usd", None) is not None
        or getattr(args, "budget_kwh", None) is not None
    )


def alerts_sink(
    args: argparse.Namespace, *, out: TextIO, config: Config | None = None
) -> MetricsSink | None:
    """The sink that the alert flags of ``run`` and ``agent`` ask for, or None without them.
    Raises :class:`computewatch.alerts.AlertsError` (a bad target, an unreadable file, no
    price for ``--budget-usd``)."""
    if not alerts_enabled(args):
        return None
    # only with alert flags: the rules engine is not needed to start (start-up time)
    from computewatch.alerts.rules import AlertsError
    from computewatch.alerts.sink import sink_from_args

    try:
        return sink_from_args(
            args.alerts,
            notify=list(args.notify),
            budget_usd=args.budget_usd,
            budget_kwh=args.budget_kwh,
            out=out,
            config=config,
        )
    except OSError as e:
        raise AlertsError(str(e.strerror or e)) from None


def add_alerts_parser(sub: Any) -> argparse.ArgumentParser:
    """``computewatch alerts check FILE`` and ``computewatch alerts list [FILE]``."""
    p: argparse.ArgumentParser = sub.add_parser(
        "alerts",
        help="check or list alert rules",
        description="Check a rules file (every problem with its file, line and reason) or list "
        "the rules that would run: the built-in pack and a file's own.",
    )
    a = p.add_subparsers(dest="alerts_cmd", metavar="ACTION", required=True)
    ck = a.add_parser("check", help="validate a rules file")
    ck.add_argument("file", metavar="FILE")
    ls = a.add_parser("list", help="list the rules (the built-in pack, or with FILE)")
    ls.add_argument("file", metavar="FILE", nargs="?")
    for sp in (ck, ls):
        sp.add_argument("--json", action="store_true", help="JSON output")
    return p


def _describe(r: Rule) -> dict[str, Any]:
    cond = r.expr if r.expr is not None else f"detector {r.detector}"
    out: dict[str, Any] = {
        "name": r.name,
        "severity": r.severity,
        "for": format_promql_duration(r.for_seconds),
        "condition": " ".join(cond.split()),
        "origin": r.origin or "built-in",
        "labels": dict(r.labels),
        "message": r.message,
    }
    if r.detector:
        out["params"] = dict(r.params)
    return out


def cmd_alerts(args: argparse.Namespace) -> int:
    """Run ``alerts check`` or ``alerts list``; a bad file raises AlertsError (main: one line on
    stderr, exit 1)."""
    # the rules engine loads when this command runs, not at every start (start-up time)
    from computewatch.alerts.rules import builtin_rules, load_rules

    rules = builtin_rules() if args.file is None else load_rules(args.file)
    rows = [_describe(r) for r in rules.rules]
    if args.json:
        doc = {"file": args.file, "rules": rows, "receivers": list(rules.receivers)}
        print(jsonout.dumps(doc, indent=2))
        return 0
    if args.alerts_cmd == "check":
        own = sum(1 for r in rows if r["origin"].startswith(f"{args.file}:"))
        print(
            f"{args.file}: OK, {len(rows)} rules ({own} from the file, {len(rows) - own} "
            f"built-in)" + (f"; receivers: {', '.join(rules.receivers)}" if rules.receivers else "")
        )
        return 0
    width = max((len(r["name"]) for r in rows), default=4)
    for r in rows:
        cond = r["condition"]
        if r.get("params"):
            cond += " " + " ".join(f"{k}={v:g}" for k, v in r["params"].items())
        print(f"{r['name']:<{width}}  {r['severity']:<8}  for {r['for']:<4}  {cond}")
    return 0
