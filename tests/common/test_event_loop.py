"""``common.event_loop.run``: uvloop when asked for and installed, asyncio otherwise."""

from __future__ import annotations

import asyncio

import uvloop

from vpq.common import event_loop


async def _loop_type() -> type:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop())


def test_runs_on_uvloop_by_default() -> None:
    assert issubclass(event_loop.run(_loop_type()), uvloop.Loop)


def test_runs_on_asyncio_when_told_not_to_use_uvloop() -> None:
    assert not issubclass(event_loop.run(_loop_type(), use_uvloop=False), uvloop.Loop)


def test_leaves_the_global_policy_alone() -> None:
    before = type(asyncio.get_event_loop_policy())
    event_loop.run(_loop_type())
    assert type(asyncio.get_event_loop_policy()) is before
