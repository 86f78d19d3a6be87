"""cli/serve_setup.py: bind and advertised addresses, explicit shape values."""

from __future__ import annotations

import pytest

from vpq.cli.serve_setup import (
    SHAPE_KEYS,
    ServeError,
    advertised,
    build_settings,
    explicit_shape,
    parse_advertise,
    parse_bind,
    record_composed_cluster,
    settle_reader,
    settle_write_node,
)


def test_bind_takes_a_host_and_an_optional_port() -> None:
    assert parse_bind("127.0.0.2", 0) == ("127.0.0.2", 0)
    assert parse_bind("127.0.0.2:7000", 0) == ("127.0.0.2", 7000)
    assert parse_bind("0.0.0.0", 8080) == ("0.0.0.0", 8080)
    assert parse_bind("[::1]:9000", 0) == ("::1", 9000)
    assert parse_bind("::1", 5) == ("::1", 5)
    for bad in (":7000", "host:x", "host:70000", "[::1"):
        with pytest.raises(ServeError):
            parse_bind(bad, 0)


def test_advertise_must_be_dialable() -> None:
    assert parse_advertise("10.0.0.5:7000") == "10.0.0.5:7000"
    assert parse_advertise("node-a.example:7000") == "node-a.example:7000"
    assert parse_advertise("[fd00::5]:7000") == "[fd00::5]:7000"
    with pytest.raises(ServeError, match="0.0.0.0 is not an address other hosts can reach"):
        parse_advertise("0.0.0.0:7000")
    with pytest.raises(ServeError, match="not an address"):
        parse_advertise("[::]:7000")
    with pytest.raises(ServeError, match="port 0 cannot be dialled"):
        parse_advertise("10.0.0.5:0")
    with pytest.raises(ServeError, match="is not HOST:PORT"):
        parse_advertise("10.0.0.5")


def test_a_wildcard_bind_needs_an_advertised_address() -> None:
    assert advertised("127.0.0.2", None) is None  # the bound address is registered
    assert advertised("0.0.0.0", "10.0.0.5:7000") == "10.0.0.5:7000"
    with pytest.raises(ServeError, match="add --advertise HOST:PORT"):
        advertised("0.0.0.0", None)


def test_explicit_shape_values_come_from_flags_or_any_source(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("VPQ_CLUSTER__PHYSICAL_PARTITIONS", raising=False)
    plain, held = build_settings(None, [], {"data_dir": tmp_path}, SHAPE_KEYS)
    assert held == {}
    assert explicit_shape(plain, held, {"physical_partitions": None, "replication_factor": None}) == {}
    assert explicit_shape(plain, held, {"physical_partitions": 8, "write_nodes": None}) == {"physical_partitions": 8}
    # --set values are held apart: replication_factor 2 is not checked against the default write_nodes 1
    with_set, held = build_settings(
        None, ["cluster.write_nodes=3", "cluster.replication_factor=2"], {"data_dir": tmp_path}, SHAPE_KEYS
    )
    assert with_set.cluster.write_nodes == 1 and with_set.cluster.replication_factor == 1
    assert explicit_shape(with_set, held, {"physical_partitions": 8}) == {
        "write_nodes": 3, "replication_factor": 2, "physical_partitions": 8
    }
    with pytest.raises(ServeError, match="positive integer"):
        explicit_shape(plain, {"cluster.write_nodes": "x"}, {})
    monkeypatch.setenv("VPQ_CLUSTER__PHYSICAL_PARTITIONS", "16")
    assert explicit_shape(build_settings(None, [], {})[0], {}, {}) == {"physical_partitions": 16}
    with pytest.raises(ServeError, match="nosuch"):
        build_settings(None, ["cluster.nosuch=1"], {})


async def test_serve_joins_a_cluster_vpq_up_created(tmp_path, redis_url) -> None:
    up_settings, _ = build_settings(None, ["cluster.write_nodes=2", "cluster.replication_factor=2"], {"data_dir": tmp_path})
    assert await record_composed_cluster(up_settings, redis_url) is None
    assert await record_composed_cluster(up_settings, redis_url) is None  # a restart of vpq up
    plain, _ = build_settings(None, [], {"data_dir": tmp_path})
    settings, index, created = await settle_write_node(plain, redis_url, "w1", {}, None)
    assert (index, created) == (1, False)  # vpq up's w1 slot, its shape adopted
    assert (settings.cluster.write_nodes, settings.cluster.replication_factor) == (2, 2)
    with pytest.raises(ServeError, match="all 2 write-node slots are taken"):
        await settle_write_node(plain, redis_url, "other", {}, None)
    with pytest.raises(ServeError, match="physical_partitions 8 \\(the cluster has 4\\)"):
        await settle_write_node(plain, redis_url, "w0", {"physical_partitions": 8}, None)
    reader = await settle_reader(plain, redis_url, lambda m: None)
    assert reader.cluster.physical_partitions == 4 and reader.cluster.write_nodes == 2
    bigger, _ = build_settings(None, ["cluster.write_nodes=3"], {"data_dir": tmp_path})
    note = await record_composed_cluster(bigger, redis_url)
    assert note and "write_nodes 3 (the cluster has 2)" in note and "w2" in note
