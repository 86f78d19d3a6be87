import logging

from vpq.common.lifecycle import close_all


async def test_close_all_runs_every_closer_in_order_despite_failures(caplog):
    order = []

    async def ok(name):
        order.append(name)

    async def boom():
        order.append("boom")
        raise RuntimeError("broken")

    with caplog.at_level(logging.ERROR):
        await close_all([lambda: ok("a"), None, boom, lambda: ok("b")], logging.getLogger("t"), "thing")
    assert order == ["a", "boom", "b"]
    assert "error while stopping thing" in caplog.text
