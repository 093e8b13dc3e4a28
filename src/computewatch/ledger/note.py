"""Signed tree heads as C2SP ``tlog-checkpoint`` signed notes (the format of Go's checksum
database, Sigsum and Rekor), so that any language can check one:

```
<origin>
<tree size, decimal>
<root hash, base64>
time <Unix seconds>          (an extension line: when the head was signed)

— <key name> <base64(4-byte key hash ‖ 64-byte Ed25519 signature)>
```

The signature is over the body: every line up to and including the newline before the blank
line. An Ed25519 key's hash is the first 4 bytes of SHA-256(name ‖ 0x0A ‖ 0x01 ‖ public key)
(C2SP ``signed-note``). A note may carry several signature lines (the log's, then witnesses').

A witness's cosignature (C2SP ``tlog-cosignature``, ``cosignature/v1``) is one more signature
line: its key hash is the first 4 bytes of SHA-256(name ‖ 0x0A ‖ 0x04 ‖ public key), and its
bytes are an 8-byte big-endian Unix time then the Ed25519 signature of ``cosignature/v1\n``,
``time <that time>\n`` and the checkpoint's body. Public keys travel as C2SP verifier keys
(``vkey``): ``<name>+<key hash, 8 hex digits>+<base64(type byte ‖ 32-byte key)>``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from computewatch.ledger.chain import LedgerError
from computewatch.ledger.keys import public_bytes

__all__ = [
    "DEFAULT_ORIGIN",
    "Checkpoint",
    "NoteSignature",
    "cosign",
    "cosignature_time",
    "cosigner_key_hash",
    "key_hash",
    "parse_checkpoint",
    "parse_signature_line",
    "parse_vkey",
    "sign_checkpoint",
    "vkey",
]

DEFAULT_ORIGIN: Final = "computewatch.ledger"
_DASH: Final = "\u2014 "
_ED25519: Final = b"\x01"
_COSIGNATURE_V1: Final = b"\x04"
_COSIGN_HEADER: Final = "cosignature/v1\n"


def key_hash(name: str, key: Ed25519PublicKey) -> bytes:
    """The 4-byte hash that names an Ed25519 key in a signature line."""
    return hashlib.sha256(name.encode("utf-8") + b"\n" + _ED25519 + public_bytes(key)).digest()[:4]


@dataclass(frozen=True, slots=True)
class NoteSignature:
    name: str
    key_hash: bytes
    signature: bytes


@dataclass(frozen=True, slots=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes
    time: int | None
    """Unix seconds of the ``time`` extension line (None when absent)."""
    body: str
    """The signed text: the lines up to the blank line, each ending in a newline."""
    signatures: tuple[NoteSignature, ...] = ()

    def text(self) -> str:
        """The whole note: body, blank line, signature lines."""
        lines = [
            f"{_DASH}{s.name} {base64.b64encode(s.key_hash + s.signature).decode('ascii')}\n"
            for s in self.signatures
        ]
        return self.body + "\n" + "".join(lines)

    def signed_by(self, name: str, key: Ed25519PublicKey) -> bool:
        """Whether one of the note's signature lines is a valid signature by ``key`` under
        ``name``."""
        want = key_hash(name, key)
        for s in self.signatures:
            if s.name != name or s.key_hash != want:
                continue
            try:
                key.verify(s.signature, self.body.encode("utf-8"))
            except InvalidSignature:
                continue
            return True
        return False

    def cosigned_by(self, name: str, key: Ed25519PublicKey) -> int | None:
        """The time of a valid ``cosignature/v1`` by ``key`` under ``name`` (None: none)."""
        want = cosigner_key_hash(name, key)
        for s in self.signatures:
            if s.name != name or s.key_hash != want or len(s.signature) != 72:
                continue
            t = int.from_bytes(s.signature[:8], "big")
            try:
                key.verify(s.signature[8:], _cosigned_message(t, self.body))
            except InvalidSignature:
                continue
            return t
        return None

    def without_cosignatures(self) -> Checkpoint:
        """The note with its first signature line only (the log's)."""
        return Checkpoint(self.origin, self.size, self.root, self.time, self.body,
                          self.signatures[:1])  # fmt: skip

    def with_signature(self, sig: NoteSignature) -> Checkpoint:
        return Checkpoint(self.origin, self.size, self.root, self.time, self.body,
                          (*self.signatures, sig))  # fmt: skip


def cosigner_key_hash(name: str, key: Ed25519PublicKey) -> bytes:
    """The 4-byte hash that names a witness's key in a ``cosignature/v1`` line."""
    return hashlib.sha256(
        name.encode("utf-8") + b"\n" + _COSIGNATURE_V1 + public_bytes(key)
    ).digest()[:4]


def _cosigned_message(t: int, body: str) -> bytes:
    return f"{_COSIGN_HEADER}time {t}\n{body}".encode()


def cosign(cp: Checkpoint, key: Ed25519PrivateKey, name: str, t: int) -> NoteSignature:
    """A witness's ``cosignature/v1`` of ``cp`` at Unix time ``t``."""
    if not name or " " in name or "\n" in name or "+" in name:
        raise LedgerError(f"a witness name is one word without '+': {name!r}")
    sig = key.sign(_cosigned_message(t, cp.body))
    return NoteSignature(name, cosigner_key_hash(name, key.public_key()),
                         t.to_bytes(8, "big") + sig)  # fmt: skip


def cosignature_time(sig: NoteSignature) -> int | None:
    return int.from_bytes(sig.signature[:8], "big") if len(sig.signature) == 72 else None


def signature_line(sig: NoteSignature) -> str:
    return f"{_DASH}{sig.name} {base64.b64encode(sig.key_hash + sig.signature).decode('ascii')}"


def parse_signature_line(line: str) -> NoteSignature:
    line = line.rstrip("\n")
    if not line.startswith(_DASH):
        raise LedgerError(f"a signature line starts with an em dash: {line!r}")
    name, _, b64 = line[len(_DASH) :].rpartition(" ")
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise LedgerError(f"a signature line's signature is not base64: {line!r}") from None
    if not name or len(raw) < 5:
        raise LedgerError(f"a signature line is malformed: {line!r}")
    return NoteSignature(name, raw[:4], raw[4:])


def vkey(name: str, key: Ed25519PublicKey, *, cosigner: bool = False) -> str:
    """The C2SP verifier key of ``key`` under ``name`` (a witness's: ``cosigner=True``)."""
    kind = _COSIGNATURE_V1 if cosigner else _ED25519
    h = cosigner_key_hash(name, key) if cosigner else key_hash(name, key)
    return f"{name}+{h.hex()}+{base64.b64encode(kind + public_bytes(key)).decode('ascii')}"


def parse_vkey(text: str) -> tuple[str, Ed25519PublicKey, bool]:
    """``(name, key, cosigner)`` of a verifier key (type 0x01: a log's Ed25519 key; 0x04: a
    witness's ``cosignature/v1`` key)."""
    parts = text.strip().split("+", 2)  # a name holds no '+'; base64 may
    if len(parts) != 3 or not parts[0]:
        raise LedgerError("a verifier key is NAME+HASH+BASE64 (C2SP signed-note)")
    name, hash_hex, b64 = parts
    try:
        raw = base64.b64decode(b64, validate=True)
        want = bytes.fromhex(hash_hex)
    except (binascii.Error, ValueError):
        raise LedgerError("a verifier key's hash is hex and its key base64") from None
    if len(raw) != 33 or raw[:1] not in (_ED25519, _COSIGNATURE_V1):
        raise LedgerError("a verifier key holds a type byte (0x01 or 0x04) and 32 key bytes")
    key = Ed25519PublicKey.from_public_bytes(raw[1:])
    cosigner = raw[:1] == _COSIGNATURE_V1
    if want != (cosigner_key_hash(name, key) if cosigner else key_hash(name, key)):
        raise LedgerError("a verifier key's hash does not match its name and key")
    return name, key, cosigner


def checkpoint_body(origin: str, size: int, root: bytes, time: int | None) -> str:
    if not origin or "\n" in origin:
        raise LedgerError("a checkpoint's origin is one non-empty line")
    body = f"{origin}\n{size}\n{base64.b64encode(root).decode('ascii')}\n"
    return body + (f"time {time}\n" if time is not None else "")


def sign_checkpoint(origin: str, size: int, root: bytes, time: int | None,
                    key: Ed25519PrivateKey, name: str | None = None) -> Checkpoint:  # fmt: skip
    """The checkpoint of the tree (``size``, ``root``) signed by ``key`` under ``name`` (the
    origin by default)."""
    body = checkpoint_body(origin, size, root, time)
    name = name or origin
    sig = NoteSignature(name, key_hash(name, key.public_key()), key.sign(body.encode("utf-8")))
    return Checkpoint(origin, size, root, time, body, (sig,))


def parse_checkpoint(text: str) -> Checkpoint:
    """A checkpoint note; a malformed one is a :class:`LedgerError` saying what is wrong."""
    body, sep, sigs = text.partition("\n\n")
    if not sep:
        raise LedgerError("not a signed checkpoint: no blank line before its signatures")
    body += "\n"
    lines = body.split("\n")[:-1]
    if len(lines) < 3:
        raise LedgerError("not a signed checkpoint: it needs origin, size and root lines")
    origin, size_text, root_text, *extensions = lines
    if not size_text.isdigit() or (size_text != "0" and size_text.startswith("0")):
        raise LedgerError(f"a checkpoint's tree size is a decimal number, not {size_text!r}")
    try:
        root = base64.b64decode(root_text, validate=True)
    except (binascii.Error, ValueError):
        raise LedgerError("a checkpoint's root hash is not base64") from None
    if len(root) != 32:
        raise LedgerError(f"a checkpoint's root hash has 32 bytes, not {len(root)}")
    time: int | None = None
    for ext in extensions:
        if ext.startswith("time ") and ext[5:].isdigit():
            time = int(ext[5:])
    signatures = [parse_signature_line(line) for line in sigs.split("\n") if line]
    if not signatures:
        raise LedgerError("a checkpoint without a signature")
    return Checkpoint(origin, int(size_text), root, time, body, tuple(signatures))
