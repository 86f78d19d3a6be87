"""The SDK's HTTP/1.1 codec (pure): request bytes, and answers parsed from every split."""

from __future__ import annotations

import gzip

import pytest

from vpq.sdk.http1_codec import (
    MAX_HEAD,
    BadHttpResponse,
    ResponseParser,
    encode_request,
    encode_request_buffers,
    fixed_headers,
    host_header,
)

FIXED = fixed_headers("gw:8080", {"User-Agent": "vpq-sdk/0.1", "Accept": "application/json"})
OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\nRetry-After: 3\r\n\r\n{\"a\": true}"
CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
    b"4;ext=1\r\n{\"a\"\r\n"
    b"A\r\n: [1, 2, 3\r\n"
    b"2\r\n]}\r\n"
    b"0\r\nX-Trailer: yes\r\n\r\n"
)


def parse(data: bytes, pieces: int = 1, head_only: bool = False) -> ResponseParser:
    """``data`` fed in ``pieces`` roughly equal parts; asserts it completes on the last."""
    parser = ResponseParser(head_only)
    size = max(1, -(-len(data) // pieces))
    chunks = [data[i : i + size] for i in range(0, len(data), size)]
    for chunk in chunks[:-1]:
        assert parser.feed(chunk) is False
    assert parser.feed(chunks[-1]) is True
    return parser


def parse_every_split(data: bytes) -> list[ResponseParser]:
    """``data`` split in two at every position, and fed one byte at a time."""
    out = []
    for cut in range(1, len(data)):
        parser = ResponseParser()
        assert parser.feed(data[:cut]) is False, cut
        assert parser.feed(data[cut:]) is True, cut
        out.append(parser)
    out.append(parse(data, pieces=len(data)))
    return out


# -- requests ----------------------------------------------------------------------------


def test_request_with_a_json_body() -> None:
    data = encode_request("POST", "/v1/queues/q/messages", FIXED, {"X-Lane": "feat-a"}, b'{"messages":[]}')
    assert data == (
        b"POST /v1/queues/q/messages HTTP/1.1\r\nHost: gw:8080\r\nUser-Agent: vpq-sdk/0.1\r\n"
        b"Accept: application/json\r\nX-Lane: feat-a\r\nContent-Type: application/json\r\n"
        b'Content-Length: 15\r\n\r\n{"messages":[]}'
    )


def test_request_with_a_body_in_buffers() -> None:
    body = [b'{"messages":', bytearray(b"[1,"), b"2]}"]
    data = encode_request_buffers("POST", "/internal/v1/append", FIXED, {"X-Map-Epoch": "3"}, body, b"x/y")
    assert b"".join(data) == encode_request("POST", "/internal/v1/append", FIXED, {"X-Map-Epoch": "3"}, b"".join(body), b"x/y")
    assert data[1:] == body and all(a is b for a, b in zip(data[1:], body))  # the body's buffers, not copies
    empty = encode_request_buffers("POST", "/x", FIXED, None, [])
    assert empty == [encode_request("POST", "/x", FIXED, None, b"")]


def test_requests_without_a_body() -> None:
    assert encode_request("GET", "/v1/cluster", FIXED, None, None).endswith(b"Accept: application/json\r\n\r\n")
    assert encode_request("DELETE", "/v1/queues/q", FIXED, {}, None).endswith(b"Accept: application/json\r\n\r\n")
    assert encode_request("POST", "/x", FIXED, None, None).endswith(b"\r\nContent-Length: 0\r\n\r\n")


@pytest.mark.parametrize("bad", ["a\r\nX-Evil: 1", "a\nb", "a\x00"])
def test_header_injection_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        encode_request("GET", "/", FIXED, {"X-Lane": bad}, None)
    with pytest.raises(ValueError):
        encode_request("GET", "/", FIXED, {bad: "v"}, None)
    with pytest.raises(ValueError):
        fixed_headers("gw", {"Authorization": f"Bearer {bad}"})
    with pytest.raises(ValueError):
        encode_request("GET", f"/{bad}", FIXED, None, None)


def test_host_header() -> None:
    assert host_header("gw", 80) == "gw"
    assert host_header("gw", 8080) == "gw:8080"
    assert host_header("::1", 8080) == "[::1]:8080"
    assert fixed_headers("gw:1", {}) == b"Host: gw:1\r\n"


# -- answers -----------------------------------------------------------------------------


def test_content_length_answer_in_any_split() -> None:
    for parser in parse_every_split(OK):
        assert (parser.status, parser.reason, parser.body, parser.keep_alive) == (200, "OK", b'{"a": true}', True)
        assert parser.header("retry-after") == "3" and parser.header("content-type") == "application/json"
        assert parser.header("x-missing") is None
        assert parser.headers == {"content-type": "application/json", "content-length": "11", "retry-after": "3"}


def test_chunked_answer_in_any_split() -> None:
    for parser in parse_every_split(CHUNKED):
        assert parser.status == 200 and parser.body == b'{"a": [1, 2, 3]}' and parser.keep_alive


def test_empty_chunked_answer() -> None:
    parser = parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    assert parser.body == b"" and parser.keep_alive


@pytest.mark.parametrize("status", [204, 304])
def test_statuses_without_a_body(status: int) -> None:
    parser = parse(b"HTTP/1.1 %d X\r\nContent-Length: 5\r\n\r\n" % status)
    assert parser.status == status and parser.body == b"" and parser.keep_alive


def test_answer_to_head_has_no_body() -> None:
    parser = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n", head_only=True)
    assert parser.body == b"" and parser.header("content-length") == "500" and parser.keep_alive


def test_zero_length_and_missing_reason() -> None:
    parser = parse(b"HTTP/1.1 202\r\nContent-Length: 0\r\n\r\n")
    assert (parser.status, parser.reason, parser.body) == (202, "", b"")


def test_interim_answers_are_skipped() -> None:
    parser = parse(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + OK, pieces=7)
    assert parser.status == 200 and parser.body == b'{"a": true}'


@pytest.mark.parametrize(
    ("head", "keep_alive"),
    [
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n", False),
        (b"HTTP/1.1 200 OK\r\nconnection: Keep-Alive\r\nContent-Length: 2\r\n\r\n", True),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n", False),
        (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n", True),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\nok\r\n0\r\n\r\n", False),
    ],
)
def test_keep_alive(head: bytes, keep_alive: bool) -> None:
    data = head if head.endswith(b"0\r\n\r\n") else head + b"ok"
    parser = parse(data)
    assert parser.body == b"ok" and parser.keep_alive is keep_alive


def test_body_up_to_the_end_of_the_connection() -> None:
    parser = ResponseParser()
    assert parser.feed(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nsome ") is False
    assert parser.feed(b"text") is False
    assert parser.feed_eof() is True
    assert parser.body == b"some text" and parser.keep_alive is False


def test_unknown_transfer_coding_reads_to_the_end() -> None:
    parser = ResponseParser()
    assert parser.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxyz") is False
    assert parser.feed_eof() is True and parser.body == b"xyz" and not parser.keep_alive


def test_end_before_any_byte_and_in_the_middle() -> None:
    assert ResponseParser().feed_eof() is False
    for cut in (5, len(OK) - 3):
        parser = ResponseParser()
        parser.feed(OK[:cut])
        with pytest.raises(BadHttpResponse):
            parser.feed_eof()
    parser = ResponseParser()
    assert parser.started is False
    parser.feed(b"H")
    assert parser.started is True


def test_bytes_beyond_the_answer_forbid_reuse() -> None:
    parser = parse(OK + b"HTTP/1.1 200 OK\r\n")
    assert parser.body == b'{"a": true}' and parser.keep_alive is False
    parser = parse(OK)
    assert parser.feed(b"x") is True and parser.keep_alive is False


def test_repeated_headers_are_joined() -> None:
    parser = parse(b"HTTP/1.1 200 OK\r\nVary: a\r\nvary: b\r\nContent-Length: 0\r\n\r\n")
    assert parser.header("vary") == "a, b" and parser.headers["vary"] == "a, b"


def test_repeated_equal_content_length_is_accepted() -> None:
    parser = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok")
    assert parser.body == b"ok"


def test_gzip_body_is_decoded() -> None:
    packed = gzip.compress(b'{"a": 1}')
    parser = parse(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (len(packed), packed))
    assert parser.body == b'{"a": 1}'


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/2 200 OK\r\n\r\n",
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokay\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nxyz",
    ],
)
def test_malformed_answers(data: bytes) -> None:
    with pytest.raises(BadHttpResponse):
        ResponseParser().feed(data)


def test_malformed_header_line_shows_in_headers() -> None:
    parser = parse(b"HTTP/1.1 200 OK\r\nno colon here\r\nContent-Length: 0\r\n\r\n")
    with pytest.raises(BadHttpResponse):
        parser.headers
    parser = parse(b"HTTP/1.1 200 OK\r\nName : v\r\nContent-Length: 0\r\n\r\n")
    with pytest.raises(BadHttpResponse):
        parser.headers


def test_head_and_lines_are_bounded() -> None:
    parser = ResponseParser()
    with pytest.raises(BadHttpResponse):
        parser.feed(b"HTTP/1.1 200 OK\r\nX: " + b"a" * MAX_HEAD)
    parser = ResponseParser()
    parser.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    with pytest.raises(BadHttpResponse):
        parser.feed(b"1" * 5000)
