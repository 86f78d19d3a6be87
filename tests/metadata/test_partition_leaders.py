"""Leadership records of replicated partitions: every change is a compare-and-swap (real Redis)."""

from __future__ import annotations

import asyncio


async def test_create_is_once_and_every_replica_starts_in_sync(md):
    rec = await md.leaders.create(3, [3, 0, 1])
    assert (rec.leader, rec.epoch, rec.replicas, rec.isr) == (-1, 0, (3, 0, 1), (3, 0, 1))
    await md.leaders.elect(3, 0, "w0", 0)
    again = await md.leaders.create(3, [3, 0, 1])
    assert again.epoch == 1 and again.leader == 0  # an existing record is left alone
    assert await md.leaders.get(4) is None


async def test_elect_needs_the_expected_epoch_and_an_in_sync_node(md):
    await md.leaders.create(0, [0, 1])
    first = await md.leaders.elect(0, 0, "w0", 0)
    assert first is not None and (first.leader, first.leader_id, first.epoch) == (0, "w0", 1)
    assert await md.leaders.elect(0, 1, "w1", 0) is None  # stale expected epoch
    second = await md.leaders.elect(0, 1, "w1", 1)
    assert second is not None and (second.leader, second.epoch) == (1, 2)
    assert second.isr == (1,)  # the old leader has to catch up again
    assert await md.leaders.elect(0, 0, "w0", 2) is None  # out of sync: never promoted
    forced = await md.leaders.elect(0, 0, "w0", 2, force=True)
    assert forced is not None and (forced.leader, forced.epoch, forced.isr) == (0, 3, (0,))


async def test_a_retried_election_answers_what_it_wrote(md):
    await md.leaders.create(1, [1, 0])
    a = await md.leaders.elect(1, 1, "w1", 0)
    b = await md.leaders.elect(1, 1, "w1", 0)  # the same call again (a retry after a lost answer)
    assert a == b and b is not None and b.epoch == 1


async def test_only_the_leader_of_the_current_epoch_changes_the_isr(md):
    await md.leaders.create(2, [2, 0, 1])
    await md.leaders.elect(2, 2, "w2", 0)
    assert await md.leaders.set_isr(2, 2, 1, [2])
    assert (await md.leaders.get(2)).isr == (2,)
    assert not await md.leaders.set_isr(2, 0, 1, [0, 1, 2])  # not the leader
    assert not await md.leaders.set_isr(2, 2, 0, [0, 1, 2])  # stale epoch
    assert await md.leaders.set_isr(2, 2, 1, [0])  # the leader always stays in
    assert (await md.leaders.get(2)).isr == (0, 2)


async def test_concurrent_elections_have_one_winner(md):
    await md.leaders.create(5, [0, 1, 2])
    won = await asyncio.gather(*(md.leaders.elect(5, n, f"w{n}", 0) for n in range(3)))
    assert sum(1 for r in won if r is not None) == 1
    many = await md.leaders.get_many([5, 6])
    assert list(many) == [5] and many[5].epoch == 1


async def test_a_forced_election_keeps_its_truncation_event(md):
    await md.leaders.create(7, [0, 1])
    await md.leaders.elect(7, 0, "w0", 0)
    assert await md.leaders.set_isr(7, 0, 1, [0])  # w1 fell out of sync
    assert await md.leaders.report_hw(7, 0, 1, 120)
    assert not await md.leaders.report_hw(7, 1, 1, 500)  # only the leader of the epoch reports
    rec = await md.leaders.get(7)
    assert (rec.hw, rec.forced, rec.unclean) == (120, -1, None)
    forced = await md.leaders.elect(7, 1, "w1", 1, force=True, event={"lost_offsets": 20, "node": "w1"})
    assert forced is not None and (forced.forced, forced.isr, forced.epoch) == (1, (1,), 2)
    assert forced.unclean == {"lost_offsets": 20, "node": "w1", "epoch": 2}
    assert not await md.leaders.note_truncation(7, 5, "w0", 9)  # another election's event
    assert await md.leaders.note_truncation(7, 2, "w0", 20)
    assert await md.leaders.note_truncation(7, 2, "w0", 1)
    claimed = await md.leaders.elect(7, 1, "w1", 2)  # the node's own claim clears the mark
    assert claimed is not None and claimed.epoch == 3 and claimed.forced == -1
    assert claimed.unclean == {"lost_offsets": 20, "node": "w1", "epoch": 2, "truncated": {"w0": 21}}


async def test_no_event_on_a_record_without_one(md):
    await md.leaders.create(8, [0, 1])
    assert not await md.leaders.note_truncation(8, 1, "w0", 3)
    assert (await md.leaders.get(8)).unclean is None
