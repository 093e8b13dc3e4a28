"""The HTTP endpoint of the exporters: ``/metrics`` and ``/healthz``, in threads of its own.

Binds 127.0.0.1 unless told otherwise (docs/security.md: privacy and safety by default). A
bearer token (read from a file, so it is not on the command line or in ``ps``) is required on
every path but ``/healthz`` when set; TLS wraps the socket when a certificate and key are given.
Scrapes run on the server's threads: a slow or stuck scraper never delays sampling, which only
swaps a reference in :class:`~computewatch.metrics.exposition.LatestSamples`.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from computewatch.errors import ComputewatchError
from computewatch.metrics.exposition import LatestSamples, render
from computewatch.metrics.model import DEFAULT_LISTEN
from computewatch.paths import check_private_file

__all__ = [
    "DEFAULT_LISTEN",
    "MetricsServer",
    "ServerError",
    "ServerSecurity",
    "is_loopback",
    "parse_listen",
    "read_token",
]

_READ_TIMEOUT = 10.0  # seconds a client may take to send its request


class ServerError(ComputewatchError, ValueError):
    """A listen address, token or TLS file that cannot be used; the message says why."""


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9464`` for IPv6; ``:9464`` and a bare ``9464`` mean 127.0.0.1)
    → (host, port)."""
    if text.strip().isdigit():
        text = ":" + text.strip()
    host, sep, port_text = text.strip().rpartition(":")
    if not sep:
        raise ServerError(f"listen address {text!r}: expected HOST:PORT, e.g. {DEFAULT_LISTEN}")
    host = host.strip("[]") or "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        raise ServerError(f"listen address {text!r}: port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ServerError(f"listen address {text!r}: port must be 0-65535")
    return host, port


def require_prometheus_client() -> None:
    """Raise :class:`ServerError` with the install hint when prometheus_client is missing."""
    try:
        # The optional [agent] extra: this import is the check that it is installed.
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ServerError(
            "the Prometheus endpoint needs prometheus_client: pip install 'computewatch[agent]'"
        ) from None


def is_loopback(host: str) -> bool:
    """Whether ``host`` is only reachable from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_token(path: str | Path) -> str:
    """The bearer token in ``path`` (surrounding whitespace stripped); it must not be empty,
    and only its owner may read or write it (:func:`check_private_file`)."""
    check_private_file(path, "token file", ServerError)
    try:
        token = Path(path).read_text().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise ServerError(f"cannot read the token file {path}: {e}") from None
    if not token:
        raise ServerError(f"the token file {path} is empty")
    return token


@dataclass(frozen=True, slots=True)
class ServerSecurity:
    """Token and TLS of an endpoint; all optional."""

    token: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    @classmethod
    def from_files(
        cls,
        token_file: str | None,
        tls_cert: str | None,
        tls_key: str | None,
        *,
        flags: tuple[str, str] = ("--tls-cert", "--tls-key"),
    ) -> ServerSecurity:
        """Read the token and check the files; ``flags`` name the TLS options in messages."""
        if bool(tls_cert) != bool(tls_key):
            raise ServerError(f"TLS needs both a certificate ({flags[0]}) and a key ({flags[1]})")
        if tls_key:
            check_private_file(tls_key, "TLS key", ServerError)
        return cls(read_token(token_file) if token_file else None, tls_cert, tls_key)

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls_cert or not self.tls_key:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(self.tls_cert, self.tls_key)
        except (OSError, ssl.SSLError) as e:
            raise ServerError(
                f"cannot load the TLS certificate {self.tls_cert} and key {self.tls_key}: {e}"
            ) from None
        return ctx


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(
        self,
        addr: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        ssl_ctx: ssl.SSLContext | None,
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
        self.ssl_ctx = ssl_ctx
        super().__init__(addr, handler)

    def get_request(self) -> tuple[socket.socket, object]:
        sock, addr = self.socket.accept()
        sock.settimeout(_READ_TIMEOUT)
        if self.ssl_ctx is not None:
            # The handshake happens on the request's own thread (first read), not here.
            sock = self.ssl_ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hung up or failed its TLS handshake is not worth a traceback


class MetricsServer:
    """Serves ``source``'s latest samples until :meth:`close`. ``health`` returns (ok, text)
    for ``/healthz``: by default, whether a tick happened in the last ``stale_after`` seconds."""

    def __init__(
        self,
        listen: str,
        source: LatestSamples,
        security: ServerSecurity | None = None,
        *,
        health: Callable[[], tuple[bool, str]] | None = None,
        stale_after: float = 120.0,
    ) -> None:
        host, port = parse_listen(listen)
        require_prometheus_client()
        self.security = security or ServerSecurity()
        self._source = source
        self._health = health or self._default_health
        self._stale_after = stale_after
        ctx = self.security.ssl_context()
        handler = self._handler_class()
        try:
            self._httpd = _Server((host, port), handler, ctx)
        except OSError as e:
            raise ServerError(f"cannot listen on {listen}: {e.strerror or e}") from None
        self.host = host
        self.port = int(self._httpd.server_address[1])
        self.tls = ctx is not None
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="computewatch-metrics", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}/metrics"

    @property
    def loopback_only(self) -> bool:
        return is_loopback(self.host)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def _default_health(self) -> tuple[bool, str]:
        at, _ = self._source.get()
        if at is None:
            return False, "no sample yet"
        age = time.time() - at
        if age > self._stale_after:
            return False, f"last sample {age:.0f} s ago"
        return True, "ok"

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self
        token = self.security.token

        class Handler(BaseHTTPRequestHandler):
            server_version = "computewatch"
            sys_version = ""
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass  # scrapes every few seconds are not worth a line each

            def _send(self, code: int, body: bytes, ctype: str, extra: dict[str, str]) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for k, v in extra.items():
                    self.send_header(k, v)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _authorized(self) -> bool:
                if token is None:
                    return True
                got = self.headers.get("Authorization", "")
                scheme, _, value = got.partition(" ")
                return scheme.lower() == "bearer" and hmac.compare_digest(
                    value.strip().encode(), token.encode()
                )

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                text = "text/plain; charset=utf-8"
                if path == "/healthz":
                    ok, why = server._health()
                    self._send(200 if ok else 503, (why + "\n").encode(), text, {})
                    return
                if not self._authorized():
                    self._send(
                        401,
                        b"unauthorized: a bearer token is required\n",
                        text,
                        {"WWW-Authenticate": 'Bearer realm="computewatch"'},
                    )
                    return
                if path == "/metrics":
                    _, samples = server._source.get()
                    body, ctype = render(samples, self.headers.get("Accept"))
                    self._send(200, body, ctype, {})
                    return
                self._send(404, b"not found: try /metrics or /healthz\n", text, {})

            do_HEAD = do_GET

        return Handler
