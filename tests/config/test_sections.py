"""The tuning sections (``read_nodes``, ``produce``, ``rebalance.publisher``, ``redis.client``):
one definition of their defaults, reachable from TOML, ``VPQ_`` variables and ``--set``."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from vpq.common.runfiles import read_settings, write_settings
from vpq.config.overrides import SettingsKeyError, apply_overrides, check_key, parse_assignments
from vpq.config.settings import (
    ProduceSettings,
    PublisherSettings,
    ReadNodeSettings,
    RedisClientSettings,
    Settings,
    load_settings,
)
from vpq.metadata.connection import ClientOptions
from vpq.produce_path.produce import AppendPolicy
from vpq.read_nodes.node_parts import ReadNodeOptions
from vpq.spark_rebalance.publisher import PublisherOptions

DEFAULT_TOML = Path(__file__).resolve().parents[2] / "config" / "default.toml"

PAIRS = [
    (ReadNodeOptions, ReadNodeSettings),
    (AppendPolicy, ProduceSettings),
    (PublisherOptions, PublisherSettings),
    (ClientOptions, RedisClientSettings),
]

# one key of every new section: (dotted key, a non-default value, how it is written in env/--set)
KEYS = [
    ("read_nodes.max_unacked", 5000, "5000"),
    ("read_nodes.steal_when_idle", False, "false"),
    ("produce.budget_s", 2.5, "2.5"),
    ("rebalance.publisher.fence_ttl_ms", 30000, "30000"),
    ("redis.client.max_connections", 7, "7"),
]


def get(settings: Settings, dotted: str):
    value = settings
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def toml_of(dotted: str, value: object) -> str:
    *section, key = dotted.split(".")
    literal = str(value).lower() if isinstance(value, bool) else repr(value)
    return f"[{'.'.join(section)}]\n{key} = {literal}\n"


def env_of(dotted: str) -> str:
    return "VPQ_" + dotted.upper().replace(".", "__")


@pytest.mark.parametrize(("options", "section"), PAIRS, ids=lambda c: c.__name__)
def test_dataclass_and_section_share_names_and_defaults(options, section) -> None:
    """The settings section is the one definition: the dataclass may not drift from it."""
    dc_defaults = {f.name: f.default for f in dataclasses.fields(options)}
    assert dc_defaults == section().model_dump()
    assert options.from_settings(section()) == options()


@pytest.mark.parametrize(("options", "section"), PAIRS, ids=lambda c: c.__name__)
def test_from_settings_carries_every_field(options, section) -> None:
    changed = {}
    for name, info in section.model_fields.items():
        d = info.default
        changed[name] = (not d) if isinstance(d, bool) else d * 2 if name != "lineage_margin_ms" else d + 1
    built = options.from_settings(section(**changed))
    assert dataclasses.asdict(built) == changed


def _leaf_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    keys = set()
    for name, info in model.model_fields.items():
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            keys |= _leaf_keys(ann, f"{prefix}{name}.")
        else:
            keys.add(prefix + name)
    return keys


def _toml_keys(table: dict, prefix: str = "") -> set[str]:
    keys = set()
    for name, value in table.items():
        if isinstance(value, dict):
            keys |= _toml_keys(value, f"{prefix}{name}.")
        else:
            keys.add(prefix + name)
    return keys


def test_default_toml_lists_every_key_with_its_default(monkeypatch) -> None:
    for var in [v for v in os.environ if v.startswith("VPQ_")]:
        monkeypatch.delenv(var)
    listed = _toml_keys(tomllib.loads(DEFAULT_TOML.read_text()))
    text = DEFAULT_TOML.read_text()
    unset_by_default = {"redis.url", "rebalance.stats_uri", "cluster.secret_file", "rebalance.spark_conf"}  # commented out
    assert listed | unset_by_default == _leaf_keys(Settings)
    for key in unset_by_default:
        assert f"# {key.rsplit('.', 1)[1]} = " in text
    assert load_settings(DEFAULT_TOML) == load_settings()


@pytest.mark.parametrize(("key", "value", "text"), KEYS)
def test_toml_reaches_the_section(tmp_path, key, value, text) -> None:
    toml = tmp_path / "vpq.toml"
    toml.write_text(toml_of(key, value))
    s = load_settings(toml)
    assert get(s, key) == value
    assert get(load_settings(), key) != value


@pytest.mark.parametrize(("key", "value", "text"), KEYS)
def test_env_reaches_the_section(monkeypatch, key, value, text) -> None:
    monkeypatch.setenv(env_of(key), text)
    assert get(load_settings(), key) == value


@pytest.mark.parametrize(("key", "value", "text"), KEYS)
def test_set_flag_reaches_the_section(key, value, text) -> None:
    assert get(load_settings(None, parse_assignments([f"{key}={text}"])), key) == value


def test_precedence_set_over_env_over_toml(tmp_path, monkeypatch) -> None:
    toml = tmp_path / "vpq.toml"
    toml.write_text(
        "[read_nodes]\nmax_unacked = 100\ntick_ms = 50\ncache_bytes = 4096\n"
        "[rebalance.publisher]\ncas_attempts = 3\nfence_budget_s = 2.0\n"
    )
    monkeypatch.setenv("VPQ_READ_NODES__MAX_UNACKED", "200")
    monkeypatch.setenv("VPQ_READ_NODES__TICK_MS", "60")
    monkeypatch.setenv("VPQ_REBALANCE__PUBLISHER__CAS_ATTEMPTS", "4")
    s = load_settings(toml, parse_assignments(["read_nodes.max_unacked=300", "rebalance.publisher.cas_attempts=5"]))
    assert s.read_nodes.max_unacked == 300  # --set beats env and file
    assert s.read_nodes.tick_ms == 60  # env beats the file
    assert s.read_nodes.cache_bytes == 4096  # the file beats the default
    assert s.read_nodes.ingest_batch == 128  # untouched: the default
    assert (s.rebalance.publisher.cas_attempts, s.rebalance.publisher.fence_budget_s) == (5, 2.0)


@pytest.mark.parametrize(
    ("item", "named"),
    [
        ("read_nodes.bogus=1", "read_nodes.bogus"),
        ("bogus.max_unacked=1", "bogus.max_unacked"),
        ("rebalance.publisher.nope=1", "rebalance.publisher.nope"),
        ("read_nodes=1", "read_nodes"),
        ("produce.budget_s.x=1", "produce.budget_s.x"),
        ("read_nodes.max_unacked", "KEY=VALUE"),
        ("=3", "KEY=VALUE"),
        ("redis.url=null", "redis.url"),
    ],
)
def test_set_rejects_unknown_keys_naming_them(item, named) -> None:
    with pytest.raises(SettingsKeyError, match=named.replace(".", r"\.")):
        parse_assignments([item])


def test_unknown_keys_in_new_sections_fail_from_toml_and_env(tmp_path, monkeypatch) -> None:
    toml = tmp_path / "vpq.toml"
    toml.write_text("[produce]\nbudget = 3\n")
    with pytest.raises(ValidationError, match="produce.budget"):
        load_settings(toml)
    monkeypatch.setenv("VPQ_READ_NODES__MAX_UNACKD", "5")
    with pytest.raises(ValidationError, match="read_nodes.max_unackd"):
        load_settings()


def test_bad_values_are_refused_with_their_key() -> None:
    for item, key in [
        ("read_nodes.max_unacked=0", "read_nodes.max_unacked"),
        ("produce.budget_s=soon", "produce.budget_s"),
        ("redis.client.socket_timeout=0", "redis.client.socket_timeout"),
        ("produce.max_request_bytes=134217728", "produce.max_request_bytes"),
    ]:
        with pytest.raises(ValidationError, match=key.replace(".", r"\.")):
            load_settings(None, parse_assignments([item]))
    with pytest.raises(ValidationError, match="lineage_margin_ms < fence_ttl_ms"):
        load_settings(None, parse_assignments(["rebalance.publisher.fence_ttl_ms=5000"]))


def test_set_values_follow_the_field_type() -> None:
    got = parse_assignments([
        "redis.key_prefix=123",  # a text setting stays text
        "log.fsync_policy=interval",
        'data_dir="/tmp/a b"',
        "gateway.port=9000",
        "read_nodes.steal_when_idle=false",
        'gateway.tokens=[{"token": "t", "scopes": {"produce": ["*"]}}]',
        "produce.budget_s=1",
    ])
    assert got == {
        "redis.key_prefix": "123", "log.fsync_policy": "interval", "data_dir": "/tmp/a b", "gateway.port": 9000,
        "read_nodes.steal_when_idle": False, "gateway.tokens": [{"token": "t", "scopes": {"produce": ["*"]}}],
        "produce.budget_s": 1,
    }
    s = load_settings(None, got)
    assert s.redis.key_prefix == "123" and s.gateway.tokens[0].scopes == {"produce": ["*"]}
    assert check_key("read_nodes.max_unacked").default == 20_000


def test_apply_overrides_on_settings_already_built(monkeypatch) -> None:
    monkeypatch.setenv("VPQ_PRODUCE__BACKOFF_MAX_S", "0.9")  # does not leak into settings already built
    base = Settings.model_validate_json(load_settings(None, {"produce.budget_s": 3.0}).model_dump_json())
    monkeypatch.setenv("VPQ_PRODUCE__BACKOFF_MAX_S", "0.1")
    s = apply_overrides(base, {"read_nodes.max_unacked": 9, "produce.retry_after_s": 2.0, "data_dir": None})
    assert (s.read_nodes.max_unacked, s.produce.retry_after_s, s.produce.budget_s) == (9, 2.0, 3.0)
    assert s.produce.backoff_max_s == 0.9 and s.data_dir == base.data_dir
    assert apply_overrides(base, {}) is base
    with pytest.raises(SettingsKeyError):
        apply_overrides(base, {"read_nodes.nope": 1})


def test_settings_file_hands_the_sections_to_child_processes(tmp_path) -> None:
    """``vpq up`` writes ``run/settings.json``; every child reads it back whole."""
    s = load_settings(None, {
        "data_dir": tmp_path, **parse_assignments(["read_nodes.max_unacked=77", "produce.budget_s=0.25",
                                                   "rebalance.publisher.cas_attempts=2",
                                                   "redis.client.retries=1"]),
    })
    back = read_settings(write_settings(s))
    assert back == s
    assert ReadNodeOptions.from_settings(back.read_nodes).max_unacked == 77
    assert AppendPolicy.from_settings(back.produce).budget_s == 0.25
    assert PublisherOptions.from_settings(back.rebalance.publisher).cas_attempts == 2
    assert ClientOptions.from_settings(back.redis.client).retries == 1
