"""Loss, duplicate and per-key order check of one benchmark run. Pure.

The harness tells the checker every message a system acknowledged (``expect``) and
every delivery a consumer saw, in the order the consumers started handling them
(``observe``). The report counts:

* ``lost``: acknowledged messages never delivered;
* ``duplicates``: deliveries beyond the first of the same message (at-least-once
  redeliveries, or a bug);
* ``reordered``: first deliveries of a key's message after a *later* message of the
  same key had already been delivered (``0, 2, 1`` counts one). Only an error when the
  run required per-key order (``order_required``);
* ``unexpected``: deliveries of messages never acknowledged (for example a produce
  that timed out on the client but was stored).

``ok`` is true when nothing was lost or duplicated, nothing unexpected came and, when
order is required, nothing was reordered.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class CheckReport:
    expected: int
    delivered: int
    distinct: int
    lost: int
    duplicates: int
    reordered: int
    unexpected: int
    order_required: bool

    @property
    def ok(self) -> bool:
        bad = self.lost + self.duplicates + self.unexpected
        if self.order_required:
            bad += self.reordered
        return bad == 0

    def to_json(self) -> dict[str, int | bool]:
        out: dict[str, int | bool] = asdict(self)
        out["ok"] = self.ok
        return out


class DeliveryChecker:
    """Collects expected messages and observed deliveries; see the module docstring."""

    def __init__(self, order_required: bool = True) -> None:
        self.order_required = order_required
        self._expected: set[tuple[str, int]] = set()
        self._seen: set[tuple[str, int]] = set()
        self._highest: dict[str, int] = {}
        self._delivered = 0
        self._duplicates = 0
        self._reordered = 0
        self._seen_expected = 0

    def expect(self, key: str, seq: int) -> None:
        """Message ``seq`` of ``key`` was acknowledged by the system."""
        ident = (key, seq)
        if ident in self._expected:
            return
        self._expected.add(ident)
        if ident in self._seen:
            self._seen_expected += 1

    def observe(self, key: str, seq: int) -> bool:
        """A consumer started handling message ``seq`` of ``key``; answers whether it was
        the first delivery of that message."""
        self._delivered += 1
        ident = (key, seq)
        if ident in self._seen:
            self._duplicates += 1
            return False
        self._seen.add(ident)
        if ident in self._expected:
            self._seen_expected += 1
        top = self._highest.get(key)
        if top is not None and seq < top:
            self._reordered += 1
        else:
            self._highest[key] = seq
        return True

    @property
    def expected_count(self) -> int:
        return len(self._expected)

    @property
    def distinct_count(self) -> int:
        """Distinct messages delivered so far (expected or not)."""
        return len(self._seen)

    @property
    def expected_seen(self) -> int:
        """Acknowledged messages delivered at least once so far (in whichever order
        ``expect`` and ``observe`` were called)."""
        return self._seen_expected

    def report(self) -> CheckReport:
        seen_expected = self._seen_expected
        return CheckReport(
            expected=len(self._expected),
            delivered=self._delivered,
            distinct=len(self._seen),
            lost=len(self._expected) - seen_expected,
            duplicates=self._duplicates,
            reordered=self._reordered,
            unexpected=len(self._seen) - seen_expected,
            order_required=self.order_required,
        )


def count_report(expected: int, stored: int) -> CheckReport:
    """The check of a queue whose messages were counted, not read back: fewer stored than
    acknowledged are ``lost``; more are ``unexpected`` (duplicates and unacknowledged
    stores cannot be told apart by a count). Sums of such reports are what ``merge``
    gives."""
    return CheckReport(
        expected=expected,
        delivered=stored,
        distinct=min(expected, stored),
        lost=max(0, expected - stored),
        duplicates=0,
        reordered=0,
        unexpected=max(0, stored - expected),
        order_required=False,
    )


def merge(reports: list[CheckReport]) -> CheckReport:
    """One report summing ``reports`` (order required if any required it)."""
    return CheckReport(
        expected=sum(r.expected for r in reports),
        delivered=sum(r.delivered for r in reports),
        distinct=sum(r.distinct for r in reports),
        lost=sum(r.lost for r in reports),
        duplicates=sum(r.duplicates for r in reports),
        reordered=sum(r.reordered for r in reports),
        unexpected=sum(r.unexpected for r in reports),
        order_required=any(r.order_required for r in reports),
    )
