"""A witness of a computewatch log (``computewatch ledger witness``): it keeps the last head it
cosigned, and for each newer head the log shows it checks the RFC 9162 consistency proof from
that head before cosigning the new one with its own Ed25519 key (C2SP ``cosignature/v1``) and
posting the cosignature back. A log that shows a head inconsistent with one the witness
cosigned (history rewritten and re-signed, a rollback, two heads of one size) is refused: the
witness never cosigns it nor anything after it, and keeps both heads and the proof as evidence.

Its state directory holds its key (``witness-ed25519.pem``, mode 0600), its public key as a C2SP
verifier key (``witness.vkey``: give it to auditors, ``ledger verify --witness-key``), the last
head it cosigned (``state.json``) and ``evidence/``.
"""

from __future__ import annotations

import binascii
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from computewatch.ledger.chain import LedgerError
from computewatch.ledger.keys import encode_public, key_id, load_or_create_private_key
from computewatch.ledger.merkle import verify_consistency
from computewatch.ledger.note import (
    Checkpoint,
    cosign,
    parse_checkpoint,
    parse_vkey,
    signature_line,
    vkey,
)
from computewatch.paths import make_private_dirs

__all__ = ["LogClient", "Outcome", "WitnessState", "open_state", "poll_once"]

KEY_FILE = "witness-ed25519.pem"
VKEY_FILE = "witness.vkey"
STATE_FILE = "state.json"
EVIDENCE_DIR = "evidence"


class LogClient(Protocol):
    def ledger_head(self) -> dict[str, Any]: ...
    def consistency_proof(self, old: int, new: int | None = None) -> dict[str, Any]: ...
    def post_cosignature(self, size: int, line: str, public_key: str) -> dict[str, Any]: ...


@dataclass
class WitnessState:
    dir: Path
    key: Ed25519PrivateKey
    name: str
    last: Checkpoint | None
    """The last head cosigned (the log's signature line only)."""

    @property
    def vkey(self) -> str:
        return vkey(self.name, self.key.public_key(), cosigner=True)

    def save(self) -> None:
        assert self.last is not None
        doc = {
            "name": self.name,
            "origin": self.last.origin,
            "size": self.last.size,
            "checkpoint": self.last.text(),
        }
        path = self.dir / STATE_FILE
        tmp = path.with_name(f".{STATE_FILE}.tmp{os.getpid()}")
        tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)


def open_state(directory: Path, name: str | None = None) -> WitnessState:
    """The witness's state in ``directory`` (its key made there the first time)."""
    make_private_dirs(directory)
    key = load_or_create_private_key(directory / KEY_FILE)
    last: Checkpoint | None = None
    saved_name: str | None = None
    path = directory / STATE_FILE
    if path.exists():
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            last = parse_checkpoint(doc["checkpoint"])
            saved_name = doc.get("name")
        except (OSError, ValueError, KeyError, TypeError, LedgerError) as e:
            raise LedgerError(
                f"the witness state {path} cannot be read: {e}", exit_code=2
            ) from None
    chosen = name or saved_name or f"witness/{key_id(key.public_key())}"
    if saved_name is not None and name is not None and name != saved_name:
        raise LedgerError(
            f"the witness in {directory} is named {saved_name!r}, not {name!r}", exit_code=2
        )
    state = WitnessState(directory, key, chosen, last)
    (directory / VKEY_FILE).write_text(state.vkey + "\n", encoding="ascii")
    return state


@dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    cosigned: bool
    size: int | None
    message: str
    evidence: Path | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "cosigned": self.cosigned,
            "size": self.size,
            "message": self.message,
            "evidence": None if self.evidence is None else str(self.evidence),
        }


def _evidence(state: WitnessState, reason: str, new: Checkpoint | None, doc: Any) -> Path:
    """Keep the refused head beside the one cosigned, once: a witness that keeps watching sees
    the same refused head at every poll and keeps the first file (named by both heads)."""
    folder = state.dir / EVIDENCE_DIR
    make_private_dirs(folder)
    size = "unknown" if new is None else str(new.size)
    pair = "\n".join(
        (
            "" if state.last is None else state.last.text(),
            "" if new is None else new.text(),
            reason,
        )
    )
    digest = hashlib.sha256(pair.encode("utf-8")).hexdigest()[:16]
    path = folder / f"size{size}-{digest}.json"
    if path.exists():
        return path
    tmp = folder / f".{path.name}.tmp{os.getpid()}"
    tmp.write_text(
        json.dumps(
            {
                "reason": reason,
                "cosigned_checkpoint": None if state.last is None else state.last.text(),
                "checkpoint": None if new is None else new.text(),
                "log_answer": doc,
                "observed_at": int(time.time()),
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    os.replace(tmp, path)
    return path


def _refuse(state: WitnessState, reason: str, new: Checkpoint | None, doc: Any) -> Outcome:
    return Outcome(
        False,
        False,
        None if new is None else new.size,
        f"INCONSISTENT LOG: {reason}",
        _evidence(state, reason, new, doc),
    )


def _hexes(doc: dict[str, Any]) -> list[bytes]:
    items = doc.get("proof")
    if not isinstance(items, list):
        raise LedgerError("the log's consistency proof holds no list of hashes")
    try:
        return [bytes.fromhex(str(h)) for h in items]
    except ValueError:
        raise LedgerError("the log's consistency proof holds a hash that is not hex") from None


def poll_once(
    state: WitnessState, client: LogClient, log_key: Ed25519PublicKey, now: float | None = None
) -> Outcome:
    """One poll: the newest head checked against the last one cosigned, cosigned and posted
    when consistent; refused (evidence kept) when not."""
    last = state.last
    doc = client.ledger_head() if last is None else client.consistency_proof(last.size)
    text = doc.get("checkpoint")
    if not isinstance(text, str):
        raise LedgerError("the log's answer holds no checkpoint")
    new = parse_checkpoint(text).without_cosignatures()
    if not new.signed_by(new.origin, log_key):
        return Outcome(
            False,
            False,
            new.size,
            "the log's head is not signed by its key (a "
            "head from elsewhere, or the wrong --public-key): not cosigned",
        )
    if last is not None:
        if new.origin != last.origin:
            return Outcome(
                False,
                False,
                new.size,
                f"the head is of the log {new.origin!r}, not "
                f"{last.origin!r} which this witness watches",
            )
        if new.size < last.size:
            return _refuse(
                state, f"the log's head went back from size {last.size} to {new.size}", new, doc
            )
        if new.size == last.size:
            if new.root != last.root:
                return _refuse(
                    state,
                    f"two heads of size {new.size} with different roots: the "
                    "log rewrote its history and signed it again",
                    new,
                    doc,
                )
            return Outcome(True, False, new.size, f"no new head (size {new.size}, cosigned)")
        if doc.get("old_size") != last.size:
            raise LedgerError("the log answered a consistency proof from another size")
        if not verify_consistency(last.size, new.size, last.root, new.root, _hexes(doc)):
            return _refuse(
                state,
                f"the head at size {new.size} does not extend the head at size "
                f"{last.size} this witness cosigned: the log rewrote its history "
                "and signed it again (a fork)",
                new,
                doc,
            )
    t = int(time.time() if now is None else now)
    sig = cosign(new, state.key, state.name, t)
    client.post_cosignature(new.size, signature_line(sig), encode_public(state.key.public_key()))
    state.last = new
    state.save()
    said = (
        "first head seen (trusted on first use)"
        if last is None
        else (f"consistent with size {last.size}")
    )
    return Outcome(True, True, new.size, f"cosigned the head at size {new.size}: {said}")


def read_witness_key(text: str) -> tuple[str, Ed25519PublicKey]:
    """A witness's ``(name, key)`` from its verifier key (``witness.vkey``) or that file."""
    candidate = Path(text).expanduser()
    try:
        is_file = candidate.is_file()
    except OSError:
        is_file = False
    if is_file:
        try:
            text = candidate.read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError) as e:
            raise LedgerError(
                f"cannot read the witness key {candidate}: {e}", exit_code=2
            ) from None
    try:
        name, key, cosigner = parse_vkey(text)
    except (LedgerError, binascii.Error, ValueError) as e:
        raise LedgerError(f"--witness-key {text.strip()!r}: {e}", exit_code=2) from None
    if not cosigner:
        raise LedgerError(
            "--witness-key: a witness's key is a cosignature/v1 verifier key "
            "(type 0x04), as 'ledger witness' writes in witness.vkey",
            exit_code=2,
        )
    return name, key
