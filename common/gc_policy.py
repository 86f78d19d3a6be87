"""Garbage-collector settings of the long-lived role processes (gateway, write and read
nodes), applied once at their entry point.

CPython runs a young collection every 700 net new container objects and, when enough has
been promoted, a full collection over the whole heap. A node's heap is mostly metadata
it keeps: with 10,000 queues the placement map and the queue registry make a full
collection of the write or read node take 70 to 100 ms, an event-loop pause every
produce and poll waits out. Re-reading the map after each publish (a new object graph
each time) promoted enough to trigger about 30 of them while 10,000 queues were created,
and about one a second under produce load.

With the young threshold at ``GEN0_THRESHOLD`` the objects of a request or a map read
are gone (freed by reference counting) before a collection sees them, so almost nothing
is promoted and full collections become rare: in the same 10,000-queue experiment none
ran, and creating the queues took 11.4 s instead of 13.9 s. Cyclic garbage waits a
little longer to be collected; the memory that costs is small next to the caches.
"""

from __future__ import annotations

import gc

GEN0_THRESHOLD = 50_000
GEN1_THRESHOLD = 20
GEN2_THRESHOLD = 20


def apply() -> tuple[int, int, int]:
    """Set the role-process thresholds; returns them as ``gc.get_threshold()`` does."""
    gc.set_threshold(GEN0_THRESHOLD, GEN1_THRESHOLD, GEN2_THRESHOLD)
    return gc.get_threshold()
