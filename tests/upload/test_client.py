"""The upload client against a stand-in server: headers, one error per failure, never the
token in a message."""

from __future__ import annotations

import gzip
import json

import pytest
from tests.conftest import free_loopback_port
from tests.upload.conftest import T0, FakeIngest

from computewatch.upload.client import (
    BadToken,
    BodyTooLarge,
    Client,
    ProtocolMismatch,
    ServerFailed,
    ServerUnreachable,
    UploadError,
    WrongScope,
    parse_answer,
)
from computewatch.upload.protocol import MAX_BODY_BYTES, PROTOCOL_HEADER, IngestBatch

TOKEN = "cwt_s3cr3t-token-value"


def _batch(run_id: str = "r1", seq: int = 1) -> IngestBatch:
    run = {
        "id": run_id, "seq": seq, "final": True, "name": None, "status": "completed",
        "exit_code": 0, "started_at": T0, "ended_at": T0 + 1, "host": "h", "user": "u",
        "project": None, "tags": {}, "command": ["true"], "summary": None, "meta": {},
        "series": [],
    }  # fmt: skip
    return {"protocol": 1, "runs": [run]}  # type: ignore[list-item]


def test_headers_and_answer(ingest: FakeIngest) -> None:
    answer = Client(ingest.url, TOKEN).ingest(_batch())
    assert answer["results"] == [{"id": "r1", "seq": 1, "stored": True}]
    headers = ingest.requests[0].headers
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    assert headers[PROTOCOL_HEADER] == "1"
    assert headers["Content-Type"] == "application/json"
    assert Client(ingest.url, TOKEN).ingest(_batch())["results"][0]["stored"] is False


def test_gzip_bodies_by_default(ingest: FakeIngest) -> None:
    client = Client(ingest.url, TOKEN)
    client.ingest(_batch())
    req = ingest.requests[0]
    assert req.headers["Content-Encoding"] == "gzip"
    assert req.body["runs"][0]["id"] == "r1"
    assert client.wire_bytes == req.raw_size
    Client(ingest.url, TOKEN, gzip=False).ingest(_batch())
    assert "Content-Encoding" not in ingest.requests[1].headers


def test_a_server_without_gzip_gets_plain_json(ingest: FakeIngest) -> None:
    ingest.no_gzip = True
    client = Client(ingest.url, TOKEN)
    assert client.ingest(_batch())["results"][0]["stored"] is True
    assert client.gzip is False and ingest.refused_gzip == 1
    client.ingest(_batch("r2"))  # plain from now on: no second refusal
    assert ingest.refused_gzip == 1 and "Content-Encoding" not in ingest.requests[-1].headers


def test_token_is_not_in_the_repr(ingest: FakeIngest) -> None:
    assert TOKEN not in repr(Client(ingest.url, TOKEN))


@pytest.mark.parametrize(
    ("status", "error", "retryable"),
    [
        (401, BadToken, False),
        (403, WrongScope, False),
        (413, BodyTooLarge, False),
        (400, ProtocolMismatch, False),
        (422, ProtocolMismatch, False),
        (409, ProtocolMismatch, False),
        (500, ServerFailed, True),
        (503, ServerFailed, True),
        (429, ServerFailed, True),
    ],
)
def test_each_refusal_has_its_error(
    ingest: FakeIngest, status: int, error: type[UploadError], retryable: bool
) -> None:
    ingest.status = status
    # a server that echoes the token back must not get it into our message
    ingest.reply = json.dumps({"detail": f"nope: field 'x' (token {TOKEN})"}).encode()
    with pytest.raises(error) as info:
        Client(ingest.url, TOKEN).ingest(_batch())
    message = str(info.value)
    assert TOKEN not in message
    assert info.value.retryable is retryable
    assert "\n" not in message
    if status in (400, 422):
        assert "nope: field 'x'" in message and "protocol 1" in message


def test_no_token_at_all_says_how_to_give_one(ingest: FakeIngest) -> None:
    ingest.status = 401
    with pytest.raises(BadToken, match="COMPUTEWATCH_TOKEN"):
        Client(ingest.url, None).ingest(_batch())
    assert "Authorization" not in ingest.requests[0].headers


def test_an_answer_that_is_not_an_ingest_response(ingest: FakeIngest) -> None:
    ingest.reply = b"<html>hello</html>"
    with pytest.raises(ProtocolMismatch, match="without an ingest response"):
        Client(ingest.url, TOKEN).ingest(_batch())


def test_unreachable() -> None:
    port = free_loopback_port()  # a port nobody listens on
    with pytest.raises(ServerUnreachable) as info:
        Client(f"http://user:pw@127.0.0.1:{port}", TOKEN).ingest(_batch())
    assert info.value.retryable
    assert "cannot reach the server at http://user:***@127.0.0.1" in str(info.value)
    assert TOKEN not in str(info.value) and ":pw@" not in str(info.value)


def test_a_server_that_does_not_answer_times_out(ingest: FakeIngest) -> None:
    ingest.hang = 30.0
    with pytest.raises(ServerUnreachable, match=r"did not answer within 0\.3 s"):
        Client(ingest.url, TOKEN, timeout=0.3).ingest(_batch())


def test_a_body_over_the_limit_is_not_sent(ingest: FakeIngest) -> None:
    with pytest.raises(BodyTooLarge):
        Client(ingest.url, TOKEN).ingest_body(b" " * (MAX_BODY_BYTES + 1))
    assert ingest.requests == []


def test_gzip_really_compresses(ingest: FakeIngest) -> None:
    batch = _batch()
    batch["runs"][0]["command"] = ["x" * 10_000]
    Client(ingest.url, TOKEN, gzip=True).ingest(batch)
    assert ingest.requests[0].raw_size < 1000
    assert len(gzip.compress(b"x" * 10_000)) < 1000


def test_an_html_error_page_is_named_by_its_title_not_pasted_whole() -> None:
    page = (
        b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 "
        b"Bad Gateway</h1></center>\r\n<hr><center>nginx/1.22.1</center>\r\n</body>\r\n</html>"
    )
    with pytest.raises(ServerFailed) as e:
        parse_answer(502, page, where="https://cw.example.org", token=None)
    assert str(e.value) == (
        "the server at https://cw.example.org failed (502): an HTML page: 502 Bad Gateway"
    )
