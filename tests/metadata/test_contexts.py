from __future__ import annotations

import asyncio

import pytest

from vpq.metadata.store import MetadataStore


async def test_intern_is_idempotent_and_resolvable(md: MetadataStore) -> None:
    a = await md.contexts.intern("prod", "", "")
    b = await md.contexts.intern("test", "eu-1", "feat-a")
    assert a != b
    assert await md.contexts.intern("", "", "") == a  # empty env means prod
    assert await md.contexts.resolve(b) == ("test", "eu-1", "feat-a")
    assert md.contexts.cached_id("test", "eu-1", "feat-a") == b


async def test_concurrent_interning_gives_one_id(make_store) -> None:
    stores = [make_store() for _ in range(5)]
    ctxs = [("prod", "", f"lane-{i}") for i in range(10)]
    results = await asyncio.gather(*(s.contexts.intern(*c) for s in stores for c in ctxs))
    by_ctx: dict[tuple[str, str, str], set[int]] = {}
    for (c, cid) in zip([c for _ in stores for c in ctxs], results):
        by_ctx.setdefault(c, set()).add(cid)
    assert all(len(ids) == 1 for ids in by_ctx.values())
    assert len({next(iter(ids)) for ids in by_ctx.values()}) == len(ctxs)
    # a fresh process resolves the same ids from Redis
    fresh = make_store()
    for c, ids in by_ctx.items():
        assert await fresh.contexts.resolve(next(iter(ids))) == c
    assert len(await fresh.contexts.load_all()) == len(ctxs)


async def test_unknown_id_and_bad_values(md: MetadataStore) -> None:
    with pytest.raises(KeyError):
        await md.contexts.resolve(12345)
    with pytest.raises(ValueError):
        await md.contexts.intern("Prod", "", "")
    with pytest.raises(ValueError):
        await md.contexts.intern("prod", "a/b", "")
