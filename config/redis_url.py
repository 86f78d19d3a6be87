"""The ``redis+sentinel://`` form of a Redis URL (pure parsing, no I/O).

Form::

    redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/master-name[?option=value&...]

- the hosts are the Sentinels (at least one; the port defaults to 26379; IPv6
  addresses in brackets, ``[::1]:26379``);
- ``master-name`` is the name the Sentinels monitor (``sentinel monitor <name> ...``);
- ``user`` / ``password`` authenticate to the Redis master and replicas, not to
  the Sentinels;
- options: ``db`` (database number, default 0), ``sentinel_username`` and
  ``sentinel_password`` (when the Sentinels require authentication themselves).

``parse_sentinel_url`` raises ``ValueError`` with a message naming the problem for
any other shape, so a bad ``--redis-url`` is refused where it is given (``vpq up``
exits with code 2). Plain ``redis://``, ``rediss://`` and ``unix://`` URLs are not
this module's business: ``is_sentinel_url`` tells them apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote

SCHEME = "redis+sentinel"
DEFAULT_SENTINEL_PORT = 26379
_OPTIONS = frozenset({"db", "sentinel_username", "sentinel_password"})
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
_HOST = re.compile(r"^[A-Za-z0-9.-]{1,253}$")


@dataclass(frozen=True, slots=True)
class SentinelUrl:
    """What a ``redis+sentinel://`` URL says."""

    sentinels: tuple[tuple[str, int], ...]
    master_name: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None


def is_sentinel_url(url: str) -> bool:
    """True when ``url`` uses the ``redis+sentinel`` scheme (any letter case)."""
    return url.split("://", 1)[0].lower() == SCHEME if "://" in url else False


def _address(item: str, url: str) -> tuple[str, int]:
    if not item:
        raise ValueError(f"empty Sentinel address in {url!r}")
    if item.startswith("["):
        end = item.find("]")
        if end < 0:
            raise ValueError(f"unclosed '[' in Sentinel address {item!r}")
        host, rest = item[1:end], item[end + 1:]
        if not host or not all(c in "0123456789abcdefABCDEF:." for c in host):
            raise ValueError(f"bad IPv6 address in Sentinel address {item!r}")
        if rest and not rest.startswith(":"):
            raise ValueError(f"bad Sentinel address {item!r}")
        port_text = rest[1:] if rest else None
    else:
        host, sep, port_text = item.partition(":")
        if not sep:
            port_text = None
        if not _HOST.match(host):
            raise ValueError(f"bad host in Sentinel address {item!r}")
    if port_text is None:
        return host, DEFAULT_SENTINEL_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"bad port in Sentinel address {item!r} (1..65535)")
    return host, int(port_text)


def parse_sentinel_url(url: str) -> SentinelUrl:
    """The parts of a ``redis+sentinel://`` URL; ValueError when it is malformed."""
    if not is_sentinel_url(url):
        raise ValueError(f"not a {SCHEME}:// URL: {url!r}")
    rest = url.split("://", 1)[1]
    rest, _, fragment = rest.partition("#")
    if fragment:
        raise ValueError(f"a {SCHEME}:// URL has no fragment: {url!r}")
    rest, _, query = rest.partition("?")
    netloc, slash, path = rest.partition("/")
    if not slash or not path:
        raise ValueError(f"{SCHEME}:// URL without a master name (…/master-name): {url!r}")
    username = password = None
    if "@" in netloc:
        userinfo, _, netloc = netloc.rpartition("@")
        user, colon, pw = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(pw) if colon else None
        if not colon and username is not None:
            raise ValueError(f"credentials in {SCHEME}:// URLs are user:password or :password: {url!r}")
    if not netloc:
        raise ValueError(f"{SCHEME}:// URL without a Sentinel address: {url!r}")
    sentinels = tuple(_address(item.strip(), url) for item in netloc.split(","))
    master = unquote(path)
    if not _NAME.match(master):
        raise ValueError(f"bad master name {master!r} in {url!r} (letters, digits, '.', '_', '-')")
    options: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)):
        if key not in _OPTIONS:
            raise ValueError(f"unknown option {key!r} in {url!r} (known: {', '.join(sorted(_OPTIONS))})")
        if key in options:
            raise ValueError(f"option {key!r} given twice in {url!r}")
        options[key] = value
    db_text = options.get("db", "0")
    if not db_text.isdigit() or int(db_text) > 15_999:
        raise ValueError(f"bad db {db_text!r} in {url!r} (a database number)")
    return SentinelUrl(
        sentinels=sentinels,
        master_name=master,
        db=int(db_text),
        username=username,
        password=password,
        sentinel_username=options.get("sentinel_username") or None,
        sentinel_password=options.get("sentinel_password") or None,
    )


def check_redis_url(url: str) -> str:
    """``url`` itself; ValueError when it is a ``redis+sentinel://`` URL that does not
    parse (other schemes are left to redis-py, which names the problem on first use)."""
    if is_sentinel_url(url):
        parse_sentinel_url(url)
    return url
