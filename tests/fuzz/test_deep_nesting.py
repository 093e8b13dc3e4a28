"""JSON nested deeper than the decoder recurses: each reader of a user file or of a server's
answer names the problem in its own error (or skips the document) instead of a RecursionError.

Hypothesis never draws documents this deep, so these are explicit cases beside the fuzz tests;
the TOML configuration's are in test_config_fuzz.py and the rules file's in test_rules_fuzz.py.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from computewatch.accounting.live_intensity import LiveIntensityError, _parse
from computewatch.carbon.http import get_json
from computewatch.carbon.records import ProviderError
from computewatch.detect.model import DetectError, parse_model
from computewatch.fleet.promql import PrometheusClient, PromQLError
from computewatch.ledger.chain import LedgerError
from computewatch.ledger.verify import read_export
from computewatch.profiling.artifacts import MANIFEST_SUFFIX, collect_manifests
from computewatch.store import Store

DEPTHS = [1000, 5000, 100000]


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", DEPTHS)
def test_detector_model(depth: int) -> None:
    with pytest.raises(DetectError, match=r"model\.json: not a usable detector model: nests too"):
        parse_model(_deep(depth), "model.json")
    with pytest.raises(DetectError, match="nests too deeply"):
        parse_model('{"format": ' + _deep(depth) + "}", "model.json")


@pytest.mark.parametrize("depth", DEPTHS)
def test_ledger_export(tmp_path: Path, depth: int) -> None:
    p = tmp_path / "ledger.jsonl"
    p.write_text(_deep(depth) + "\n")
    with pytest.raises(LedgerError, match=r"ledger\.jsonl:1: not a ledger entry \(nests too"):
        read_export(p)


@pytest.mark.parametrize("depth", DEPTHS)
def test_electricity_maps_answer(depth: int) -> None:
    with pytest.raises(LiveIntensityError, match="nests too deeply"):
        _parse(_deep(depth).encode(), "DE")


@pytest.mark.parametrize("depth", DEPTHS)
def test_profiler_manifest_is_skipped(tmp_path: Path, depth: int) -> None:
    (tmp_path / f"deep{depth}{MANIFEST_SUFFIX}").write_text(_deep(depth))
    store = Store.open(tmp_path / "cw.db")
    try:
        assert collect_manifests(store, 1, tmp_path) == 0  # skipped, left where it is
    finally:
        store.close()


@pytest.fixture
def deep_server() -> Iterator[str]:
    """A local HTTP server answering every GET with JSON nested 100000 deep."""
    body = _deep(100000).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
        t.join()


def test_carbon_provider_answer(deep_server: str) -> None:
    with pytest.raises(ProviderError, match=r"^test-provider: the answer nests too deeply$"):
        get_json(f"{deep_server}/v3", provider="test-provider", what="zone 'DE'", timeout=10)


def test_prometheus_answer(deep_server: str) -> None:
    with pytest.raises(PromQLError, match="not the Prometheus query API"):
        PrometheusClient(deep_server, timeout=10).instant("up")
