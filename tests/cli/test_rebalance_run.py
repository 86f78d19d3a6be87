"""cli/rebalance_run.py: how the command ends."""

from __future__ import annotations

import pytest

from vpq.cli.rebalance_run import interrupted, resolve_target


def test_an_error_raised_while_an_interrupt_unwinds_counts_as_the_interrupt():
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("Gateway must be connected to send cancel cmd.")  # noqa: B904
    except RuntimeError as exc:
        assert interrupted(exc)
    assert not interrupted(RuntimeError("plain failure"))


def test_a_sentinel_url_is_checked_where_it_is_given(tmp_path):
    target = resolve_target(tmp_path, "redis+sentinel://10.0.0.1:26379,10.0.0.2/vpqmeta", None)
    assert target.redis_url == "redis+sentinel://10.0.0.1:26379,10.0.0.2/vpqmeta"
    with pytest.raises(ValueError, match="master name"):
        resolve_target(tmp_path, "redis+sentinel://10.0.0.1:26379", None)
