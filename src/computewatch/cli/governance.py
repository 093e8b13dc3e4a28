"""``computewatch ledger`` and ``computewatch governance``: the parsers (the commands are in
:mod:`computewatch.cli.governance_run`; the library is computewatch.ledger, .lineage and
.governance). Both read a server database directly (``--db``, as ``computewatch server``) or a
server over HTTP (``--server``/``--token``, as ``push``)."""

from __future__ import annotations

import argparse
from typing import Any

from computewatch.cli import args as cli_args

__all__ = ["add_governance_parsers"]

_DB_HELP = (
    "the server's database URL: sqlite:///PATH or postgresql+psycopg://USER:PASSWORD@HOST:PORT/"
    "NAME (default sqlite:///$COMPUTEWATCH_HOME/server.db)"
)


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


def _hours(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of hours: {text!r}") from None
    if not 0 < v <= 8784:
        raise argparse.ArgumentTypeError(f"hours must be above 0 and at most 8784, not {text}")
    return v


def _cap(text: str) -> float | None:
    if text.strip().lower() == "none":
        return None
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number or 'none', not {text!r}") from None
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"a cap is a finite number of at least 0, not {text}")
    return v


def _accounts(sub: Any) -> None:
    acc = sub.add_parser(
        "accounts",
        help="know-your-customer accounts, caps, and the check a scheduler asks",
        description="An account is a customer or an internal team (its name is the team its "
        "tokens carry). Personal data is encrypted at rest and shown only with --pii "
        "(docs/accounts.md).",
    )
    asub = acc.add_subparsers(dest="accounts_cmd", metavar="ACTION", required=True)
    ad = asub.add_parser("add", help="a new account (unverified until 'verify')")
    ad.add_argument("name", metavar="NAME", help="the account (= team) name")
    ad.add_argument("--legal-name", required=True)
    ad.add_argument(
        "--owner",
        action="append",
        default=[],
        metavar="NAME",
        help="a beneficial owner (repeatable)",
    )
    ad.add_argument("--country", metavar="CC", help="ISO 3166 two-letter code")
    ad.add_argument("--email")
    ad.add_argument("--phone")
    ad.add_argument(
        "--contacts-verified", action="store_true", help="the email and phone were verified"
    )
    ad.add_argument(
        "--payment-reference",
        metavar="TEXT",
        help="means and source of payment (a reference, not a card number)",
    )
    ad.add_argument(
        "--intended-use",
        metavar="TEXT",
        help="the customer's statement, including whether they intend to train "
        "a model above the tiers",
    )
    ad.add_argument("--gpu-hours-per-month", type=_cap, metavar="N", default=argparse.SUPPRESS)
    ad.add_argument("--flop-per-month", type=_cap, metavar="N", default=argparse.SUPPRESS)
    ve = asub.add_parser("verify", help="record that the account's identity was verified")
    ve.add_argument("name", metavar="NAME")
    ve.add_argument(
        "--valid-days",
        type=cli_args.whole,
        default=365,
        metavar="DAYS",
        help="re-verification due after this many days (default 365)",
    )
    se = asub.add_parser("set", help="change an account's caps or status")
    se.add_argument("name", metavar="NAME")
    se.add_argument("--status", choices=("unverified", "verified", "suspended"))
    se.add_argument("--gpu-hours-per-month", type=_cap, metavar="N|none", default=argparse.SUPPRESS)
    se.add_argument("--flop-per-month", type=_cap, metavar="N|none", default=argparse.SUPPRESS)
    sh = asub.add_parser("show", help="one account (personal data only with --pii)")
    sh.add_argument("name", metavar="NAME")
    sh.add_argument("--pii", action="store_true", help="decrypt and show the personal data")
    sh.add_argument("--json", action="store_true", help="JSON output")
    ls = asub.add_parser("list", help="every account, without personal data")
    ls.add_argument("--json", action="store_true", help="JSON output")
    ck = asub.add_parser(
        "check",
        help="may this account start a job of N GPUs for H hours? (exit 0 allow, 1 deny)",
    )
    ck.add_argument("name", metavar="ACCOUNT")
    ck.add_argument("--gpus", type=cli_args.whole, required=True, metavar="N")
    ck.add_argument("--hours", type=_hours, required=True, metavar="H")
    ck.add_argument("--gpu-model", metavar="MODEL", help="catalog or NVML name (H100-SXM)")
    ck.add_argument("--model", metavar="NAME", help="the model the job would train")
    ck.add_argument("--json", action="store_true", help="JSON output")
    for p in (ad, ve, se, sh, ls, ck):
        _source(p)


def add_governance_parsers(sub: Any) -> None:
    """Add ``ledger``, ``governance`` and ``accounts`` to the CLI's subcommands."""
    _accounts(sub)
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
    ve.add_argument(
        "--head",
        metavar="FILE",
        help="with --db: the head the server published (default: beside its key file); the "
        "database must still hold it, so deleting its newest entries is caught",
    )
    ve.add_argument(
        "--allow-unsigned-tail",
        action="store_true",
        help="accept entries after the last signed checkpoint: they are then checked only "
        "against each other, which does not prove the server wrote them, nor that the export "
        "is not cut short or its checkpoints dropped",
    )
    ve.add_argument("--json", action="store_true", help="JSON output")
    pk = lsub.add_parser("public-key", help="print the server's public key (for auditors)")
    pk.add_argument("--key", metavar="FILE", help="the signing key file")
    kg = lsub.add_parser(
        "keygen",
        help="create the server's signing key, or rotate it (--rotate)",
        description="Create the ledger's Ed25519 signing key (refused when the file exists). "
        "With --rotate --db URL: the current key signs a new one in a key-rotation entry of "
        "the ledger, the new key replaces it and the old one is kept as FILE.<id>.retired.",
    )
    kg.add_argument("--key", metavar="FILE", help="the signing key file")
    kg.add_argument("--rotate", action="store_true", help="replace the key, recorded in the log")
    kg.add_argument("--db", metavar="URL", help=f"with --rotate: {_DB_HELP}")

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
    dn.add_argument("obligation", type=cli_args.whole, metavar="ID")
    dn.add_argument("--reference", required=True, metavar="TEXT")
    _source(dn)
