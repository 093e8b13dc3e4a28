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
    "key_hash",
    "parse_checkpoint",
    "sign_checkpoint",
]

DEFAULT_ORIGIN: Final = "computewatch.ledger"
_DASH: Final = "\u2014 "
_ED25519: Final = b"\x01"


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

    def with_signature(self, sig: NoteSignature) -> Checkpoint:
        return Checkpoint(self.origin, self.size, self.root, self.time, self.body,
                          (*self.signatures, sig))  # fmt: skip


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
    signatures: list[NoteSignature] = []
    for line in sigs.split("\n"):
        if not line:
            continue
        if not line.startswith(_DASH):
            raise LedgerError(f"a checkpoint signature line starts with an em dash: {line!r}")
        name, _, b64 = line[len(_DASH) :].rpartition(" ")
        try:
            raw = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            raise LedgerError(f"a checkpoint signature is not base64: {line!r}") from None
        if not name or len(raw) < 5:
            raise LedgerError(f"a checkpoint signature line is malformed: {line!r}")
        signatures.append(NoteSignature(name, raw[:4], raw[4:]))
    if not signatures:
        raise LedgerError("a checkpoint without a signature")
    return Checkpoint(origin, int(size_text), root, time, body, tuple(signatures))
