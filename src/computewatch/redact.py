"""Secrets out of command lines and settings before they are stored or exported.

A value is replaced by :data:`MARKER` (so a reader sees that something was there) when its name
means a secret: ``--password=x``, ``--api-token x`` (the next argument), ``API_KEY=x``,
``Authorization: Bearer x``, ``"token": "x"``, ``--password:x``, a URL's query
(``https://h/cb?token=x``), a value's own ``NAME=VALUE`` (``--tag note=PASSWORD=x``); and the
password of a URL (``postgres://user:pw@host`` keeps the user, and so does ``user:pw@host``
without a scheme). A name means a secret when one of its components
(split at ``-``, ``_``, ``.`` and camelCase: ``api_key`` is ``api`` + ``key``, ``--keyframes``
is one component) is a word of :data:`SECRET_WORDS`, or when it contains a name the user
listed (``[privacy] redact``). A short option (``-p x``) cannot be told from any other and is
left as it is (docs/security.md).

Every function here is pure but :func:`configured_names` and :func:`use_names`, which hold the
configured list of the process.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence

from computewatch.config import ConfigError, load_config

__all__ = [
    "MARKER",
    "SECRET_WORDS",
    "configured_names",
    "is_secret_name",
    "redact_argv",
    "redact_mapping",
    "redact_text",
    "redact_urls",
    "use_names",
]

MARKER = "***"
"""What a redacted value becomes."""

SECRET_WORDS = frozenset(
    {
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "token",
        "secret",
        "key",
        "apikey",
        "accesskey",
        "secretkey",
        "privatekey",
        "authtoken",
        "accesstoken",
        "refreshtoken",
        "clientsecret",
        "credential",
        "credentials",
        "creds",
        "auth",
        "authorization",
        "session",
        "sessionid",
        "cookie",
        "signature",
        "sig",
        "dsn",
    }
)
"""Name components that mean a secret (compared lower-case, whole components only)."""

# Tokenizer special tokens and token ids are settings, not secrets: --pad-token-id 0,
# --eos_token "</s>".
_SPECIAL_TOKENS = frozenset({"pad", "eos", "bos", "unk", "sep", "cls", "mask"})
# A flag that turns something off takes no secret value: --no-auth, --disable-token.
_NEGATIONS = frozenset({"no", "disable", "without", "skip"})

_SPLIT = re.compile(r"[^A-Za-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_FLAG = re.compile(r"^(--?)([A-Za-z][A-Za-z0-9_.-]*)$")
_FLAG_VALUE = re.compile(r"^(--?[A-Za-z][A-Za-z0-9_.-]*)=(.*)$", re.DOTALL)
_FLAG_COLON = re.compile(r"^(--?[A-Za-z][A-Za-z0-9_.-]*):(.+)$", re.DOTALL)
# ?NAME=VALUE or &NAME=VALUE in a URL's query
_QUERY_PARAM = re.compile(r"([?&;])([A-Za-z0-9_.\-\[\]]+)=([^&#\s\"';]*)")
# user:password@host with no scheme (rsync, scp-like, some drivers); not mailto:
_BARE_USERINFO = re.compile(
    r"(?<![A-Za-z0-9+.:/-])([A-Za-z0-9_][A-Za-z0-9_.-]*):([^@/\s:]+)@(?=[A-Za-z0-9\[])"
)
# NAME=VALUE, also Hydra's overrides (+db.password=x, ~key=x)
_ASSIGN = re.compile(r"^([+~]{0,2}[A-Za-z_][A-Za-z0-9_.-]*)=(.*)$", re.DOTALL)
_HEADER = re.compile(r"^(\s*)([A-Za-z][A-Za-z0-9_-]*)(\s*:\s*)(.+)$", re.DOTALL)
_AUTH_SCHEME = re.compile(r"^((?:bearer|basic|token|digest|negotiate|apikey)\s+)", re.IGNORECASE)
# NAME: [SCHEME] VALUE inside a longer text (a shell string: curl -H 'Authorization: Basic x')
_INLINE_HEADER = re.compile(
    r"\b([A-Za-z][A-Za-z0-9_-]*)(\s*:\s*)"
    r"((?:bearer|basic|token|digest|negotiate|apikey)\s+)?([^\s\"',;]+)",
    re.IGNORECASE,
)
_BEARER = re.compile(r"\b(bearer\s+)[^\s\"',;]+", re.IGNORECASE)
# scheme://user:password@ (RFC 3986 userinfo); the user is kept.
_URL_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)([^:/@\s]*):([^@/\s]+)@")
_QUOTED = re.compile(r"([\"'])([A-Za-z][A-Za-z0-9_.-]*)\1(\s*[:=]\s*)([\"'])(.*?)\4", re.DOTALL)
_SPACE = re.compile(r"(\s+)")


def _components(name: str) -> list[str]:
    return [c.lower() for part in _SPLIT.split(name) for c in _CAMEL.split(part) if c]


def _contains(seq: list[str], sub: list[str]) -> bool:
    n = len(sub)
    return n > 0 and any(seq[i : i + n] == sub for i in range(len(seq) - n + 1))


def is_secret_name(name: str, extra: Iterable[str] = ()) -> bool:
    """Whether a flag, variable or key called ``name`` holds a secret (dashes are ignored)."""
    parts = _components(name)
    if not parts:
        return False
    if any(_contains(parts, _components(e)) for e in extra):
        return True
    if parts[0] in _NEGATIONS:
        return False
    for i, c in enumerate(parts):
        if c not in SECRET_WORDS:
            continue
        if c == "token" and (
            (i > 0 and parts[i - 1] in _SPECIAL_TOKENS)
            or (i + 1 < len(parts) and parts[i + 1] in ("id", "ids"))
        ):
            continue
        return True
    return False


def redact_urls(text: str, extra: Iterable[str] = ()) -> str:
    """``text`` with the password of every ``scheme://user:password@`` (and ``user:password@``
    without a scheme) replaced, and every query parameter with a secret name
    (``?token=x``)."""
    ex = tuple(extra)
    text = _URL_USERINFO.sub(lambda m: f"{m[1]}{m[2]}:{MARKER}@", text)
    text = _BARE_USERINFO.sub(
        lambda m: m[0] if m[1].lower() == "mailto" else f"{m[1]}:{MARKER}@", text
    )
    return _QUERY_PARAM.sub(
        lambda m: f"{m[1]}{m[2]}={MARKER}" if m[3] and is_secret_name(m[2], ex) else m[0], text
    )


def _redact_value(value: str) -> str:
    """A secret value: ``Bearer x`` keeps its scheme word; anything else becomes the marker."""
    m = _AUTH_SCHEME.match(value.strip())
    return f"{m[1]}{MARKER}" if m else MARKER


def _redact_word(arg: str, extra: tuple[str, ...]) -> str:
    """One argument on its own (the ``--flag VALUE`` pair is handled by the caller)."""
    m = _FLAG_VALUE.match(arg)
    if m and is_secret_name(m[1], extra):
        return f"{m[1]}={MARKER}"
    if m and _ASSIGN.match(m[2]):  # --tag=note=PASSWORD=x
        return f"{m[1]}={_redact_word(m[2], extra)}"
    m = _FLAG_COLON.match(arg)
    if m and "//" not in m[2][:2] and is_secret_name(m[1], extra):
        return f"{m[1]}:{MARKER}"
    m = _ASSIGN.match(arg)
    if m and is_secret_name(m[1], extra):
        return f"{m[1]}={MARKER}"
    if m and _ASSIGN.match(m[2]):  # a value that is itself NAME=VALUE: note=PASSWORD=x
        return f"{m[1]}={_redact_word(m[2], extra)}"
    m = _HEADER.match(arg)
    if m and "//" not in m[4][:2] and is_secret_name(m[2], extra):
        return f"{m[1]}{m[2]}{m[3]}{_redact_value(m[4])}"
    return redact_urls(_BEARER.sub(lambda b: f"{b[1]}{MARKER}", _redact_quoted(arg, extra)), extra)


def _redact_quoted(text: str, extra: tuple[str, ...]) -> str:
    """``"name": "value"`` pairs (JSON, Python dicts) with a secret name."""
    return _QUOTED.sub(
        lambda q: (
            f"{q[1]}{q[2]}{q[1]}{q[3]}{q[4]}{MARKER}{q[4]}" if is_secret_name(q[2], extra) else q[0]
        ),
        text,
    )


def _takes_secret(arg: str, extra: tuple[str, ...]) -> bool:
    m = _FLAG.match(arg)
    # One letter after one dash (-p, -k) could be anything: not guessed.
    return m is not None and (m[1] == "--" or len(m[2]) > 1) and is_secret_name(m[2], extra)


def _redact_words(words: Sequence[str], extra: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    secret_next = False
    for w in words:
        if secret_next and w and not (w.startswith("-") and len(w) > 1):
            out.append(MARKER)
            secret_next = False
            continue
        secret_next = _takes_secret(w, extra)
        if not secret_next and _SPACE.search(w.strip()):
            out.append(redact_text(w, extra))  # a shell string: bash -c "cmd --token x"
        else:
            out.append(_redact_word(w, extra))
    return out


def redact_argv(argv: Sequence[str], extra: Iterable[str] = ()) -> list[str]:
    """``argv`` with every secret value replaced by :data:`MARKER`; ``extra``: more names."""
    return _redact_words(list(argv), tuple(extra))


def redact_text(text: str, extra: Iterable[str] = ()) -> str:
    """A command line or header as one string, redacted word by word (whitespace is kept)."""
    ex = tuple(extra)
    whole = _HEADER.match(text)
    if whole and "//" not in whole[4][:2] and is_secret_name(whole[2], ex):
        return _redact_word(text, ex)
    text = _INLINE_HEADER.sub(
        lambda m: (
            f"{m[1]}{m[2]}{m[3] or ''}{MARKER}"
            if "//" not in m[4][:2] and is_secret_name(m[1], ex)
            else m[0]
        ),
        _BEARER.sub(lambda b: f"{b[1]}{MARKER}", _redact_quoted(text, ex)),
    )
    parts = _SPACE.split(text)
    words = _redact_words(parts[0::2], ex)
    parts[0::2] = words
    return "".join(parts)


def redact_mapping(values: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
    """``values`` (tags, settings) with the value of every secret-named key replaced and the
    passwords of URLs in the others removed."""
    ex = tuple(extra)
    return {
        k: MARKER
        if is_secret_name(k, ex)
        else _redact_word(v, ex)
        if _ASSIGN.match(v)
        else redact_urls(v, ex)
        for k, v in values.items()
    }


_given: list[tuple[str, ...]] = []  # the last use_names() list, when one was given


def use_names(names: Iterable[str]) -> None:
    """Make ``names`` this process's configured list (the CLI calls it with the ``[privacy]
    redact`` of the configuration it loaded, which may come from ``--config``)."""
    _given[:] = [tuple(names)]


@functools.cache
def _default_names() -> tuple[str, ...]:
    try:
        return load_config().redact_names
    except ConfigError:
        # The command that loaded the configuration has already said what is wrong with it;
        # the built-in words still apply.
        return ()


def configured_names() -> tuple[str, ...]:
    """The ``[privacy] redact`` names: those given to :func:`use_names`, else those of the
    default configuration file (read once)."""
    return _given[-1] if _given else _default_names()
