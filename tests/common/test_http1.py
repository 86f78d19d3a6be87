"""The pure HTTP/1.1 head parser and answer writer of the request lanes."""

from __future__ import annotations

import pytest

from vpq.common.http1 import NOT_PLAIN, RequestHead, parse_request_head, render_answer

PLAIN = b"POST /v1/queues/q/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n"


def test_a_plain_head() -> None:
    head = parse_request_head(PLAIN + b'{"a":1}')
    assert isinstance(head, RequestHead)
    assert (head.method, head.target, head.size) == ("POST", "/v1/queues/q/messages", len(PLAIN))
    assert head.headers == {"host": "x", "content-type": "application/json", "content-length": "12"}
    assert head.content_length == 12 and head.keep_alive


def test_incomplete_until_the_blank_line() -> None:
    for cut in range(len(PLAIN)):
        assert parse_request_head(PLAIN[:cut]) is None, cut


def test_an_overlong_head_is_not_plain() -> None:
    assert parse_request_head(b"GET / HTTP/1.1\r\nX: " + b"a" * 100, max_head=64) is NOT_PLAIN
    assert parse_request_head(b"GET / HTTP/1.1\r\nX: " + b"a" * 30, max_head=64) is None


@pytest.mark.parametrize(
    "raw",
    [
        b"GET / HTTP/1.0\r\n\r\n",  # another version
        b"GET http://h/ HTTP/1.1\r\n\r\n",  # absolute form
        b"get / HTTP/1.1\r\n\r\n",  # lower-case method
        b"GET  / HTTP/1.1\r\n\r\n",  # two spaces
        b"GET / HTTP/1.1\r\nNoColon\r\n\r\n",
        b"GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n",  # obsolete line folding
        b"GET / HTTP/1.1\r\nName : v\r\n\r\n",  # space before the colon
        "GET / HTTP/1.1\r\nX: \u00e9\r\n\r\n".encode(),  # not ASCII
    ],
)
def test_anything_else_is_not_plain(raw: bytes) -> None:
    assert parse_request_head(raw) is NOT_PLAIN


def test_repeated_headers_are_joined_and_names_lower_cased() -> None:
    head = parse_request_head(b"GET / HTTP/1.1\r\nX-Env: a\r\nx-env:  b \r\n\r\n")
    assert isinstance(head, RequestHead) and head.headers == {"x-env": "a, b"}


@pytest.mark.parametrize(("value", "expected"), [("0", 0), ("17", 17), ("-1", None), ("1e3", None), ("", None)])
def test_content_length(value: str, expected: int | None) -> None:
    head = parse_request_head(f"POST / HTTP/1.1\r\nContent-Length: {value}\r\n\r\n".encode())
    assert isinstance(head, RequestHead) and head.content_length == expected


def test_connection_close() -> None:
    head = parse_request_head(b"GET / HTTP/1.1\r\nConnection: Close\r\n\r\n")
    assert isinstance(head, RequestHead) and not head.keep_alive


def test_render_answer() -> None:
    out = render_answer(429, b'{"e":1}', headers=[("Retry-After", "2")], close=True)
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 429 Too Many Requests"
    assert "Content-Length: 7" in lines and "Retry-After: 2" in lines and "Connection: close" in lines
    assert "Content-Type: application/json; charset=utf-8" in lines
    assert any(line.startswith("Date: ") and line.endswith(" GMT") for line in lines)
    assert body == b'{"e":1}'
    assert render_answer(599, b"").startswith(b"HTTP/1.1 599 Unknown\r\n")
