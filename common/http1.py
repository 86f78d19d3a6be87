"""HTTP/1.1 request heads and answers as pure functions (no I/O), for the request lanes of
``common.http_lane``.

``parse_request_head`` recognises only the plain shape a keep-alive client sends: a
request line ``METHOD /target HTTP/1.1``, header lines ``Name: value`` and a blank line.
Anything else (another version, obsolete line folding, a header without a colon, bytes
outside ASCII in the head) is answered ``NOT_PLAIN``, so the caller can give the
connection to a full HTTP server that answers it properly. ``render_answer`` writes a
complete answer with ``Content-Length``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus

HEAD_END = b"\r\n\r\n"


@dataclass(frozen=True, slots=True)
class RequestHead:
    """One request's line and headers. ``headers`` maps lower-cased names to values (a
    name given twice keeps its values joined by ``", "``, as RFC 9110 allows for list
    headers); ``size`` is the byte length of the head, blank line included."""

    method: str
    target: str
    headers: dict[str, str]
    size: int

    @property
    def content_length(self) -> int | None:
        """The declared body length; None when absent or not a plain decimal number."""
        raw = self.headers.get("content-length")
        if raw is None or not raw.isdigit() or len(raw) > 12:
            return None
        return int(raw)

    @property
    def keep_alive(self) -> bool:
        """False when the client asked to close the connection after this answer."""
        connection = self.headers.get("connection")
        return connection is None or "close" not in connection.lower()


class NotPlain:
    """The answer of ``parse_request_head`` for a head this module does not handle."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_PLAIN"


NOT_PLAIN = NotPlain()


def parse_request_head(buf: bytes | bytearray, max_head: int = 16384) -> RequestHead | NotPlain | None:
    """The head at the start of ``buf``: a ``RequestHead``, None while it is incomplete
    (and shorter than ``max_head``), ``NOT_PLAIN`` for anything outside the plain shape
    (including a head longer than ``max_head``)."""
    end = buf.find(HEAD_END, 0, max_head + 4)
    if end < 0:
        return NOT_PLAIN if len(buf) > max_head else None
    try:
        text = bytes(buf[:end]).decode("ascii")
    except UnicodeDecodeError:
        return NOT_PLAIN
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] != "HTTP/1.1" or not parts[1].startswith("/"):
        return NOT_PLAIN
    method, target = parts[0], parts[1]
    if not method.isalpha() or not method.isupper():
        return NOT_PLAIN
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip() or line[0] in " \t":
            return NOT_PLAIN
        key = name.lower()
        value = value.strip()
        seen = headers.get(key)
        headers[key] = value if seen is None else f"{seen}, {value}"
    return RequestHead(method, target, headers, end + 4)


class _DateCache:
    """The ``Date`` header's value, formatted once a second."""

    __slots__ = ("_second", "_value")

    def __init__(self) -> None:
        self._second = -1
        self._value = ""

    def now(self) -> str:
        second = int(time.time())
        if second != self._second:
            self._second = second
            self._value = formatdate(second, usegmt=True)
        return self._value


_DATE = _DateCache()
_STATUS_LINES: dict[int, bytes] = {}


def status_line(status: int) -> bytes:
    """``HTTP/1.1 <status> <reason>\\r\\n``."""
    line = _STATUS_LINES.get(status)
    if line is None:
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Unknown"
        line = _STATUS_LINES[status] = f"HTTP/1.1 {status} {reason}\r\n".encode("ascii")
    return line


def render_answer(
    status: int,
    body: bytes,
    content_type: str = "application/json; charset=utf-8",
    headers: list[tuple[str, str]] | None = None,
    close: bool = False,
) -> bytes:
    """A whole answer: status line, ``Content-Type``, ``Content-Length``, ``Date``,
    ``headers``, ``Connection: close`` when ``close``, then ``body``."""
    head = [
        f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\nDate: {_DATE.now()}\r\n",
    ]
    if headers:
        head.extend(f"{name}: {value}\r\n" for name, value in headers)
    if close:
        head.append("Connection: close\r\n")
    head.append("\r\n")
    return b"".join((status_line(status), "".join(head).encode("latin-1"), body))
