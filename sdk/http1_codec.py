"""HTTP/1.1 client codec for the SDK's connection pool: requests out, answers in. Pure: no I/O.

Contract:

* :func:`fixed_headers` builds, once per client, the header block every request carries
  (``Host`` and the client's defaults); :func:`encode_request` adds the request line,
  the request's own headers, ``Content-Type: application/json`` and ``Content-Length``
  when there is a body, and the body (:func:`encode_request_buffers`: the same bytes as
  a list of buffers, the body's own not copied). Header names or values holding CR, LF or NUL raise
  :class:`ValueError` (nothing is sent).
* :class:`ResponseParser` reads one answer from the bytes handed to :meth:`~ResponseParser.feed`
  in any split. The body is delimited by ``Transfer-Encoding: chunked`` (decoded; trailers
  dropped), else ``Content-Length``, else the end of the connection (:meth:`~ResponseParser.feed_eof`).
  Answers to HEAD and 1xx/204/304 answers have no body; interim 1xx answers (not 101)
  are skipped. ``keep_alive`` says whether the connection may carry another request:
  false after ``Connection: close``, an HTTP/1.0 answer without ``Connection: keep-alive``,
  a body delimited by the connection's end, or bytes beyond the answer.
* Anything malformed raises :class:`BadHttpResponse`; after it the connection is unusable.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping, Sequence

MAX_HEAD = 64 * 1024
"""Largest status line + headers accepted (bytes)."""
MAX_CHUNK_LINE = 4096
"""Largest chunk-size line (with extensions) or trailer line accepted (bytes)."""

NO_BODY_STATUSES = frozenset({204, 304})

_STATUS = re.compile(r"HTTP/1\.([01]) ([0-9]{3})(?: ([^\r\n]*))?(?=\r\n|$)")
_HEADER = re.compile(r"\r\n([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*([^\r\n]*)")
"""A header line: a token name right before the colon, the value up to the line's end."""


class BadHttpResponse(Exception):
    """The server's bytes are not a valid HTTP/1.x answer."""


def _check(text: str, what: str) -> str:
    if "\r" in text or "\n" in text or "\x00" in text:
        raise ValueError(f"CR, LF or NUL in an HTTP header {what}: {text!r}")
    return text


def host_header(host: str, port: int, default_port: int = 80) -> str:
    """The ``Host`` value for ``host``/``port`` (port left out when it is the default;
    an IPv6 literal bracketed)."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return host if port == default_port else f"{host}:{port}"


def fixed_headers(host: str, headers: Mapping[str, str]) -> bytes:
    """The header lines every request carries: ``Host`` then ``headers``, CRLF-terminated."""
    lines = [f"Host: {_check(host, 'value')}\r\n"]
    lines += [f"{_check(k, 'name')}: {_check(v, 'value')}\r\n" for k, v in headers.items()]
    return "".join(lines).encode("utf-8")


def encode_request(
    method: str,
    target: str,
    fixed: bytes,
    headers: Mapping[str, str] | None,
    body: bytes | None,
    content_type: bytes = b"application/json",
) -> bytes:
    """One request's bytes: request line, ``fixed``, ``headers``, body framing (with
    ``content_type``), body.

    A request without ``body`` gets ``Content-Length: 0`` when its method usually
    carries one (POST, PUT, PATCH), no framing otherwise."""
    if body is None:
        return _head(method, target, fixed, headers, None, content_type)
    return _head(method, target, fixed, headers, len(body), content_type) + body


def encode_request_buffers(
    method: str,
    target: str,
    fixed: bytes,
    headers: Mapping[str, str] | None,
    body: Sequence[bytes | bytearray],
    content_type: bytes = b"application/json",
) -> list[bytes | bytearray]:
    """The bytes of :func:`encode_request` for the body ``b"".join(body)``, as buffers to
    write in order: the head, then the body's own buffers (not copied)."""
    return [_head(method, target, fixed, headers, sum(map(len, body)), content_type), *body]


def _head(
    method: str, target: str, fixed: bytes, headers: Mapping[str, str] | None, length: int | None, content_type: bytes
) -> bytes:
    """Request line, ``fixed``, ``headers`` and the framing of a body of ``length`` bytes
    (None: no body), up to the blank line."""
    if headers:
        extra = "".join([f"{_check(k, 'name')}: {_check(v, 'value')}\r\n" for k, v in headers.items()]).encode("utf-8")
    else:
        extra = b""
    _check(target, "target")
    if length is not None:
        return b"%s %s HTTP/1.1\r\n%s%sContent-Type: %s\r\nContent-Length: %d\r\n\r\n" % (
            method.encode("ascii"), target.encode("ascii"), fixed, extra, content_type, length
        )  # fmt: skip
    tail = b"Content-Length: 0\r\n\r\n" if method in ("POST", "PUT", "PATCH") else b"\r\n"
    return b"%s %s HTTP/1.1\r\n%s%s%s" % (method.encode("ascii"), target.encode("ascii"), fixed, extra, tail)


# parser states
_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILER, _UNTIL_EOF, _DONE = range(8)


class ResponseParser:
    """One HTTP/1.x answer, fed in pieces (see the module docstring).

    After :meth:`feed` (or :meth:`feed_eof`) returns True: ``status``, ``reason``,
    ``body`` and ``keep_alive`` are set, and :meth:`header` / :attr:`headers` read the
    headers. ``started`` turns true with the first byte received."""

    __slots__ = (
        "_buf", "_state", "_remaining", "_parts", "_head_only", "_encoding", "_head", "_low", "_headers",
        "status", "reason", "body", "keep_alive", "started",
    )  # fmt: skip

    def __init__(self, head_only: bool = False) -> None:
        self._buf = b""
        self._state = _HEAD
        self._remaining = 0
        self._parts: list[bytes] = []
        self._head_only = head_only
        self._encoding = ""
        self.status = 0
        self.reason = ""
        self._head = self._low = ""
        self._headers: dict[str, str] | None = {}
        self.body = b""
        self.keep_alive = True
        self.started = False

    @property
    def done(self) -> bool:
        return self._state == _DONE

    def feed(self, data: bytes) -> bool:
        """Take the next bytes of the answer; True once it is complete. Raises
        :class:`BadHttpResponse` when the bytes are malformed."""
        if not data:
            return self._state == _DONE
        self.started = True
        if self._state == _DONE:
            self.keep_alive = False  # bytes nobody asked for: the connection is out of step
            return True
        if self._buf:
            data, self._buf = self._buf + data, b""
        if self._state == _HEAD:  # the common case first: a whole answer in one piece
            end = data.find(b"\r\n\r\n")
            if end >= 0:
                self._parse_head(data[:end])
                start = end + 4
                if self._state == _LENGTH and len(data) - start == self._remaining:
                    self._finish(data[start:])
                    return True
                return self._advance(data, start)
        return self._advance(data, 0)

    def feed_eof(self) -> bool:
        """The connection ended. True when that completes the answer (a body delimited by
        the end); False when no byte of an answer had arrived; raises
        :class:`BadHttpResponse` for an answer cut short."""
        if self._state == _DONE:
            return True
        if self._state == _UNTIL_EOF:
            self._finish(b"".join(self._parts))
            self.keep_alive = False
            return True
        if not self.started:
            return False
        raise BadHttpResponse("the connection closed in the middle of the answer")

    # -- internals -----------------------------------------------------------------------

    def _advance(self, buf: bytes, pos: int) -> bool:
        n = len(buf)
        while pos < n or self._state == _DONE:
            state = self._state
            if state == _DONE:
                if pos < n:
                    self.keep_alive = False
                return True
            if state == _HEAD:
                end = buf.find(b"\r\n\r\n", pos)
                if end < 0:
                    if n - pos > MAX_HEAD:
                        raise BadHttpResponse("the answer's head is too large")
                    self._buf = buf[pos:]
                    return False
                self._parse_head(buf[pos:end])
                pos = end + 4
            elif state == _LENGTH:
                take = min(self._remaining, n - pos)
                piece = buf if pos == 0 and take == n else buf[pos : pos + take]
                pos += take
                self._remaining -= take
                if self._remaining:
                    self._parts.append(piece)
                elif self._parts:
                    self._parts.append(piece)
                    self._finish(b"".join(self._parts))
                else:  # the common case: the whole body in one piece
                    self._finish(piece)
            elif state == _UNTIL_EOF:
                self._parts.append(buf[pos:] if pos else buf)
                return False
            elif state == _CHUNK_DATA:
                take = min(self._remaining, n - pos)
                self._parts.append(buf[pos : pos + take])
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    self._state = _CHUNK_END
            else:  # a line: chunk size, the CRLF after chunk data, or a trailer
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    if n - pos > MAX_CHUNK_LINE:
                        raise BadHttpResponse("a chunk-size or trailer line is too long")
                    self._buf = buf[pos:]
                    return False
                line = buf[pos:end]
                pos = end + 2
                if state == _CHUNK_SIZE:
                    self._chunk_size(line)
                elif state == _CHUNK_END:
                    if line:
                        raise BadHttpResponse("chunk data longer than its size")
                    self._state = _CHUNK_SIZE
                elif not line:  # _TRAILER: an empty line ends the trailers
                    self._finish(b"".join(self._parts))
        return self._state == _DONE

    def header(self, name: str) -> str | None:
        """The value of header ``name`` (lower-case) of the answer; repeated ones joined
        with ", "; None when absent. Looked up in the head, without parsing the rest."""
        low = self._low
        key = f"\r\n{name}:"
        i = low.find(key)
        if i < 0:
            return None
        values = []
        while i >= 0:
            start = i + len(key)
            end = low.find("\r\n", start)
            values.append(self._head[start : end if end >= 0 else None].strip(" \t"))
            i = low.find(key, start) if end >= 0 else -1
        return values[0] if len(values) == 1 else ", ".join(values)

    @property
    def headers(self) -> dict[str, str]:
        """Every header of the answer (lower-cased names; repeated ones joined with ", ").
        Raises :class:`BadHttpResponse` for a line that is no header."""
        if self._headers is None:
            text = self._head
            pairs = _HEADER.findall(text, text.find("\r\n") if "\r\n" in text else len(text))
            if len(pairs) != text.count("\r\n"):
                bad = next((line for line in text.split("\r\n")[1:] if not _HEADER.match("\r\n" + line)), "")
                raise BadHttpResponse(f"bad header line: {bad[:80]!r}")
            headers: dict[str, str] = {}
            for k, v in pairs:
                key, value = k.lower(), v.rstrip(" \t")
                headers[key] = value if key not in headers else f"{headers[key]}, {value}"
            self._headers = headers
        return self._headers

    def _parse_head(self, head: bytes) -> None:
        text = head.decode("latin-1")
        status_line = _STATUS.match(text)
        if status_line is None:
            raise BadHttpResponse(f"not an HTTP/1.x status line: {text[:80]!r}")
        status = int(status_line[2])
        self._head = text
        self._low = low = text.lower()
        self._headers = None
        if status < 200:
            if status == 101 or status < 100:
                raise BadHttpResponse(f"unexpected status {status}")
            return  # interim answer: the real one follows
        self.status = status
        self.reason = status_line[3] or ""
        if status_line[1] == "0" or "\r\nconnection:" in low:
            connection = (self.header("connection") or "").lower()
            self.keep_alive = "keep-alive" in connection if status_line[1] == "0" else "close" not in connection
        if "\r\ncontent-encoding:" in low:
            self._encoding = (self.header("content-encoding") or "").lower()
        if self._head_only or status in NO_BODY_STATUSES:
            self._finish(b"")
        elif "\r\ntransfer-encoding:" in low:
            te = self.header("transfer-encoding") or ""
            if te.rsplit(",", 1)[-1].strip().lower() != "chunked":
                self._state = _UNTIL_EOF
                self.keep_alive = False
            else:
                if "\r\ncontent-length:" in low:
                    self.keep_alive = False  # both framings: trust chunked, reuse nothing
                self._state = _CHUNK_SIZE
        else:
            i = low.find("\r\ncontent-length:")
            if i < 0:
                self._state = _UNTIL_EOF
                self.keep_alive = False
                return
            j = low.find("\r\n", i + 17)
            value = text[i + 17 : j if j >= 0 else None].strip(" \t")
            if not value.isdigit() or low.find("\r\ncontent-length:", i + 17) >= 0:
                value = self._one_length()
            self._remaining = int(value)
            if self._remaining == 0:
                self._finish(b"")
            else:
                self._state = _LENGTH

    def _one_length(self) -> str:
        length = self.header("content-length") or ""
        values = {v.strip() for v in length.split(",")}  # repeated: all the same, or ambiguous
        value = values.pop() if len(values) == 1 else ""
        if not value.isdigit():
            raise BadHttpResponse(f"bad Content-Length: {length!r}")
        return value

    def _chunk_size(self, line: bytes) -> None:
        size = line.split(b";", 1)[0].strip()
        if not size or len(size) > 16 or size.strip(b"0123456789abcdefABCDEF"):
            raise BadHttpResponse(f"bad chunk size line: {line[:80]!r}")
        self._remaining = int(size, 16)
        self._state = _CHUNK_DATA if self._remaining else _TRAILER

    def _finish(self, body: bytes) -> None:
        if self._parts:
            self._parts = []
        self._state = _DONE
        if body and self._encoding in ("gzip", "x-gzip", "deflate"):
            body = _decompress(body, self._encoding)
        self.body = body


def _decompress(body: bytes, encoding: str) -> bytes:
    try:
        if encoding == "deflate":
            try:
                return zlib.decompress(body)
            except zlib.error:
                return zlib.decompress(body, -zlib.MAX_WBITS)  # raw deflate, as some servers send
        return zlib.decompress(body, 16 + zlib.MAX_WBITS)
    except zlib.error as exc:
        raise BadHttpResponse(f"cannot decode a {encoding} body: {exc}") from None
