from __future__ import annotations

import asyncio

import pytest

from vpq.metadata.errors import QueueConfigError, QueueConflictError, QueueNotFoundError
from vpq.metadata.queues import QueueRecord
from vpq.metadata.store import MetadataStore


async def test_create_gets_defaults_and_id(md: MetadataStore) -> None:
    rec, created = await md.queues.create_or_update("orders", {"virtual_partitions": 8})
    assert created
    assert rec.name == "orders" and rec.id == 1
    assert rec.config == {
        "virtual_partitions": 8,
        "ordering": "key",
        "max_deliveries": 5,
        "visibility_timeout_ms": 30000,
        "retention_ms": -1,
        "max_message_bytes": 1024 * 1024,
        "dedup_window_ms": 300_000,
    }
    assert await md.queues.get("orders") == rec
    assert await md.queues.get_by_id(1) == rec
    assert await md.queues.get("nope") is None
    assert await md.queues.get_by_id(99) is None


async def test_update_changes_only_given_fields(md: MetadataStore) -> None:
    first, _ = await md.queues.create_or_update("q", {"virtual_partitions": 4, "max_deliveries": 3})
    rec, created = await md.queues.create_or_update("q", {"ordering": "none", "virtual_partitions": 16})
    assert not created
    assert rec.id == first.id
    assert rec.config["ordering"] == "none"
    assert rec.config["virtual_partitions"] == 16
    assert rec.config["max_deliveries"] == 3
    same, created = await md.queues.create_or_update("q", {})
    assert not created and same == rec


async def test_dedup_window_is_set_turned_off_and_defaults_for_older_records(md: MetadataStore) -> None:
    rec, _ = await md.queues.create_or_update("q", {"dedup_window_ms": 60_000})
    assert rec.config["dedup_window_ms"] == 60_000
    rec, _ = await md.queues.create_or_update("q", {"dedup_window_ms": 0})
    assert rec.config["dedup_window_ms"] == 0
    older = QueueRecord.from_json(
        '{"name": "old", "id": 7, "created_ms": 1, "updated_ms": 1, "config": {"virtual_partitions": 4}}'
    )
    assert older.config["dedup_window_ms"] == 300_000  # stored before the field existed


async def test_virtual_partitions_only_grow(md: MetadataStore) -> None:
    await md.queues.create_or_update("q", {"virtual_partitions": 16})
    with pytest.raises(QueueConflictError, match="only grow"):
        await md.queues.create_or_update("q", {"virtual_partitions": 8, "ordering": "none"})
    rec = await md.queues.require("q")
    assert rec.virtual_partitions == 16 and rec.ordering == "key"  # nothing changed


@pytest.mark.parametrize(
    "config",
    [
        {"virtual_partitions": 12},
        {"virtual_partitions": 8192},
        {"ordering": "fifo"},
        {"max_deliveries": 0},
        {"retention_ms": 0},
        {"bogus": 1},
        {"visibility_timeout_ms": "10"},
        {"dedup_window_ms": -1},
        {"dedup_window_ms": 3_600_001},
    ],
)
async def test_invalid_config_is_refused(md: MetadataStore, config: dict) -> None:
    with pytest.raises(QueueConfigError):
        await md.queues.create_or_update("q", config)
    assert await md.queues.get("q") is None


async def test_invalid_name_is_refused(md: MetadataStore) -> None:
    with pytest.raises(ValueError):
        await md.queues.create_or_update("bad:name", {})


async def test_delete_and_ids_are_never_reused(md: MetadataStore) -> None:
    a, _ = await md.queues.create_or_update("a", {})
    b, _ = await md.queues.create_or_update("b", {})
    assert [r.name for r in await md.queues.list()] == ["a", "b"]
    gone = await md.queues.delete("a")
    assert gone.id == a.id
    assert await md.queues.get("a") is None
    assert await md.queues.get_by_id(a.id) is None
    with pytest.raises(QueueNotFoundError):
        await md.queues.delete("a")
    again, created = await md.queues.create_or_update("a", {})
    assert created
    assert again.id not in (a.id, b.id) and again.id > b.id


async def test_concurrent_creators_agree_on_one_id(make_store) -> None:
    stores = [make_store() for _ in range(4)]
    results = await asyncio.gather(*(s.queues.create_or_update("shared", {}) for s in stores))
    assert sum(created for _, created in results) == 1
    assert len({rec.id for rec, _ in results}) == 1


async def test_get_many_in_order(md: MetadataStore) -> None:
    a, _ = await md.queues.create_or_update("a")
    b, _ = await md.queues.create_or_update("b", {"virtual_partitions": 2})
    assert await md.queues.get_many(["b", "nope", "a"]) == [b, None, a]
    assert await md.queues.get_many([]) == []


async def test_update_existing_touches_only_the_queue_of_that_id(md: MetadataStore) -> None:
    first, _ = await md.queues.create_or_update("q", {"virtual_partitions": 4})
    rec = await md.queues.update_existing("q", {"virtual_partitions": 8}, first.id)
    assert rec.id == first.id and rec.virtual_partitions == 8
    with pytest.raises(QueueNotFoundError):
        await md.queues.update_existing("never", {"virtual_partitions": 8}, first.id)
    assert await md.queues.get("never") is None  # nothing was created
    await md.queues.delete("q")
    with pytest.raises(QueueNotFoundError):
        await md.queues.update_existing("q", {"virtual_partitions": 16}, first.id)
    assert await md.queues.get("q") is None  # a deleted queue stays deleted
    again, created = await md.queues.create_or_update("q", {"virtual_partitions": 4})
    assert created and again.id != first.id
    with pytest.raises(QueueNotFoundError):  # the old id does not reach the new queue
        await md.queues.update_existing("q", {"virtual_partitions": 16}, first.id)
    assert (await md.queues.require("q")).virtual_partitions == 4


async def test_last_id_tells_deleted_ids_from_new_ones(md: MetadataStore) -> None:
    assert await md.queues.last_id() == 0
    a, _ = await md.queues.create_or_update("a")
    b, _ = await md.queues.create_or_update("b")
    await md.queues.delete("a")
    last = await md.queues.last_id()
    live = {r.id for r in await md.queues.list()}
    assert last == b.id and a.id <= last and a.id not in live and b.id in live
    c, _ = await md.queues.create_or_update("c")
    assert c.id > last
