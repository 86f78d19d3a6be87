"""Pure parts of the metadata package: key names, name checks, queue config."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.config.settings import QueueDefaults, RedisSettings
from vpq.metadata.connection import client_from_settings
from vpq.metadata.errors import QueueConfigError
from vpq.metadata.keys import Keys
from vpq.metadata.map_entries import changes_between, decode_entry, encode_entry, map_token
from vpq.metadata.names import check_id, check_name
from vpq.metadata.queue_config import FIELDS, default_config, validate_partial


def test_every_key_is_under_the_prefix_and_distinct() -> None:
    k = Keys("vpq-a")
    names = [
        k.queues(), k.queue_ids(), k.queue_seq(), k.contexts(), k.context_ids(), k.context_seq(), k.map(),
        k.map_queues(), k.map_changes(), k.map_load(), k.map_history(),
        k.lineage("q"), k.nodes("write"), k.node_info("write"), k.lease("pp:1"), k.fence("pp:1"), k.fence_floor(),
        k.groups("q"), k.group("q", "g"), k.group_deadlines("q", "g"), k.group_members("q", "g"),
        k.group_start("q", "g"), k.acks("q", "g"), k.events(), k.events_version(), k.events_log(),
    ]  # fmt: skip
    assert all(n.startswith("vpq-a:") for n in names)
    assert len(set(names)) == len(names)
    with pytest.raises(ValueError):
        Keys("")


def test_name_checks() -> None:
    assert check_name("queue", "orders.v2_x-1") == "orders.v2_x-1"
    for bad in ("", "a:b", "a b", "x" * 129, None, ".", ".."):
        with pytest.raises(ValueError):
            check_name("queue", bad)
    assert check_name("queue", "...") == "..." and check_name("group", ".a") == ".a"
    assert check_id("consumer id", "c:1") == "c:1"
    for bad_id in ("c 1", ".", ".."):
        with pytest.raises(ValueError):
            check_id("consumer id", bad_id)


def test_defaults_come_from_settings() -> None:
    cfg = default_config(QueueDefaults(virtual_partitions=32, ordering="none"))
    assert set(cfg) == set(FIELDS)
    assert cfg["virtual_partitions"] == 32 and cfg["ordering"] == "none" and cfg["retention_ms"] == -1


@given(st.integers(0, 13))
@settings(max_examples=50, deadline=None)
def test_powers_of_two_up_to_the_maximum(exp: int) -> None:
    v = 1 << exp
    if v <= 4096:
        assert validate_partial({"virtual_partitions": v}) == {"virtual_partitions": v}
    else:
        with pytest.raises(QueueConfigError):
            validate_partial({"virtual_partitions": v})
    if v > 2:
        with pytest.raises(QueueConfigError):
            validate_partial({"virtual_partitions": v - 1})


def test_none_means_absent_and_bools_are_not_ints() -> None:
    assert validate_partial({"ordering": None, "max_deliveries": 2}) == {"max_deliveries": 2}
    with pytest.raises(QueueConfigError) as e:
        validate_partial({"max_deliveries": True})
    assert e.value.field == "max_deliveries"


def test_client_needs_a_url() -> None:
    with pytest.raises(ValueError):
        client_from_settings(RedisSettings())


_entry = st.lists(st.integers(0, 7), min_size=1, max_size=4).filter(lambda p: len(p) & (len(p) - 1) == 0).map(
    lambda p: {"virtual_partitions": len(p), "placement": p}
)
_queues = st.dictionaries(st.sampled_from("abcdef"), _entry, max_size=6)


@settings(max_examples=200, deadline=None)
@given(_queues, _queues)
def test_changes_between_lead_from_one_map_to_the_other(base: dict, new: dict) -> None:
    changes = changes_between(base, new)
    out = dict(base)
    for name, q in changes.items():
        if q is None:
            out.pop(name)
        else:
            out[name] = q
    assert out == new
    assert all(base.get(n) != q for n, q in changes.items())  # nothing unchanged is written
    assert (map_token({"queues": base}) == map_token({"queues": new})) == (base == new)
    for q in new.values():
        assert decode_entry(encode_entry(q)) == q
        assert encode_entry(q) == encode_entry({"virtual_partitions": q["virtual_partitions"],
                                                "placement": tuple(q["placement"])})
