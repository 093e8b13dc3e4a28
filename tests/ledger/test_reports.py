"""Signed usage reports (computewatch.ledger.reports) and their check by ``verify``: a report
signed by a key the chain registered earlier counts as signed by a known node, one whose
signature or binding fails is named, unsigned ones and unknown keys are counted."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from computewatch.ledger.chain import Entry, next_entry
from computewatch.ledger.keys import (
    CHECKPOINT_KIND,
    checkpoint_body,
    encode_public,
    key_id,
    report_valid,
    sign_report,
)
from computewatch.ledger.reports import (
    REPORT_FIELDS,
    binding_problem,
    document_sha256,
    shape_problem,
    usage_report,
)
from computewatch.ledger.verify import NODE_KEY_KIND, RUN_KIND, Header, Verdict, verify

SERVER = Ed25519PrivateKey.generate()
NODE = Ed25519PrivateKey.generate()
OTHER = Ed25519PrivateKey.generate()
SUMMARY: dict[str, Any] = {"duration_seconds": 12.5, "energy": {"facility": {"value": 0.25}}}
META: dict[str, Any] = {"config": {"lr": 0.001}}


def _report(run_id: str = "r1", key: Ed25519PrivateKey = NODE, **over: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "run_id": run_id, "seq": 3, "final": True, "status": "completed", "exit_code": 0,
        "started_at": 1_700_000_000.0, "ended_at": 1_700_000_012.5, "summary": SUMMARY,
        "meta": META,
    }  # fmt: skip
    fields.update(over)
    return sign_report(usage_report(**fields), key)


def _run_body(
    report: Mapping[str, Any] | None, run_id: str = "r1", team: str = "t"
) -> dict[str, Any]:
    return {
        "run_id": run_id, "team": team, "status": "completed", "seq": 3,
        "started_at": 1_700_000_000.0, "ended_at": 1_700_000_012.5,
        "summary_sha256": document_sha256(SUMMARY), "signature": "valid",
        "signed_report": None if report is None else dict(report),
    }  # fmt: skip


def _register(key: Ed25519PrivateKey, team: str = "t", action: str = "register") -> dict[str, Any]:
    pub = key.public_key()
    return {
        "action": action, "key_id": key_id(pub), "public_key": encode_public(pub), "team": team,
        "name": "node-1", "registered_at": time.time(), "revoked_at": None,
    }  # fmt: skip


def _chain(*items: tuple[str, Mapping[str, Any]]) -> list[Entry]:
    out: list[Entry] = []
    for kind, body in items:
        out.append(next_entry(out[-1] if out else None, kind, body))
    out.append(next_entry(out[-1], CHECKPOINT_KIND, checkpoint_body(out[-1], SERVER)))
    return out


def _verify(entries: list[Entry]) -> Verdict:
    return verify(entries, Header({}), SERVER.public_key())


FIGURES: dict[str, Any] = {
    "model": "acme-7b", "base_model": None, "stage": "rl", "gpu_hours": 8.0, "energy_kwh": 6.25,
    "duration_seconds": 3600.0, "devices": [{"model": "H100-SXM", "count": 8}],
    "flops": {"counted": {"value": 9e25, "low": 9e25, "high": 9e25}},
}  # fmt: skip


def test_a_report_signs_the_figures_and_the_first_format_still_verifies() -> None:
    r = _report(figures=FIGURES)
    assert set(r) == {*REPORT_FIELDS, "figures", "signed_by", "signature"}
    assert shape_problem(r) is None and report_valid(r, NODE.public_key())
    relabelled = {**r, "figures": {**FIGURES, "stage": "eval", "flops": {}}}
    assert shape_problem(relabelled) is None and not report_valid(relabelled, NODE.public_key())
    assert "figures.stage" in str(shape_problem({**r, "figures": {**FIGURES, "stage": 3}}))
    assert "figures" in str(shape_problem({**r, "figures": {**FIGURES, "secret": 1}}))
    old = _report(with_figures=False)  # the first format: signed over Python-spelled JSON
    assert "figures" not in old and shape_problem(old) is None
    assert report_valid(old, NODE.public_key())
    same = dict(
        run_id="r1", seq=3, final=True, status="completed", exit_code=0,
        started_at=1_700_000_000.0, ended_at=1_700_000_012.5, summary=SUMMARY, meta=META,
    )  # fmt: skip
    other = usage_report(**same, figures={**FIGURES, "stage": "eval"})  # type: ignore[arg-type]
    assert "figures" in str(binding_problem(r, other))


def test_a_report_binds_what_travelled() -> None:
    r = _report()
    assert set(r) == {*REPORT_FIELDS, "figures", "signed_by", "signature"}
    assert shape_problem(r) is None
    same = dict(
        run_id="r1", seq=3, final=True, status="completed", exit_code=0,
        started_at=1_700_000_000.0, ended_at=1_700_000_012.5, summary=SUMMARY, meta=META,
    )  # fmt: skip

    def problem(**changes: object) -> str | None:
        return binding_problem(r, usage_report(**{**same, **changes}))  # type: ignore[arg-type]

    assert problem() is None
    assert "summary_sha256" in str(problem(summary={**SUMMARY, "duration_seconds": 99.0}))
    assert "meta_sha256" in str(problem(meta={}))
    assert "seq" in str(problem(seq=4))
    assert "final" in str(problem(final=1))
    assert document_sha256(None) == document_sha256(None) != document_sha256({})


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: [1], "expected an object"),
        (lambda r: {**r, "host": "x"}, "unexpected field 'host'"),
        (lambda r: {k: v for k, v in r.items() if k != "meta_sha256"}, "missing 'meta_sha256'"),
        (lambda r: {**r, "seq": True}, "seq"),
        (lambda r: {**r, "summary_sha256": "ab"}, "summary_sha256"),
        (lambda r: {**r, "signed_by": "ZZ"}, "signed_by"),
        (lambda r: {**r, "started_at": float("inf")}, "started_at"),
    ],
)
def test_malformed_reports_are_named(edit: Any, message: str) -> None:
    assert message in str(shape_problem(edit(_report())))


def test_reports_by_registered_keys_count_as_signed() -> None:
    entries = _chain(
        (NODE_KEY_KIND, _register(NODE)),
        (RUN_KIND, _run_body(_report("r1"), "r1")),
        (RUN_KIND, _run_body(None, "r2")),
        (RUN_KIND, _run_body(_report("r3", OTHER), "r3")),  # OTHER never registered
    )
    v = _verify(entries)
    assert v.ok, v.problem
    assert v.reports_json() == {"total": 3, "signed": 1, "unsigned": 1, "unknown_key": 1}


def test_a_key_counts_only_after_its_registration_for_that_team_until_revoked() -> None:
    entries = _chain(
        (RUN_KIND, _run_body(_report("r1"), "r1")),  # before registration
        (NODE_KEY_KIND, _register(NODE)),
        (RUN_KIND, _run_body(_report("r2"), "r2", team="other")),  # another team's run
        (RUN_KIND, _run_body(_report("r3"), "r3")),
        (NODE_KEY_KIND, _register(NODE, action="revoke")),
        (RUN_KIND, _run_body(_report("r4"), "r4")),
    )
    v = _verify(entries)
    assert v.ok, v.problem
    assert (v.reports, v.reports_signed, v.reports_unknown_key) == (4, 1, 3)


def _rehashed(entries: list[Entry], seq: int, body: Mapping[str, Any]) -> list[Entry]:
    """The chain with entry ``seq``'s body replaced and every hash after it recomputed, its
    checkpoint re-signed by the server's key: what only the server's key holder could do."""
    out: list[Entry] = []
    for e in entries:
        b = body if e.seq == seq else e.body
        if e.kind == CHECKPOINT_KIND:
            b = checkpoint_body(out[-1], SERVER)
        out.append(next_entry(out[-1] if out else None, e.kind, b, time=e.time))
    return out


def test_a_report_altered_in_the_chain_is_named() -> None:
    entries = _chain((NODE_KEY_KIND, _register(NODE)), (RUN_KIND, _run_body(_report())))
    run = entries[1]
    report = dict(run.body["signed_report"])
    report["exit_code"] = 1  # changed after the node signed it
    v = _verify(_rehashed(entries, run.seq, {**run.body, "signed_report": report}))
    assert v.problem is not None and v.problem.what == "report" and v.problem.seq == run.seq
    assert "changed after signing" in v.problem.message
    # the entry's own figures no longer those the node signed
    v = _verify(_rehashed(entries, run.seq, {**run.body, "summary_sha256": "0" * 64}))
    assert v.problem is not None and v.problem.what == "report"
    assert "summary_sha256" in v.problem.message
    # the key registered in the chain swapped for another: the report no longer verifies
    fake = {**_register(OTHER), "key_id": key_id(NODE.public_key())}
    v = _verify(_rehashed(entries, 1, fake))
    assert v.problem is not None and v.problem.what == "node_key"


def test_a_malformed_report_in_the_chain_is_named() -> None:
    entries = _chain((RUN_KIND, _run_body({"run_id": "r1"})))
    v = _verify(entries)
    assert v.problem is not None and v.problem.what == "report"
    assert "malformed" in v.problem.message


def test_an_exact_flop_count_beyond_2_53_is_a_decimal_string_with_its_unit() -> None:
    """A program that counts 12345678901234567891 FLOP: no JSON number holds it exactly, so the
    figures the node signs and the run entry lists keep it as "12345678901234567891 FLOP"; the
    replay reads it as the nearest double."""
    from tests.server.conftest import synthetic_upload

    from computewatch.governance.replay import rc_of_figures
    from computewatch.ledger.jcs import dumps
    from computewatch.ledger.reports import figures_problem
    from computewatch.serverdb.lineage_ingest import run_entry
    from computewatch.upload.signing import report_figures, run_compute_of

    up = synthetic_upload(gpus=1)
    exact = 12345678901234567891
    up["summary"]["flops"] = {"method": "counted", "value": exact, "low": exact,  # type: ignore[index]
                              "high": exact}  # fmt: skip
    up["meta"]["governance"] = {"model": "m", "stage": "pretrain"}
    figures = report_figures(up)
    assert figures is not None and figures_problem(figures) is None
    assert figures["flops"]["counted"]["value"] == "12345678901234567891 FLOP"
    assert b'"12345678901234567891 FLOP"' in dumps(figures)
    body = run_entry("lab", up, run_compute_of(up))
    assert body["figures"] == figures
    rc = rc_of_figures("r", "completed", 1.0, figures)
    assert rc is not None and rc.flops["counted"].value == float(exact)
