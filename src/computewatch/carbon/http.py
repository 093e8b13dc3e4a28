"""One small JSON-over-HTTP client for the intensity providers (urllib: no dependency).

Every failure becomes a :class:`~computewatch.carbon.records.ProviderError` whose one-line
message names the provider and what went wrong: refused, timed out, rate-limited (HTTP 429,
with the server's ``Retry-After``), credentials rejected (401/403), unknown region (400/404),
server error (5xx), or an answer that is not the JSON expected.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from collections.abc import Mapping

from computewatch._version import __version__
from computewatch.carbon.records import ProviderError

__all__ = ["JsonValue", "check_base_url", "get_json"]

JsonValue = object  # what json.loads returns; callers check its shape
_MAX_BODY = 16 << 20  # a week of 5-minute points is ~200 KB; refuse anything absurd


def check_base_url(url: str, provider: str) -> str:
    """``url`` without a trailing slash; ProviderError unless it is http(s)."""
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme not in ("http", "https"):
        raise ProviderError(f"{provider}: base URL must be http or https, not {url!r}")
    return url.rstrip("/")


def _status_message(provider: str, code: int, retry_after: str | None, what: str) -> str:
    if code in (401, 403):
        return f"{provider} rejected the credentials (HTTP {code})"
    if code in (400, 404):
        return f"{provider} does not know {what} (HTTP {code})"
    if code == 429:
        wait = f"; it asks to retry after {retry_after} s" if retry_after else ""
        return f"{provider} rate limit reached (HTTP 429){wait}"
    if code >= 500:
        return f"{provider} is failing (HTTP {code})"
    return f"{provider} answered HTTP {code}"


def get_json(
    url: str,
    *,
    provider: str,
    what: str,
    headers: Mapping[str, str] | None = None,
    basic_auth: tuple[str, str] | None = None,
    timeout: float = 10.0,
) -> JsonValue:
    """GET ``url`` and parse its JSON body; ``what`` names the request in messages ("zone
    'DE'"). Never raises anything but ProviderError for a network or server problem."""
    # urllib.request pulls in http.client, ssl and email (~10 ms): loaded when a provider is
    # asked, not by every `computewatch run` whose accounting imports this module
    import http.client
    import urllib.error
    import urllib.request

    h = {"Accept": "application/json", "User-Agent": f"computewatch/{__version__}"}
    h.update(headers or {})
    if basic_auth is not None:
        token = base64.b64encode(f"{basic_auth[0]}:{basic_auth[1]}".encode()).decode("ascii")
        h["Authorization"] = f"Basic {token}"
    request = urllib.request.Request(url, headers=h)
    base = urllib.parse.urlsplit(url)._replace(query="", path="").geturl()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read(_MAX_BODY + 1)
    except urllib.error.HTTPError as exc:
        retry = exc.headers.get("Retry-After") if exc.headers else None
        exc.close()
        raise ProviderError(_status_message(provider, exc.code, retry, what)) from None
    except urllib.error.URLError as exc:
        raise ProviderError(_network_message(provider, base, exc.reason, timeout)) from None
    except (OSError, http.client.HTTPException) as exc:
        raise ProviderError(_network_message(provider, base, exc, timeout)) from None
    if len(body) > _MAX_BODY:
        raise ProviderError(f"{provider}: the answer is too large to be an intensity series")
    try:
        parsed: JsonValue = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ProviderError(f"{provider}: the answer is not valid JSON") from None
    except RecursionError:  # json's decoder recurses once per nested array or object
        raise ProviderError(f"{provider}: the answer nests too deeply") from None
    return parsed


def _network_message(provider: str, base: str, reason: object, timeout: float) -> str:
    if isinstance(reason, TimeoutError):
        return f"{provider} did not answer within {timeout:g} s ({base})"
    if isinstance(reason, ConnectionRefusedError):
        return f"{provider} is unreachable: connection refused ({base})"
    return f"{provider} is unreachable ({base}): {reason}"
