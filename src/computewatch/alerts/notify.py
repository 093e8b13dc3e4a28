"""Notification targets and their delivery: off the sampling thread, with retries and backoff.

Targets (``--notify`` or ``receivers:`` in a rules file):

- ``webhook:URL``: a JSON document per batch of changes (docs/alerts.md, "Webhook payload");
- ``slack:URL``: a Slack-compatible incoming webhook, ``{"text": ...}``;
- ``alertmanager:URL``: Alertmanager's API v2, ``POST URL/api/v2/alerts``, with firing alerts
  re-posted every ``resend_interval`` as Prometheus does, so Alertmanager neither resolves them
  by timeout nor forgets them after a restart;
- ``terminal``: one line per change on the run's output.

Each target has its own thread and a bounded queue: ``submit`` never blocks (when the queue is
full the oldest batch is dropped and counted), so a dead or slow endpoint never holds up
sampling. A failed POST (connection error, timeout, HTTP 429 or 5xx) is retried with exponential
backoff; other HTTP errors are not retried. Failures are reported once per streak through
``warn``.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TextIO

from computewatch import jsonout
from computewatch._version import __version__
from computewatch.alerts.event import AlertEvent
from computewatch.analysis.common import iso
from computewatch.errors import ComputewatchError

__all__ = [
    "KINDS",
    "Delivery",
    "DeliveryError",
    "Target",
    "alertmanager_payload",
    "backoff_delays",
    "parse_target",
    "slack_payload",
    "terminal_lines",
    "webhook_payload",
]

KINDS = ("webhook", "slack", "alertmanager", "terminal")
PAYLOAD_VERSION = "1"


@dataclass(frozen=True, slots=True)
class Target:
    kind: str  # one of KINDS
    url: str = ""

    def __str__(self) -> str:
        return self.kind if not self.url else f"{self.kind}:{self.url}"


def parse_target(text: str) -> Target:
    """``terminal`` or ``KIND:URL`` with an http(s) URL; ValueError with the reason if not."""
    text = text.strip()
    if text == "terminal":
        return Target("terminal")
    kind, sep, url = text.partition(":")
    if not sep or kind not in KINDS:
        raise ValueError(
            f"notification target {text!r}: expected terminal, webhook:URL, slack:URL or "
            "alertmanager:URL"
        )
    if kind == "terminal":
        raise ValueError("notification target 'terminal' takes no URL")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"notification target {text!r}: {url!r} is not an http(s) URL")
    return Target(kind, url.rstrip("/") if kind == "alertmanager" else url)


# -- payloads ----------------------------------------------------------------------------------


def webhook_payload(events: Sequence[AlertEvent]) -> dict[str, object]:
    """The generic webhook document: a version, the overall status and the alerts."""
    firing = sum(1 for e in events if e.status == "firing")
    return {
        "version": PAYLOAD_VERSION,
        "source": "computewatch",
        "host": socket.gethostname(),
        "status": "firing" if firing else "resolved",
        "alerts": [e.to_json() for e in events],
    }


def _line(e: AlertEvent) -> str:
    return f"[{e.status.upper()}] {e.rule} ({e.severity}): {e.summary}"


def slack_payload(events: Sequence[AlertEvent]) -> dict[str, object]:
    """A Slack-compatible message: one line per alert in ``text``."""
    return {"text": "\n".join(_line(e) for e in events)}


def terminal_lines(events: Sequence[AlertEvent]) -> list[str]:
    """One line per change, prefixed with the local time of the change."""
    out = []
    for e in events:
        t = e.ends_at if e.status == "resolved" and e.ends_at is not None else e.starts_at
        out.append(f"{datetime.fromtimestamp(t):%H:%M:%S} alert {_line(e)}")
    return out


def alertmanager_payload(
    events: Sequence[AlertEvent], *, now: float, valid_for: float, generator_url: str
) -> list[dict[str, object]]:
    """Alertmanager API v2 alerts: a firing alert ends ``valid_for`` from ``now`` unless re-sent
    (Prometheus uses 4 x its resend delay), a resolved one at the time it resolved."""
    out: list[dict[str, object]] = []
    for e in events:
        doc = e.to_json()
        ends = e.ends_at if e.status == "resolved" and e.ends_at is not None else now + valid_for
        out.append(
            {
                "labels": dict(e.labels),
                "annotations": doc["annotations"],
                "startsAt": iso(e.starts_at),
                "endsAt": iso(ends),
                "generatorURL": f"{generator_url}#{urllib.parse.quote(e.rule)}",
            }
        )
    return out


# -- delivery ----------------------------------------------------------------------------------


class DeliveryError(ComputewatchError):
    """One failed attempt; ``retry`` says whether trying again may help."""

    def __init__(self, message: str, *, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


def backoff_delays(attempts: int, initial: float, maximum: float) -> list[float]:
    """Waits between ``attempts`` tries: ``initial``, doubling each time, capped at ``maximum``."""
    return [min(initial * 2**i, maximum) for i in range(max(attempts - 1, 0))]


def post_json(url: str, doc: object, timeout: float) -> None:
    """POST ``doc`` as JSON; :class:`DeliveryError` on failure (retryable or not)."""
    body = jsonout.dumps(doc, separators=(",", ":")).encode()
    req = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": f"computewatch/{__version__}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            resp.read()
    except urllib.error.HTTPError as e:
        retry = e.code == 429 or e.code >= 500
        raise DeliveryError(f"HTTP {e.code} {e.reason}", retry=retry) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", None) or e
        raise DeliveryError(f"{reason}", retry=True) from None


class Delivery:
    """One target's queue and thread: ``submit`` returns at once; ``send`` runs on the thread.

    ``send(item)`` delivers one queued item and raises :class:`DeliveryError` on failure; it is
    tried up to ``attempts`` times with :func:`backoff_delays` between tries.
    """

    def __init__(
        self,
        name: str,
        send: Callable[[object], None],
        *,
        warn: Callable[[str], None],
        queue_size: int = 64,
        attempts: int = 6,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
    ) -> None:
        self.name = name
        self._send = send
        self._warn = warn
        self._delays = backoff_delays(attempts, backoff, max_backoff)
        self._queue: deque[object] = deque(maxlen=max(queue_size, 1))
        self._cond = threading.Condition()
        self._closing = False
        self._give_up_at: float | None = None
        self._failing = False
        self._warned_drop = False
        self.sent = 0
        self.failed = 0  # batches given up on
        self.dropped = 0  # batches pushed out of a full queue
        self.attempts = 0
        self._thread = threading.Thread(target=self._run, name=f"computewatch-notify-{name}")
        self._thread.daemon = True
        self._thread.start()

    def submit(self, item: object) -> None:
        """Queue ``item`` without blocking; a full queue drops its oldest item."""
        with self._cond:
            if self._closing:
                return
            if len(self._queue) == self._queue.maxlen:
                self.dropped += 1
                if not self._warned_drop:
                    self._warned_drop = True
                    self._warn(f"{self.name}: notifications queue full; dropping the oldest")
            self._queue.append(item)
            self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._queue)

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what is queued for up to ``timeout`` seconds, then stop."""
        with self._cond:
            self._closing = True
            self._give_up_at = time.monotonic() + timeout
            self._cond.notify_all()
        self._thread.join(timeout + 1.0)
        left = self.pending()
        if left or self._thread.is_alive():
            self._warn(f"{self.name}: {max(left, 1)} notification(s) not delivered at exit")

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                item = self._queue.popleft()
            self._deliver(item)

    def _deliver(self, item: object) -> None:
        for i in range(len(self._delays) + 1):
            self.attempts += 1
            try:
                self._send(item)
            except DeliveryError as e:
                if e.retry and i < len(self._delays) and self._wait(self._delays[i]):
                    continue
                self.failed += 1
                if not self._failing:
                    self._failing = True
                    tries = f"after {i + 1} attempt(s)" if e.retry else "(not retried)"
                    self._warn(f"{self.name}: delivery failed {tries}: {e}")
                return
            except Exception as e:  # a bug in formatting must not kill the thread
                self.failed += 1
                self._warn(f"{self.name}: delivery failed: {type(e).__name__}: {e}")
                return
            self.sent += 1
            if self._failing:
                self._failing = False
                self._warn(f"{self.name}: delivering again")
            return

    def _wait(self, delay: float) -> bool:
        """Sleep ``delay`` before a retry; False when closing leaves no time for it."""
        with self._cond:
            if self._give_up_at is not None and time.monotonic() + delay > self._give_up_at:
                return False
        deadline = time.monotonic() + delay
        with self._cond:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return True
                if self._give_up_at is not None and time.monotonic() + left > self._give_up_at:
                    return False
                self._cond.wait(left)


def write_lines(out: TextIO, lines: Sequence[str]) -> None:
    """Write lines to the terminal stream, never raising (a closed stream loses them)."""
    try:
        for line in lines:
            out.write(line + "\n")
        out.flush()
    except (OSError, ValueError):
        pass
