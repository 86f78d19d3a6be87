import pytest
from pydantic import ValidationError

from vpq.config.settings import load_settings


def test_defaults_are_durable_and_match_api_md():
    s = load_settings()
    assert s.log.fsync_policy == "group"
    assert (s.gateway.host, s.gateway.port) == ("127.0.0.1", 8080)
    assert (s.cluster.write_nodes, s.cluster.read_nodes, s.cluster.physical_partitions) == (1, 1, 4)
    assert s.queues.virtual_partitions == 16 and s.queues.max_deliveries == 5
    assert s.queues.visibility_timeout_ms == 30000 and s.queues.max_message_bytes == 1024 * 1024
    assert s.redis.url is None  # no URL: vpq up starts its own Redis


def test_precedence_flags_over_env_over_toml(tmp_path, monkeypatch):
    toml = tmp_path / "vpq.toml"
    toml.write_text('[cluster]\nwrite_nodes = 3\nread_nodes = 2\n[log]\nfsync_policy = "interval"\n')
    monkeypatch.setenv("VPQ_CLUSTER__READ_NODES", "5")
    s = load_settings(toml, {"cluster.write_nodes": 7, "gateway.port": None})
    assert s.cluster.write_nodes == 7  # flag wins
    assert s.cluster.read_nodes == 5  # env beats the file
    assert s.log.fsync_policy == "interval"  # file beats the default
    assert s.gateway.port == 8080  # a flag that was not given masks nothing


def test_config_file_from_env_and_bad_values(tmp_path, monkeypatch):
    toml = tmp_path / "c.toml"
    toml.write_text("[queues]\nvirtual_partitions = 32\n")
    monkeypatch.setenv("VPQ_CONFIG", str(toml))
    assert load_settings().queues.virtual_partitions == 32
    toml.write_text("[queues]\nvirtual_partitions = 12\n")
    with pytest.raises(ValidationError, match="power of two"):
        load_settings()
    with pytest.raises(FileNotFoundError):
        load_settings(tmp_path / "missing.toml")
    monkeypatch.delenv("VPQ_CONFIG")
    toml.write_text("[nonsense]\nx = 1\n")
    with pytest.raises(ValidationError):
        load_settings(toml)


@pytest.mark.parametrize(
    "section", ["log", "redis", "redis.client", "cluster", "gateway", "queues", "rebalance", "read_nodes", "produce"]
)
def test_an_unknown_key_in_any_section_is_an_error_naming_it(tmp_path, monkeypatch, section):
    toml = tmp_path / "typo.toml"
    toml.write_text(f"[{section}]\nfsync_polcy = 1\n")
    with pytest.raises(ValidationError, match="fsync_polcy"):
        load_settings(toml)
    env = "VPQ_" + "__".join(part.upper() for part in section.split(".")) + "__FSYNC_POLCY"
    monkeypatch.setenv(env, "1")
    with pytest.raises(ValidationError, match="fsync_polcy"):
        load_settings()
