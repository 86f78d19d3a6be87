"""cli/rebalance_run.py: how the command ends."""

from __future__ import annotations

from vpq.cli.rebalance_run import interrupted


def test_an_error_raised_while_an_interrupt_unwinds_counts_as_the_interrupt():
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("Gateway must be connected to send cancel cmd.")  # noqa: B904
    except RuntimeError as exc:
        assert interrupted(exc)
    assert not interrupted(RuntimeError("plain failure"))
