"""The HTTP client of the upload protocol: ``POST /api/v1/runs`` with the standard library alone
(``urllib.request``), a timeout on every request, and one exception per way it can fail.

No message, exception or ``repr`` ever holds the token: it travels only in the
``Authorization`` header, and anything the server says back is scrubbed of it before it is
shown (a misbehaving server could echo it).

A busy server (429 or 503 with ``Retry-After``) is asked again after the time it names, with
jitter so that the clients it turned away together do not come back together, a few times and
within a bounded wait (:class:`Client`'s ``busy_retries`` and ``max_busy_wait``); then the
upload fails as :class:`ServerBusy` and the runs wait in the local store.
"""

from __future__ import annotations

import gzip
import html
import http.client
import json
import random
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from email.message import Message
from email.utils import parsedate_to_datetime
from typing import cast

from computewatch import jsonout
from computewatch._version import __version__
from computewatch.errors import ComputewatchError
from computewatch.redact import MARKER, redact_urls
from computewatch.upload.protocol import (
    MAX_BODY_BYTES,
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    IngestBatch,
    IngestResponse,
)

__all__ = [
    "BadToken",
    "BodyTooLarge",
    "Client",
    "ProtocolMismatch",
    "ServerBusy",
    "ServerFailed",
    "ServerUnreachable",
    "UploadError",
    "WrongScope",
    "busy_delay",
    "encode_batch",
    "parse_answer",
    "parse_retry_after",
]

INGEST_PATH = "/api/v1/runs"
DEFAULT_TIMEOUT = 10.0
_REASON_CHARS = 300
_NO_GZIP = frozenset({400, 415, 422})
"""Answers to a gzip body after which the client tries the same batch uncompressed."""


class UploadError(ComputewatchError):
    """An upload that did not go through; the runs stay in the local store for a later push.
    ``retryable``: worth trying again later as it is (the server down or overloaded)."""

    retryable = False


class ServerUnreachable(UploadError):
    """No answer: connection refused, name unknown, timeout, TLS failure."""

    retryable = True


class BadToken(UploadError):
    """401: the server does not know the token (or none was given)."""


class WrongScope(UploadError):
    """403: the token is valid but may not do this (an ingest token is needed to push)."""


class ProtocolMismatch(UploadError):
    """A 4xx the client cannot fix by retrying: the server refused the document (another
    protocol version, a field it does not accept); the message carries the server's reason."""


class BodyTooLarge(UploadError):
    """413: one request held more than the server takes."""


class ServerFailed(UploadError):
    """5xx (or 429): the server failed or is overloaded; try again later."""

    retryable = True


class ServerBusy(ServerFailed):
    """429, or 503 with ``Retry-After``: the server is overloaded and said when to come back
    (``retry_after`` seconds; None when it did not say)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


MAX_RETRY_AFTER = 300.0
"""A ``Retry-After`` longer than this is taken as this long."""


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` (RFC 9110 10.2.3: delay seconds, or an HTTP date) in seconds from now,
    within [0, MAX_RETRY_AFTER]; None when absent or unreadable."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        return min(float(text), MAX_RETRY_AFTER)
    try:
        when = parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return min(max(0.0, when - (time.time() if now is None else now)), MAX_RETRY_AFTER)


def busy_delay(retry_after: float | None, attempt: int, rng: random.Random | None = None) -> float:
    """Seconds to wait before asking a busy server again, the ``attempt``-th time (1, 2, ...):
    what it asked (1 s when it did not say), doubled at each attempt, capped at
    MAX_RETRY_AFTER, plus up to half again at random (jitter)."""
    base = min(MAX_RETRY_AFTER, max(retry_after or 1.0, 0.1) * 2.0 ** max(0, attempt - 1))
    r = rng if rng is not None else random
    return base * r.uniform(1.0, 1.5)


def encode_batch(batch: IngestBatch) -> bytes:
    """The request body of a batch: compact, standard JSON (non-finite numbers as null)."""
    return jsonout.dumps(batch, separators=(",", ":")).encode()


_DECLARATION_CODES = frozenset({"model_team", "base_model_grant"})
"""403 answers about a run's declared model (another team's), not about the token's scope."""


def _error_code(body: bytes) -> object:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return doc.get("error") if isinstance(doc, dict) else None


def _reason(body: bytes, token: str | None) -> str:
    """What the server said about a refusal, in one short line, without the token."""
    text = body.decode("utf-8", "replace").strip()
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        doc = None
    if isinstance(doc, dict):
        detail = doc.get("detail", doc.get("error", doc.get("message")))
        if detail is not None:
            text = detail if isinstance(detail, str) else json.dumps(detail)
    elif text[:1] == "<":  # an HTML error page (a reverse proxy's 502): its title says it
        title = re.search(r"<title[^>]*>(.*?)</title>", text, re.I | re.S)
        text = f"an HTML page: {html.unescape(title.group(1))}" if title else "an HTML page"
    if token:
        text = text.replace(token, MARKER)
    text = " ".join(text.split())
    return text[:_REASON_CHARS] + ("..." if len(text) > _REASON_CHARS else "")


class Client:
    """One server: ``url`` is its base URL (``https://cw.example.org``), ``token`` its bearer
    token. ``gzip``: compress request bodies (``Content-Encoding: gzip``; every server of
    protocol 1 takes it), about a quarter of the JSON for a run's series."""

    def __init__(
        self,
        url: str,
        token: str | None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        gzip: bool = True,
        busy_retries: int = 4,
        max_busy_wait: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self.timeout = timeout
        self.gzip = gzip
        self.busy_retries = busy_retries
        """How many times a busy server (:class:`ServerBusy`) is asked again per upload."""
        self.max_busy_wait = max_busy_wait
        """The most seconds one upload waits on a busy server in all."""
        self._sleep = sleep
        self._rng = rng if rng is not None else random.Random()
        self.busy_waits = 0
        """How many times this client waited on a busy server."""
        self.wire_bytes = 0
        """Request body bytes sent so far, as they went on the wire (compressed)."""

    def __repr__(self) -> str:
        return f"Client({redact_urls(self.url)!r})"

    @property
    def shown_url(self) -> str:
        return redact_urls(self.url)

    def ingest(self, batch: IngestBatch, *, timeout: float | None = None) -> IngestResponse:
        """Send one batch; the server's answer, one result per run. Raises an
        :class:`UploadError` subclass for every failure."""
        return self.ingest_body(encode_batch(batch), timeout=timeout)

    def ingest_body(
        self, body: bytes, *, timeout: float | None = None, deadline: float | None = None
    ) -> IngestResponse:
        """Send an encoded batch (:func:`encode_batch`). A busy server is asked again (see
        the class), never past ``deadline`` (a time.monotonic() value) when one is given."""
        waited = 0.0
        attempt = 0
        while True:
            try:
                return self._ingest_once(body, timeout=timeout)
            except ServerBusy as e:
                if e.retry_after is None:  # it did not say when: the caller's backoff decides
                    raise
                attempt += 1
                delay = busy_delay(e.retry_after, attempt, self._rng)
                late = deadline is not None and time.monotonic() + delay >= deadline
                if attempt > self.busy_retries or waited + delay > self.max_busy_wait or late:
                    raise
                self.busy_waits += 1
                self._sleep(delay)
                waited += delay

    def _ingest_once(self, body: bytes, *, timeout: float | None = None) -> IngestResponse:
        if len(body) > MAX_BODY_BYTES:
            raise BodyTooLarge(
                f"an upload of {len(body):,} bytes is over the protocol's {MAX_BODY_BYTES:,}"
            )
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            PROTOCOL_HEADER: str(PROTOCOL_VERSION),
            "User-Agent": f"computewatch/{__version__}",
        }
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        if self.gzip:
            packed = gzip.compress(body, compresslevel=6)
            status, answer, retry = self._post(
                INGEST_PATH, packed, {**headers, "Content-Encoding": "gzip"}, timeout
            )
            self.wire_bytes += len(packed)
            if status not in _NO_GZIP:
                return self._response(status, answer, retry)
            # A server that reads no compressed body (415, or 400/422 for a body it took for
            # JSON): the same batch as plain JSON, and plain JSON from now on if that goes.
            status, answer, retry = self._post(INGEST_PATH, body, headers, timeout)
            self.wire_bytes += len(body)
            if 200 <= status < 300:
                self.gzip = False
            return self._response(status, answer, retry)
        status, answer, retry = self._post(INGEST_PATH, body, headers, timeout)
        self.wire_bytes += len(body)
        return self._response(status, answer, retry)

    def _post(
        self, path: str, body: bytes, headers: dict[str, str], timeout: float | None
    ) -> tuple[int, bytes, float | None]:
        """The answer's status, body and ``Retry-After`` (seconds, None when absent)."""
        req = urllib.request.Request(self.url + path, data=body, headers=headers, method="POST")
        where = self.shown_url
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                return int(resp.status), resp.read(), _retry_after(resp.headers)
        except urllib.error.HTTPError as e:
            try:
                answer = e.read()
            except (OSError, http.client.HTTPException):
                answer = b""
            finally:
                e.close()
            return int(e.code), answer, _retry_after(e.headers)
        except urllib.error.URLError as e:
            why = e.reason
            text = why.strerror if isinstance(why, OSError) and why.strerror else str(why)
            raise ServerUnreachable(f"cannot reach the server at {where}: {text}") from None
        except TimeoutError:
            raise ServerUnreachable(
                f"the server at {where} did not answer within {timeout or self.timeout:g} s"
            ) from None
        except (OSError, http.client.HTTPException) as e:
            text = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
            raise ServerUnreachable(
                f"the connection to the server at {where} failed: {text}"
            ) from None

    def _response(self, status: int, answer: bytes, retry_after: float | None) -> IngestResponse:
        return parse_answer(
            status, answer, where=self.shown_url, token=self._token, retry_after=retry_after
        )


def _retry_after(headers: Message | None) -> float | None:
    return parse_retry_after(headers.get("Retry-After")) if headers is not None else None


def parse_answer(
    status: int,
    answer: bytes,
    *,
    where: str,
    token: str | None,
    retry_after: float | None = None,
) -> IngestResponse:
    """The server's answer to an ingest request (HTTP ``status``, body ``answer``,
    ``Retry-After`` in seconds) as an :class:`IngestResponse`, or the :class:`UploadError` it
    means; ``where`` names the server in messages, from which ``token`` is removed."""
    reason = _reason(answer, token)
    said = f": {reason}" if reason else ""
    if status == 401:
        if not token:
            raise BadToken(
                f"the server at {where} wants a token: give --token, COMPUTEWATCH_TOKEN or "
                "[server] token_file"
            )
        raise BadToken(f"the server at {where} refused the token (401){said}")
    if status == 403:
        if _error_code(answer) in _DECLARATION_CODES:  # the run's model, not the token
            raise WrongScope(f"the server at {where} refused the run's model (403){said}")
        raise WrongScope(
            f"the token may not upload to {where} (403: an ingest token is needed){said}"
        )
    if status == 413:
        raise BodyTooLarge(f"the server at {where} refused an upload as too large (413)")
    if status == 429:
        raise ServerBusy(f"the server at {where} is busy ({status}){said}", retry_after)
    if status == 503 and retry_after is not None:  # unavailable for a while: retried as busy
        raise ServerBusy(f"the server at {where} failed ({status}){said}", retry_after)
    if status >= 500:
        raise ServerFailed(f"the server at {where} failed ({status}){said}")
    if status == 409:  # a run id another team holds: the document is fine, its owner not
        raise ProtocolMismatch(f"the server at {where} refused the upload (409){said}")
    if not 200 <= status < 300:
        raise ProtocolMismatch(
            f"the server at {where} refused the upload ({status}){said} "
            f"(this client speaks upload protocol {PROTOCOL_VERSION})"
        )
    try:
        doc = json.loads(answer)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        doc = None
    if (
        not isinstance(doc, dict)
        or not isinstance(doc.get("results"), list)
        or not all(
            isinstance(r, dict)
            and isinstance(r.get("id"), str)
            and isinstance(r.get("seq"), int)
            and isinstance(r.get("stored"), bool)
            for r in doc["results"]
        )
    ):
        raise ProtocolMismatch(
            f"the server at {where} answered {status} without an ingest response "
            f"(is {where} a computewatch server speaking protocol {PROTOCOL_VERSION}?)"
        )
    return cast(IngestResponse, doc)
