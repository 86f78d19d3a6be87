"""``CompletionRelay``: callbacks from threads run on the loop, in order, several per wake-up."""

from __future__ import annotations

import asyncio
import threading

from vpq.write_nodes.completion_relay import CompletionRelay


async def test_one_relay_per_loop() -> None:
    loop = asyncio.get_running_loop()
    assert CompletionRelay.of(loop) is CompletionRelay.of(loop)


async def test_calls_from_threads_run_on_the_loop_in_post_order() -> None:
    loop = asyncio.get_running_loop()
    relay = CompletionRelay.of(loop)
    seen: list[tuple[int, int]] = []
    on_loop: list[bool] = []
    done = asyncio.Event()
    per_thread, threads = 200, 4

    def record(t: int, i: int) -> None:
        on_loop.append(threading.current_thread() is threading.main_thread())
        seen.append((t, i))
        if len(seen) == per_thread * threads:
            done.set()

    def poster(t: int) -> None:
        for i in range(per_thread):
            relay.post(record, t, i)

    workers = [threading.Thread(target=poster, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    await asyncio.wait_for(done.wait(), 10)
    assert all(on_loop)
    for t in range(threads):
        assert [i for s, i in seen if s == t] == list(range(per_thread))


async def test_calls_posted_before_the_loop_runs_share_one_wake_up() -> None:
    loop = asyncio.get_running_loop()
    relay = CompletionRelay.of(loop)
    scheduled: list[object] = []
    real = loop.call_soon_threadsafe

    def counting(cb, *args):  # type: ignore[no-untyped-def]
        scheduled.append(cb)
        return real(cb, *args)

    loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
    try:
        ran: list[int] = []
        t = threading.Thread(target=lambda: [relay.post(ran.append, i) for i in range(5)])
        t.start()
        t.join()  # the loop has not run meanwhile: one drain takes all five
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    finally:
        del loop.call_soon_threadsafe
    assert ran == [0, 1, 2, 3, 4]
    assert len(scheduled) == 1


async def test_a_raising_call_is_reported_and_the_rest_still_run() -> None:
    loop = asyncio.get_running_loop()
    relay = CompletionRelay.of(loop)
    reported: list[BaseException] = []
    loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx["exception"]))
    ran: list[int] = []

    def boom() -> None:
        raise ValueError("boom")

    t = threading.Thread(target=lambda: (relay.post(boom), relay.post(ran.append, 1)))
    t.start()
    t.join()
    for _ in range(3):
        await asyncio.sleep(0)
    loop.set_exception_handler(None)
    assert ran == [1]
    assert len(reported) == 1 and isinstance(reported[0], ValueError)


def test_the_registry_does_not_keep_a_loop_alive() -> None:
    import gc
    import weakref

    loop = asyncio.new_event_loop()
    CompletionRelay.of(loop)
    ref = weakref.ref(loop)
    loop.close()
    del loop
    gc.collect()
    assert ref() is None
