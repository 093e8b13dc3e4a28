"""``computewatch ledger`` and ``computewatch governance``: the parsers (the commands are in
:mod:`computewatch.cli.governance_run`; the library is computewatch.ledger, .lineage and
.governance). Both read a server database directly (``--db``, as ``computewatch server``) or a
server over HTTP (``--server``/``--token``, as ``push``)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_governance_parsers"]

_DB_HELP = (
    "the server's database URL: sqlite:///PATH or postgresql+psycopg://USER:PASSWORD@HOST:PORT/"
    "NAME (default sqlite:///$COMPUTEWATCH_HOME/server.db)"
)


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {v}")
    return v


def _source(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--db", metavar="URL", help=_DB_HELP)
    g.add_argument(
        "--server",
        metavar="URL",
        help="a computewatch server instead (default: COMPUTEWATCH_SERVER, [server] url)",
    )
    p.add_argument("--token", metavar="T", help="with --server: its token (COMPUTEWATCH_TOKEN)")
    p.add_argument("--config", metavar="FILE", help="configuration file ([governance] tiers)")


def add_governance_parsers(sub: Any) -> None:
    """Add ``ledger`` and ``governance`` to the CLI's subcommands."""
    led = sub.add_parser(
        "ledger",
        help="the tamper-evident ledger: export it, verify an export or a database",
        description="Every finished run, obligation and pruning is an entry of a hash chain "
        "with Ed25519-signed checkpoints (docs/ledger.md).",
    )
    lsub = led.add_subparsers(dest="ledger_cmd", metavar="ACTION", required=True)
    ex = lsub.add_parser("export", help="write the ledger as JSON Lines with its public key")
    ex.add_argument("-o", "--output", required=True, metavar="FILE")
    _source(ex)
    ex.add_argument("--key", metavar="FILE", help="the server's signing key (with --db)")
    ve = lsub.add_parser(
        "verify",
        help="check an export (or a database) and name the first entry tampered with",
        description="Exit 0 when the chain is intact; otherwise exit 1 naming the first entry "
        "altered, removed, inserted or reordered.",
    )
    ve.add_argument("file", nargs="?", metavar="FILE", help="an export written by 'export'")
    ve.add_argument("--db", metavar="URL", help="verify a server database in place instead")
    ve.add_argument(
        "--public-key",
        metavar="FILE",
        help="the key the checkpoints must be signed with (base64 or PEM); default: the key "
        "in the export, or the server's key file with --db",
    )
    ve.add_argument("--key", metavar="FILE", help="with --db: the server's signing key file")
    ve.add_argument("--json", action="store_true", help="JSON output")
    pk = lsub.add_parser("public-key", help="print the server's public key (for auditors)")
    pk.add_argument("--key", metavar="FILE", help="the signing key file")

    gov = sub.add_parser(
        "governance",
        help="cumulative training compute per model, thresholds, deadlines",
        description="Per model: cumulative compute by method (counted, hardware, 6ND), the "
        "tiers it crossed or is forecast to cross, and open obligations with days left "
        "(docs/governance.md).",
    )
    gsub = gov.add_subparsers(dest="governance_cmd", metavar="ACTION", required=True)
    st = gsub.add_parser("status", help="every model's compute, tiers and obligations")
    st.add_argument("--json", action="store_true", help="JSON output")
    _source(st)
    rp = gsub.add_parser("report", help="the notification pack of one model (HTML or JSON)")
    rp.add_argument("model", metavar="MODEL")
    rp.add_argument("-o", "--output", required=True, metavar="FILE.html|FILE.json")
    _source(rp)
    dn = gsub.add_parser("done", help="mark an obligation fulfilled, with a reference")
    dn.add_argument("obligation", type=_positive, metavar="ID")
    dn.add_argument("--reference", required=True, metavar="TEXT")
    _source(dn)
