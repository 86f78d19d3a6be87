"""``ReadAhead``: bytes read past the most advanced reader."""

from __future__ import annotations

from vpq.read_nodes.read_ahead import ReadAhead


def test_nothing_is_ahead_until_a_reader_reports() -> None:
    ahead = ReadAhead()
    ahead.read(100, 1000)
    ahead.read(200, 1000)
    assert ahead.front is None and ahead.ahead() == 0


def test_reads_ending_above_the_most_advanced_reader_are_ahead() -> None:
    ahead = ReadAhead()
    for end in (100, 200, 300, 400):
        ahead.read(end, 1000)
    ahead.scanned("slow", 50)
    assert ahead.ahead() == 4000
    ahead.scanned("fast", 200)  # reads ending at 100 and 200 are behind it
    assert ahead.front == 200 and ahead.ahead() == 2000
    ahead.scanned("slow", 150)  # the slow one does not pull the front back
    assert ahead.front == 200 and ahead.ahead() == 2000
    ahead.scanned("fast", 401)
    assert ahead.ahead() == 0
    ahead.read(500, 10)
    assert ahead.ahead() == 10


def test_a_reader_moving_back_or_leaving_lowers_the_front() -> None:
    ahead = ReadAhead()
    ahead.scanned("a", 300)
    ahead.scanned("b", 100)
    ahead.scanned("a", 50)  # "a" started again lower (a reset)
    assert ahead.front == 100
    ahead.forget("b")
    assert ahead.front == 50
    ahead.forget("a")
    ahead.read(10, 5)
    assert ahead.front is None and ahead.ahead() == 0


def test_restart_forgets_what_was_read_and_empty_reads_count_nothing() -> None:
    ahead = ReadAhead()
    ahead.scanned("a", 0)
    ahead.read(100, 0)
    ahead.read(100, 700)
    assert ahead.ahead() == 700
    ahead.restart()
    assert ahead.ahead() == 0
