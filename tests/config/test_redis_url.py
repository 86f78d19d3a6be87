"""Parsing of ``redis+sentinel://`` URLs (config.redis_url) and their check in settings."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from vpq.config.redis_url import SentinelUrl, is_sentinel_url, parse_sentinel_url
from vpq.config.settings import RedisSettings


def test_full_form() -> None:
    url = "redis+sentinel://app:s%40cret@10.0.0.1:26380,sent-2.example:26381,[::1]:5000/vpq-meta?db=3"
    assert parse_sentinel_url(url) == SentinelUrl(
        sentinels=(("10.0.0.1", 26380), ("sent-2.example", 26381), ("::1", 5000)),
        master_name="vpq-meta",
        db=3,
        username="app",
        password="s@cret",
    )


def test_defaults_and_password_only() -> None:
    parsed = parse_sentinel_url("REDIS+SENTINEL://:pw@localhost/mymaster")
    assert parsed.sentinels == (("localhost", 26379),)
    assert (parsed.master_name, parsed.db, parsed.username, parsed.password) == ("mymaster", 0, None, "pw")
    sentinel_auth = parse_sentinel_url("redis+sentinel://h:1/m?sentinel_username=s&sentinel_password=x")
    assert (sentinel_auth.sentinel_username, sentinel_auth.sentinel_password) == ("s", "x")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+sentinel://h1:26379", "master name"),
        ("redis+sentinel://h1:26379/", "master name"),
        ("redis+sentinel:///mymaster", "Sentinel address"),
        ("redis+sentinel://h1:26379,,h2/m", "empty Sentinel address"),
        ("redis+sentinel://h1:0/m", "bad port"),
        ("redis+sentinel://h1:70000/m", "bad port"),
        ("redis+sentinel://h1:abc/m", "bad port"),
        ("redis+sentinel://h_1/m", "bad host"),
        ("redis+sentinel://[::1/m", "unclosed"),
        ("redis+sentinel://h1/m?db=x", "bad db"),
        ("redis+sentinel://h1/m?db=", "bad db"),
        ("redis+sentinel://h1/m?timeout=3", "unknown option"),
        ("redis+sentinel://h1/m?db=1&db=2", "twice"),
        ("redis+sentinel://h1/bad name", "bad master name"),
        ("redis+sentinel://h1/m#frag", "fragment"),
        ("redis+sentinel://user@h1/m", "user:password"),
        ("redis://h1:6379/0", r"not a redis\+sentinel"),
    ],
)
def test_malformed_urls_name_the_problem(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_sentinel_url(url)


def test_scheme_detection() -> None:
    assert is_sentinel_url("redis+sentinel://h/m")
    assert not is_sentinel_url("redis://h:6379/0")
    assert not is_sentinel_url("redis+sentinel")


def test_settings_refuse_a_malformed_sentinel_url_and_keep_others() -> None:
    with pytest.raises(ValidationError, match="master name"):
        RedisSettings(url="redis+sentinel://h1:26379")
    assert RedisSettings(url="redis+sentinel://h1:26379/m").url == "redis+sentinel://h1:26379/m"
    assert RedisSettings(url="redis://127.0.0.1:6379/0").url == "redis://127.0.0.1:6379/0"


def test_replica_wait_must_fit_in_the_socket_timeout() -> None:
    from vpq.config.settings import RedisClientSettings

    with pytest.raises(ValidationError, match="replica_wait_ms"):
        RedisClientSettings(socket_timeout=1.0, replica_wait_ms=1000)
