"""Key hashing: which virtual partition a message belongs to.

Contract (pinned by golden-value tests, never to change within ``/v1``):

- ``key_hash(key)`` is MurmurHash3 x86 32-bit of the key bytes, seed 0, as an
  UNSIGNED int in ``[0, 2**32)``. A ``str`` key is hashed as its UTF-8 bytes.
- ``vp_of_hash(h, V) = h mod V`` with ``V`` a power of two, i.e. ``h & (V - 1)``.
  Because V only ever doubles, the vp of a hash under ``2V`` is either its vp
  under ``V`` or that plus ``V``: splitting vp ``i`` yields ``i`` and ``i + V``.
- Messages without a key get a *spread hash* from a ``KeylessSpreader``: a
  32-bit counter, so consecutive keyless messages visit the vps round robin and
  land evenly. Writers should store the (key or spread) hash with each record,
  so that readers can re-project old records after a split with
  ``vp_of_hash(stored_hash, V_new)``: this works the same for keyed and keyless
  records, and each record belongs to exactly one vp under any V.

Pure logic: no I/O.
"""

from __future__ import annotations

import mmh3

HASH_SPACE = 1 << 32
"""Number of distinct hash values (hashes are unsigned 32-bit)."""


def is_power_of_two(n: int) -> bool:
    """True for 1, 2, 4, 8, ...; False for 0, negatives and non-powers."""
    return isinstance(n, int) and not isinstance(n, bool) and n > 0 and n & (n - 1) == 0


def check_virtual_partitions(v: int, name: str = "virtual_partitions") -> int:
    """Return ``v`` when it is a valid vp count (a power of two in ``[1, 2**32]``),
    else raise ``ValueError`` naming ``name``."""
    if not is_power_of_two(v) or v > HASH_SPACE:
        raise ValueError(f"{name} must be a power of two between 1 and 2**32, got {v!r}")
    return v


def key_hash(key: bytes | str) -> int:
    """MurmurHash3 32-bit, seed 0, unsigned, of ``key`` (``str`` keys as UTF-8)."""
    if isinstance(key, str):
        key = key.encode("utf-8")
    return mmh3.hash(key, 0, signed=False)


def vp_of_hash(h: int, virtual_partitions: int) -> int:
    """The vp of hash ``h`` among ``virtual_partitions`` (a power of two): ``h mod V``."""
    return h & (virtual_partitions - 1)


class KeylessSpreader:
    """Spread hashes for messages without a key: a wrapping 32-bit counter.

    ``next_hash()`` returns ``start, start + 1, ...`` modulo ``2**32``; since V is a
    power of two (dividing ``2**32``), any ``V`` consecutive spread hashes cover
    every vp exactly once. Deterministic for a given ``start``; keep one instance
    per queue (or per producer path). Not thread-safe: use one per thread/loop.
    """

    __slots__ = ("_next",)

    def __init__(self, start: int = 0) -> None:
        if not isinstance(start, int) or isinstance(start, bool):
            raise ValueError(f"start must be an int, got {start!r}")
        self._next = start % HASH_SPACE

    def next_hash(self) -> int:
        """The next spread hash in ``[0, 2**32)``."""
        h = self._next
        self._next = (h + 1) % HASH_SPACE
        return h

    def next_vp(self, virtual_partitions: int) -> int:
        """The vp for the next keyless message under ``virtual_partitions``."""
        return vp_of_hash(self.next_hash(), virtual_partitions)


def hash_for_key(key: bytes | str | None, spread: KeylessSpreader) -> int:
    """The record hash: ``key_hash(key)`` for a keyed message, else the spreader's next hash.
    An empty key (``b""``) is a key like any other (it hashes to 0)."""
    if key is None:
        return spread.next_hash()
    return key_hash(key)


def vp_for_key(key: bytes | str | None, virtual_partitions: int, spread: KeylessSpreader) -> int:
    """The vp of a message with ``key`` (``None`` = keyless, spread round robin)."""
    return vp_of_hash(hash_for_key(key, spread), virtual_partitions)


def split_children(vp: int, virtual_partitions: int) -> tuple[int, int]:
    """The two vps that ``vp`` becomes when ``virtual_partitions`` doubles: ``(vp, vp + V)``."""
    if not 0 <= vp < virtual_partitions:
        raise ValueError(f"vp {vp} out of range for {virtual_partitions} virtual partitions")
    return vp, vp + virtual_partitions


def ancestor_vp(vp: int, old_virtual_partitions: int) -> int:
    """The vp under a smaller, earlier ``old_virtual_partitions`` that ``vp`` descends from."""
    return vp & (old_virtual_partitions - 1)
