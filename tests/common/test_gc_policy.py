"""The role processes' garbage-collector policy (``common.gc_policy``) and that
``common.process_main.run`` applies it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from vpq.common import gc_policy
from vpq.common.process_main import run


@pytest.fixture
def restore_thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_apply_raises_the_young_threshold(restore_thresholds: None) -> None:
    gc.set_threshold(700, 10, 10)
    assert gc_policy.apply() == (gc_policy.GEN0_THRESHOLD, gc_policy.GEN1_THRESHOLD, gc_policy.GEN2_THRESHOLD)
    assert gc.get_threshold()[0] > 700 * 10


def test_run_applies_it_before_main(restore_thresholds: None) -> None:
    gc.set_threshold(700, 10, 10)
    seen: list[tuple[int, int, int]] = []

    async def main() -> None:
        seen.append(gc.get_threshold())

    run(main)
    assert seen == [(gc_policy.GEN0_THRESHOLD, gc_policy.GEN1_THRESHOLD, gc_policy.GEN2_THRESHOLD)]
