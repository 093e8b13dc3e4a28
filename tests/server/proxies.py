"""The reverse proxies docs/server.md shows (nginx and Caddy), run for real in front of a
``computewatch server`` by tests/server/test_reverse_proxy.py.

Their configurations are read from docs/server.md's section "TLS and a reverse proxy" (the
```nginx block and the Caddyfile block after it), and only what must change on a test machine
is substituted: the listen address (a free port on 127.0.0.1), the server name, the certificate
paths (a throw-away CA and server certificate made here with ``cryptography``) and the
upstream's port. A substitution that finds nothing fails, so the tests fail when the docs drift.

Each proxy runs as an unprivileged-port child process with everything it writes (pid file, logs,
temporary files, Caddy's data and config dirs) in a temporary directory, and is stopped by
:meth:`Proxy.stop`.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import shutil
import signal
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from tests.conftest import free_loopback_port

DOC = Path(__file__).resolve().parents[2] / "docs" / "server.md"
SECTION = "## TLS and a reverse proxy"
DOC_SERVER_NAME = "cw.example.org"
DOC_UPSTREAM = "127.0.0.1:8765"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
CADDY = shutil.which("caddy") or "/usr/bin/caddy"
START_TIMEOUT = 30.0


# -- the documented configurations ----------------------------------------------------------------


@dataclass(frozen=True)
class Documented:
    """The proxy configurations exactly as docs/server.md shows them."""

    nginx: str
    caddy: str


def documented() -> Documented:
    text = DOC.read_text(encoding="utf-8")
    assert SECTION in text, f"{DOC}: no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```([A-Za-z]*)\n(.*?)```", section, re.S)
    nginx = [body for lang, body in blocks if lang == "nginx"]
    assert len(nginx) == 1, f"{DOC}: not one ```nginx block under {SECTION!r}"
    # The Caddyfile: the block (untagged, or tagged caddy/caddyfile) with a reverse_proxy.
    caddy = [
        body
        for lang, body in blocks
        if lang.lower() in ("", "caddy", "caddyfile") and "reverse_proxy" in body
    ]
    assert len(caddy) == 1, f"{DOC}: not one Caddyfile block under {SECTION!r}"
    return Documented(nginx[0], caddy[0])


def _sub(pattern: str, repl: str, text: str, what: str) -> str:
    out, n = re.subn(pattern, lambda m: m.expand(repl), text)
    assert n, f"docs/server.md's proxy configuration has no {what} ({pattern!r}) any more"
    return out


# -- TLS ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    """A throw-away CA (``ca``) and a server certificate it signed (``cert``, ``key``) for
    127.0.0.1 and localhost."""

    ca: Path
    cert: Path
    key: Path

    def context(self) -> ssl.SSLContext:
        """A client context that trusts the CA."""
        return ssl.create_default_context(cafile=str(self.ca))


_CA_USAGE = x509.KeyUsage(
    digital_signature=False,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=True,
    crl_sign=True,
    encipher_only=False,
    decipher_only=False,
)


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "computewatch test CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_CA_USAGE, critical=True)
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pki = Pki(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    pki.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pki.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pki.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    pki.key.chmod(0o600)
    return pki


# -- the proxies ----------------------------------------------------------------------------------


class Proxy:
    """A reverse proxy child process on ``https://127.0.0.1:PORT`` (``url``)."""

    kind = ""
    stop_signal = signal.SIGTERM

    def __init__(self, directory: Path, pki: Pki, upstream_port: int) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pki = pki
        self.upstream_port = upstream_port
        self.port = free_loopback_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.log = self.dir / "output.log"
        self.config = self.write_config()
        self._log_file = open(self.log, "ab")  # noqa: SIM115 - closed by stop()
        self.proc = subprocess.Popen(
            self.command(), stdout=self._log_file, stderr=subprocess.STDOUT, env=self.env()
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def write_config(self) -> Path:
        raise NotImplementedError

    def command(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        # Everything the proxy writes by itself (Caddy's storage and autosave) stays in dir.
        env["HOME"] = str(self.dir)
        env["XDG_DATA_HOME"] = str(self.dir / "data")
        env["XDG_CONFIG_HOME"] = str(self.dir / "config")
        return env

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        last = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"{self.kind} exited {self.proc.returncode}:\n{self.output()[-3000:]}"
                )
            try:
                r = httpx.get(f"{self.url}/healthz", verify=self.pki.context(), timeout=5)
                if r.status_code == 200:
                    return
                last = f"HTTP {r.status_code}"
            except httpx.HTTPError as e:
                last = repr(e)
            time.sleep(0.1)
        raise AssertionError(
            f"{self.kind} not ready after {START_TIMEOUT:g} s ({last}):\n{self.output()[-3000:]}"
        )

    def output(self) -> str:
        """What the proxy printed and logged (nginx's error log included)."""
        parts = []
        for p in sorted(self.dir.glob("*.log")):
            try:
                parts.append(f"== {p.name}\n{p.read_text(errors='replace')}")
            except OSError:
                pass
        return "\n".join(parts)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(self.stop_signal)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()


class Nginx(Proxy):
    """``nginx -c CONF -p DIR -e DIR/error.log -g 'daemon off;'``: the documented ``server``
    block inside an ``http`` block whose pid, logs and temporary paths are in DIR."""

    kind = "nginx"
    stop_signal = signal.SIGTERM  # its fast stop (SIGQUIT waits for open connections)

    def write_config(self) -> Path:
        block = documented().nginx
        block = _sub(r"\blisten\s+443\s+ssl\s*;", f"listen 127.0.0.1:{self.port} ssl;", block,
                     "listen 443 ssl")  # fmt: skip
        block = _sub(r"(?m)^(\s*ssl_certificate)\s+\S+;", rf"\1 {self.pki.cert};", block,
                     "ssl_certificate")  # fmt: skip
        block = _sub(r"(?m)^(\s*ssl_certificate_key)\s+\S+;", rf"\1 {self.pki.key};", block,
                     "ssl_certificate_key")  # fmt: skip
        block = _sub(rf"\bserver_name\s+{re.escape(DOC_SERVER_NAME)}\s*;",
                     "server_name 127.0.0.1 localhost;", block, "server_name")  # fmt: skip
        block = _sub(re.escape(DOC_UPSTREAM), f"127.0.0.1:{self.upstream_port}", block,
                     "upstream 127.0.0.1:8765")  # fmt: skip
        d = self.dir
        for sub in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (d / sub).mkdir(exist_ok=True)
        # As root, nginx's workers would switch to "nobody", who cannot enter the test's
        # temporary directory: keep them as the user running the tests.
        user = "user root;\n" if os.geteuid() == 0 else ""
        conf = d / "nginx.conf"
        conf.write_text(
            f"{user}worker_processes 1;\n"
            f"pid {d}/nginx.pid;\n"
            f"error_log {d}/error.log info;\n"
            "events { worker_connections 256; }\n"
            "http {\n"
            f"    access_log {d}/access.log;\n"
            f"    client_body_temp_path {d}/client_body;\n"
            f"    proxy_temp_path {d}/proxy;\n"
            f"    fastcgi_temp_path {d}/fastcgi;\n"
            f"    uwsgi_temp_path {d}/uwsgi;\n"
            f"    scgi_temp_path {d}/scgi;\n"
            f"{block}\n"
            "}\n"
        )
        return conf

    def command(self) -> list[str]:
        # -e: the log of its start, before it reads error_log (not /var/log/nginx/error.log)
        return [NGINX, "-c", str(self.config), "-p", f"{self.dir}/", "-e", f"{self.dir}/error.log",
                "-g", "daemon off;"]  # fmt: skip


class Caddy(Proxy):
    """``caddy run --config Caddyfile --adapter caddyfile``: the documented site with global
    options that keep it off the network and out of the home directory (no admin endpoint, no
    ACME: the test's certificate through a ``tls`` line, as Let's Encrypt's would be)."""

    kind = "caddy"
    # Its immediate stop: SIGTERM would wait for open event streams to end.
    stop_signal = signal.SIGQUIT

    def write_config(self) -> Path:
        site = documented().caddy
        site = _sub(rf"(?m)^{re.escape(DOC_SERVER_NAME)}\s*\{{",
                    f"https://127.0.0.1:{self.port} {{\n    tls {self.pki.cert} {self.pki.key}",
                    site, "site address")  # fmt: skip
        site = _sub(re.escape(DOC_UPSTREAM), f"127.0.0.1:{self.upstream_port}", site,
                    "upstream 127.0.0.1:8765")  # fmt: skip
        conf = self.dir / "Caddyfile"
        conf.write_text(
            "{\n"
            "    admin off\n"
            "    auto_https disable_redirects\n"
            "    skip_install_trust\n"
            f"    storage file_system {self.dir}/storage\n"
            f"    log {{\n        output file {self.dir}/caddy.log\n    }}\n"
            "}\n\n"
            f"{site}"
        )
        return conf

    def command(self) -> list[str]:
        return [CADDY, "run", "--config", str(self.config), "--adapter", "caddyfile"]


PROXIES: dict[str, type[Proxy]] = {"nginx": Nginx, "caddy": Caddy}
