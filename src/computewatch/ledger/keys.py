"""Ed25519 keys: the server's, which signs checkpoints of the chain, and a node's or client's,
which signs its own usage reports (a software stand-in for hardware-based attestation: an auditor
can check that a report came from a known node, not that the node told the truth).

A private key is a PKCS#8 PEM file readable by its owner only; a public key travels as the
base64 of its 32 raw bytes, named by its key id (the first 16 hex digits of the SHA-256 of those
bytes).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from computewatch.ledger.chain import Entry, LedgerError, canonical
from computewatch.ledger.jcs import dumps_json as jcs_dumps
from computewatch.paths import check_private_file, create_private_file, make_private_dirs

CHECKPOINT_KIND = "checkpoint"
_CHECKPOINT_CONTEXT = b"computewatch-ledger-checkpoint:v1:"
_REPORT_CONTEXT = b"computewatch-signed-report:v1:"
_REPORT_CONTEXT_V2 = b"computewatch-signed-report:v2:"


def public_bytes(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(key: Ed25519PublicKey) -> str:
    return hashlib.sha256(public_bytes(key)).hexdigest()[:16]


def encode_public(key: Ed25519PublicKey) -> str:
    return base64.b64encode(public_bytes(key)).decode("ascii")


def decode_public(text: str) -> Ed25519PublicKey:
    """A public key from the base64 of its raw bytes, or from a PEM ``PUBLIC KEY`` block."""
    text = text.strip()
    if text.startswith("-----BEGIN"):
        try:
            key = serialization.load_pem_public_key(text.encode("ascii"))
        except (ValueError, UnicodeEncodeError) as e:
            raise LedgerError(f"not a PEM public key: {e}") from None
        if not isinstance(key, Ed25519PublicKey):
            raise LedgerError("the PEM public key is not an Ed25519 key")
        return key
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise LedgerError("a public key must be base64 of 32 bytes or a PEM block") from None
    if len(raw) != 32:
        raise LedgerError(f"an Ed25519 public key has 32 bytes, not {len(raw)}")
    return Ed25519PublicKey.from_public_bytes(raw)


def read_public_key(path: Path) -> Ed25519PublicKey:
    try:
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as e:
        raise LedgerError(f"cannot read the public key {path}: {e}") from None
    return decode_public(text)


def load_private_key(path: Path, what: str = "ledger signing key") -> Ed25519PrivateKey:
    """The private key in ``path``; a missing file is a :class:`LedgerError` (exit status 2)
    naming it: reading a key never creates one."""
    if not path.exists():
        raise LedgerError(
            f"no {what} at {path}: only the server (or 'computewatch ledger keygen') creates "
            "one; give the server's key with --key FILE",
            exit_code=2,
        )
    return load_or_create_private_key(path)


def create_private_key(path: Path) -> Ed25519PrivateKey:
    """A new private key written to ``path`` (mode 0600); an existing file is refused."""
    if path.exists():
        raise LedgerError(f"{path} exists already: a key is never overwritten", exit_code=2)
    return load_or_create_private_key(path)


def load_or_create_private_key(path: Path) -> Ed25519PrivateKey:
    """The private key in ``path``; a new one written there (mode 0600) when the file is
    missing. An existing key other users could read or change is refused (``chmod 600``)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        try:
            make_private_dirs(path.parent)
            if not create_private_file(path):  # another process made it first: use theirs
                return load_or_create_private_key(path)
            with open(path, "wb") as f:  # created empty with mode 0600 just above
                f.write(pem)
        except OSError as e:
            raise LedgerError(f"cannot write the signing key {path}: {e}") from None
        return key
    except OSError as e:
        raise LedgerError(f"cannot read the signing key {path}: {e}") from None
    check_private_file(path, "signing key", LedgerError)
    try:
        loaded = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as e:
        raise LedgerError(f"{path} is not an unencrypted PEM private key: {e}") from None
    if not isinstance(loaded, Ed25519PrivateKey):
        raise LedgerError(f"{path} holds a private key that is not Ed25519")
    return loaded


def checkpoint_body(head: Entry, key: Ed25519PrivateKey) -> dict[str, Any]:
    """The body of a checkpoint entry: the head it vouches for, signed."""
    message = _CHECKPOINT_CONTEXT + f"{head.seq}:{head.hash}".encode("ascii")
    return {
        "head_seq": head.seq,
        "head_hash": head.hash,
        "key_id": key_id(key.public_key()),
        "signature": base64.b64encode(key.sign(message)).decode("ascii"),
    }


def checkpoint_valid(body: Mapping[str, Any], key: Ed25519PublicKey) -> bool:
    try:
        message = _CHECKPOINT_CONTEXT + f"{int(body['head_seq'])}:{body['head_hash']}".encode(
            "ascii"
        )
        key.verify(base64.b64decode(str(body["signature"]), validate=True), message)
    except (KeyError, ValueError, TypeError, binascii.Error, InvalidSignature, UnicodeError):
        return False
    return True


ROTATION_KIND = "key-rotation"
"""An entry recording that the server's signing key changed: the old key signs the new one
(:func:`rotation_body`); checkpoints before it are signed by the old key, after it by the new."""
_ROTATION_CONTEXT = b"computewatch-ledger-key-rotation:v1:"


def rotation_body(old: Ed25519PrivateKey, new: Ed25519PublicKey) -> dict[str, Any]:
    """The body of a key-rotation entry: both public keys, the new one signed by the old."""
    message = _ROTATION_CONTEXT + f"{key_id(new)}:{encode_public(new)}".encode("ascii")
    return {
        "old_key_id": key_id(old.public_key()),
        "old_public_key": encode_public(old.public_key()),
        "new_key_id": key_id(new),
        "new_public_key": encode_public(new),
        "signature": _b64(old.sign(message)),
    }


def rotation_keys(body: Mapping[str, Any]) -> tuple[Ed25519PublicKey, Ed25519PublicKey] | None:
    """``(old, new)`` of a key-rotation body whose signature by the old key holds (else None)."""
    try:
        old = decode_public(str(body["old_public_key"]))
        new = decode_public(str(body["new_public_key"]))
        if key_id(old) != body["old_key_id"] or key_id(new) != body["new_key_id"]:
            return None
        message = _ROTATION_CONTEXT + f"{key_id(new)}:{encode_public(new)}".encode("ascii")
        old.verify(base64.b64decode(str(body["signature"]), validate=True), message)
    except (KeyError, ValueError, TypeError, binascii.Error, InvalidSignature, LedgerError):
        return None
    return old, new


def _report_message(bare: Mapping[str, Any]) -> bytes:
    """What a report's signature covers: the second format (with ``figures``) is the RFC 8785
    canonical JSON after ``computewatch-signed-report:v2:``; the first, the Python-spelled
    canonical JSON after ``...:v1:``."""
    if "figures" in bare:
        return _REPORT_CONTEXT_V2 + jcs_dumps(bare)  # string keys: a report is JSON
    return _REPORT_CONTEXT + canonical(bare)


def sign_report(report: Mapping[str, Any], key: Ed25519PrivateKey) -> dict[str, Any]:
    """``report`` with ``signed_by`` (key id) and ``signature`` over its canonical JSON."""
    bare = {k: v for k, v in report.items() if k not in ("signed_by", "signature")}
    signed_by = key_id(key.public_key())
    message = _report_message({**bare, "signed_by": signed_by})
    return {**bare, "signed_by": signed_by, "signature": _b64(key.sign(message))}


def report_valid(report: Mapping[str, Any], key: Ed25519PublicKey) -> bool:
    """Whether ``report`` was signed by ``key`` and not changed since."""
    bare = {k: v for k, v in report.items() if k != "signature"}
    if bare.get("signed_by") != key_id(key):
        return False
    try:
        key.verify(base64.b64decode(str(report["signature"]), validate=True), _report_message(bare))
    except (KeyError, ValueError, binascii.Error, InvalidSignature, LedgerError):
        return False
    return True


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
