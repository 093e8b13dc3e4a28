"""Governance and ledger requests to a computewatch server (``--server URL --token T``), with
the upload client's errors: one line each, the token never in it."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

from computewatch._version import __version__
from computewatch.config import Config
from computewatch.redact import redact_urls
from computewatch.upload.client import BadToken, ServerFailed, ServerUnreachable, WrongScope
from computewatch.upload.settings import server_settings

TIMEOUT = 60.0


class Remote:
    def __init__(self, url: str, token: str | None) -> None:
        self.url = url.rstrip("/")
        self._token = token

    def _open(self, path: str, data: bytes | None = None) -> http.client.HTTPResponse:
        headers = {"Accept": "application/json", "User-Agent": f"computewatch/{__version__}"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        req = urllib.request.Request(self.url + path, data=data, headers=headers,
                                     method="GET" if data is None else "POST")  # fmt: skip
        where = redact_urls(self.url)
        try:
            resp: http.client.HTTPResponse = urllib.request.urlopen(req, timeout=TIMEOUT)
            return resp
        except urllib.error.HTTPError as e:
            try:
                detail = json.loads(e.read() or b"{}").get("detail", "")
            except (ValueError, OSError, AttributeError, RecursionError):  # any body: no detail
                detail = ""
            finally:
                e.close()
            said = f": {detail}" if isinstance(detail, str) and detail else ""
            said = said.replace(self._token, "[token]") if self._token else said
            if e.code == 401:
                raise BadToken(f"the server at {where} refused the token (401){said}") from None
            if e.code == 403:
                raise WrongScope(f"the token may not do this at {where} (403){said}") from None
            raise ServerFailed(f"the server at {where} answered {e.code}{said}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            why = getattr(e, "reason", e)
            text = why.strerror if isinstance(why, OSError) and why.strerror else str(why)
            raise ServerUnreachable(f"cannot reach the server at {where}: {text}") from None

    def _json(self, path: str, data: bytes | None = None) -> Any:
        with self._open(path, data) as resp:
            try:
                return json.loads(resp.read())
            except (ValueError, RecursionError):  # RecursionError: JSON nested too deeply
                raise ServerFailed(f"the server at {redact_urls(self.url)} sent no JSON") from None

    def governance_status(self, at: float | None = None) -> list[Any]:
        query = "" if at is None else f"?at={at!r}"
        doc = self._json(f"/api/v1/governance/status{query}")
        if not isinstance(doc, list):
            raise ServerFailed("the server's governance status is not a list")
        return doc

    def model_report(self, model: str) -> dict[str, Any]:
        doc = self._json(f"/api/v1/governance/models/{quote(model)}/report")
        if not isinstance(doc, dict):
            raise ServerFailed("the server's model report is not an object")
        return doc

    def account_check(
        self, account: str, gpus: int, hours: float, gpu_model: str | None, model: str | None
    ) -> dict[str, Any]:
        body = json.dumps(
            {"gpus": gpus, "hours": hours, "gpu_model": gpu_model, "model": model}
        ).encode()
        doc = self._json(f"/api/v1/accounts/{quote(account)}/check", body)
        if not isinstance(doc, dict) or doc.get("decision") not in ("allow", "deny"):
            raise ServerFailed("the server's account check is not a decision")
        return doc

    def obligation_done(self, obligation: int, reference: str) -> Any:
        body = json.dumps({"reference": reference}).encode()
        return self._json(f"/api/v1/governance/obligations/{obligation}/done", body)

    def grant(self, model: str, team: str, *, revoke: bool = False) -> dict[str, Any]:
        """``POST /api/v1/governance/grants`` (``/revoke`` with ``revoke``)."""
        body = json.dumps({"model": model, "team": team}).encode()
        path = "/api/v1/governance/grants" + ("/revoke" if revoke else "")
        return self._object(path, body)

    def grants(self) -> list[Any]:
        """``GET /api/v1/governance/grants``: the grants the token may see."""
        doc = self._json("/api/v1/governance/grants")
        if not isinstance(doc, list):
            raise ServerFailed("the server's grants are not a list")
        return doc

    def _object(self, path: str, data: bytes | None = None) -> dict[str, Any]:
        doc = self._json(path, data)
        if not isinstance(doc, dict):
            raise ServerFailed(
                f"the server's answer to {path.split('?', maxsplit=1)[0]} is not an object"
            )
        return doc

    def ledger_head(self) -> dict[str, Any]:
        """``GET /api/v1/ledger/head``: the newest signed head."""
        return self._object("/api/v1/ledger/head")

    def inclusion_proof(self, seq: int, size: int | None = None) -> dict[str, Any]:
        query = f"seq={seq}" + ("" if size is None else f"&size={size}")
        return self._object(f"/api/v1/ledger/proof/inclusion?{query}")

    def consistency_proof(self, old: int, new: int | None = None) -> dict[str, Any]:
        query = f"old={old}" + ("" if new is None else f"&new={new}")
        return self._object(f"/api/v1/ledger/proof/consistency?{query}")

    def post_cosignature(self, size: int, line: str, public_key: str) -> dict[str, Any]:
        body = json.dumps({"size": size, "cosignature": line, "public_key": public_key})
        return self._object("/api/v1/ledger/cosignatures", body.encode())

    def ledger_export(self) -> Iterator[bytes]:
        with self._open("/api/v1/ledger/export") as resp:
            while chunk := resp.read(1 << 16):
                yield chunk


def from_settings(config: Config, url: str | None, token: str | None) -> Remote | None:
    """The server named by ``--server``, ``COMPUTEWATCH_SERVER`` or ``[server] url``; None when
    none is (the command then reads the database)."""
    settings = server_settings(config, url=url, token=token)
    if settings is None:
        return None
    return Remote(settings.url, settings.token)


def quote(text: str) -> str:
    return urllib.parse.quote(text, safe="")
