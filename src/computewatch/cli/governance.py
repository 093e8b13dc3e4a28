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
        "--evidence",
        required=True,
        metavar="TEXT",
        help="what the verification rested on (documents checked, a reference); kept "
        "encrypted with the personal data",
    )
    ve.add_argument("--by", required=True, metavar="WHO", help="who verified the account")
    ve.add_argument(
        "--valid-days",
        type=cli_args.whole,
        default=365,
        metavar="DAYS",
        help="re-verification due after this many days (default 365)",
    )
    se = asub.add_parser("set", help="change an account's caps or status")
    se.add_argument("name", metavar="NAME")
    se.add_argument(
        "--status",
        choices=("unverified", "verified", "suspended"),
        help="suspended or unverified ('verified' only through 'accounts verify')",
    )
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


def _team(text: str) -> str:
    # loaded when an argument is parsed, not when the parser is built (start-up time)
    from computewatch.errors import UsageError
    from computewatch.serverdb.tokens import validate_team

    try:
        return validate_team(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="JSON output")


def _at(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not Unix seconds: {text!r}") from None
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"Unix seconds are not negative: {text}")
    return v


def _witness_keys(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--witness-key",
        action="append",
        default=[],
        metavar="W",
        help="a witness's public key (the vkey file 'ledger witness' writes, or its text); "
        "repeatable: the export's newest head must be cosigned by --witnesses-required of them",
    )
    p.add_argument(
        "--witnesses-required",
        type=cli_args.whole,
        metavar="K",
        help="how many of the witnesses must have cosigned (default: 1 with --witness-key)",
    )


def _ledger(sub: Any) -> None:
    led = sub.add_parser(
        "ledger",
        help="the transparency log: export, verify, heads, proofs, witnesses",
        description="Every finished run, node key, tier crossing, obligation and pruning is an "
        "entry of a transparency log: an RFC 9162 Merkle tree with signed heads (C2SP "
        "checkpoints), inclusion and consistency proofs, and witnesses' cosignatures "
        "(docs/ledger.md). Exit status 0: it holds; 1: it does not; 2: usage.",
    )
    lsub = led.add_subparsers(dest="ledger_cmd", metavar="ACTION", required=True)
    ex = lsub.add_parser("export", help="write the log as JSON Lines with its signed heads")
    ex.add_argument("-o", "--output", required=True, metavar="FILE")
    _source(ex)
    ex.add_argument("--key", metavar="FILE", help="the server's signing key (with --db)")
    ve = lsub.add_parser(
        "verify",
        help="check an export (or a database): every entry, the root, the signed heads",
        description="Exit 0 when the log holds: every entry canonical and in order, the root "
        "recomputed equal to every signed head's, the newest head covering the last entry. "
        "Otherwise exit 1 naming the first problem.",
    )
    ve.add_argument(
        "file",
        nargs="?",
        metavar="FILE",
        help="an export written by 'export' (- reads it from standard input)",
    )
    ve.add_argument("--db", metavar="URL", help="verify a server database in place instead")
    ve.add_argument(
        "--public-key",
        metavar="FILE",
        help="the key the heads must be signed with (base64 or PEM); default: the keys in "
        "the export, or the server's key file with --db",
    )
    ve.add_argument("--key", metavar="FILE", help="with --db: the server's signing key file")
    ve.add_argument(
        "--head",
        metavar="FILE",
        help="with --db: the head the server published (default: beside its key file); the "
        "database must still hold it, so deleting its newest entries is caught",
    )
    ve.add_argument(
        "--previous",
        metavar="OLD_FILE_OR_HEAD",
        help="an earlier export, or an earlier signed head: this export must extend it (a "
        "rewritten history is named at its first differing entry)",
    )
    _witness_keys(ve)
    ve.add_argument(
        "--jobs",
        type=cli_args.whole,
        metavar="N",
        help="check entries in N worker processes (default: the CPUs, at most 4; the tree is "
        "still built in order)",
    )
    ve.add_argument(
        "--allow-unsigned-tail",
        action="store_true",
        help="accept entries after the newest signed head: they are then checked only "
        "against each other, which does not prove the server wrote them, nor that the export "
        "is not cut short or its heads dropped",
    )
    _json(ve)
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
    hd = lsub.add_parser("head", help="print the newest signed head (a C2SP checkpoint note)")
    _source(hd)
    _json(hd)
    pr = lsub.add_parser("prove", help="print an RFC 9162 inclusion or consistency proof")
    psub = pr.add_subparsers(dest="proof", metavar="KIND", required=True)
    inc = psub.add_parser("inclusion", help="the audit path of entry SEQ")
    inc.add_argument("seq", type=cli_args.whole, metavar="SEQ")
    inc.add_argument("--head", metavar="FILE", help="in the tree of this signed head "
                     "(default: the newest)")  # fmt: skip
    con = psub.add_parser("consistency", help="that OLD_HEAD's tree is a prefix of the newer")
    con.add_argument("old", metavar="OLD_HEAD_FILE")
    con.add_argument("new", nargs="?", metavar="NEW_HEAD_FILE", help="default: the newest head")
    for p in (inc, con):
        _source(p)
        p.add_argument("-o", "--output", metavar="FILE", help="write it there (default: stdout)")
        _json(p)
    ck = lsub.add_parser(
        "check-proof",
        help="check a proof file offline with the log's public key alone",
        description="Exit 0 when the proof holds: its heads signed by the key and the RFC 9162 "
        "proof between them (or from the entry to the head's root); 1 otherwise.",
    )
    ck.add_argument("file", metavar="FILE")
    ck.add_argument("--public-key", required=True, metavar="FILE", help="the log's public key")
    _json(ck)
    rp = lsub.add_parser(
        "replay",
        help="recompute every model's compute, tiers and obligations from an export alone",
        description="The same document as 'governance status --json' on the server the export "
        "came from; exit 1 when the log's governance entries do not add up (named).",
    )
    rp.add_argument("file", metavar="FILE")
    rp.add_argument("--at", type=_at, metavar="UNIX", help="days_left counted from then")
    _json(rp)
    wi = lsub.add_parser(
        "witness",
        help="watch a log: check each new head's consistency, cosign it, post it back",
        description="Polls the log's newest head, checks the consistency proof from the last "
        "head it cosigned, cosigns a good head with its own key (C2SP cosignature/v1) and "
        "posts the cosignature to the log. An inconsistent head is refused, kept as evidence "
        "in --state, and said loudly: exit 1 with --once, an alert on stderr otherwise.",
    )
    wi.add_argument("--log", required=True, metavar="URL", help="the computewatch server")
    wi.add_argument("--token", metavar="T", help="a token of the server (read scope is enough)")
    wi.add_argument("--public-key", required=True, metavar="K", help="the log's public key")
    wi.add_argument("--state", required=True, metavar="DIR",
                    help="the witness's key, the last head it cosigned, and evidence")  # fmt: skip
    wi.add_argument("--name", metavar="NAME", help="the witness's name in its cosignatures "
                    "(default: witness/<its key id>)")  # fmt: skip
    wi.add_argument("--interval", type=float, default=60.0, metavar="S",
                    help="seconds between polls (default 60)")  # fmt: skip
    wi.add_argument("--once", action="store_true", help="one poll, then exit (0 good, 1 not)")
    _json(wi)


def add_governance_parsers(sub: Any) -> None:
    """Add ``ledger``, ``governance`` and ``accounts`` to the CLI's subcommands."""
    _accounts(sub)
    _ledger(sub)
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
    st.add_argument("--at", type=_at, metavar="UNIX", help="days_left counted from then")
    _source(st)
    rp = gsub.add_parser("report", help="the notification pack of one model (HTML or JSON)")
    rp.add_argument("model", metavar="MODEL")
    rp.add_argument("-o", "--output", required=True, metavar="FILE.html|FILE.json")
    _source(rp)
    dn = gsub.add_parser("done", help="mark an obligation fulfilled, with a reference")
    dn.add_argument("obligation", type=cli_args.whole, metavar="ID")
    dn.add_argument("--reference", required=True, metavar="TEXT")
    _source(dn)
    gr = gsub.add_parser(
        "grant",
        help="let another team's runs fine-tune one of your team's models (admin)",
        description="A model is TEAM/NAME; a run names its own team's models only. A run of "
        "another team may name MODEL as its --base-model (as TEAM/NAME) once an admin granted "
        "it to that team; the grant is recorded in the ledger.",
    )
    rv = gsub.add_parser(
        "revoke",
        help="withdraw a grant: the team's new runs may no longer name the model as a base",
    )
    for p, flag in ((gr, "--to"), (rv, "--from")):
        p.add_argument("model", metavar="MODEL", help="TEAM/NAME (through --server, a bare "
                       "NAME is the admin token's team's)")  # fmt: skip
        p.add_argument(flag, dest="team", required=True, metavar="TEAM", type=_team,
                       help="the team whose runs may name it as their base model")  # fmt: skip
        _source(p)
    gl = gsub.add_parser("grants", help="the grants in force (a team's token: its own)")
    _json(gl)
    _source(gl)
